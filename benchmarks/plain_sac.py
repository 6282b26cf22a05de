"""A minimal hand-written SAC on robosuite Lift: the baseline of ``sac_throughput.py``.

What a researcher writes without TorchRL (CleanRL's ``sac_continuous_action.py`` style): robosuite
envs stepped in a Python loop, a NumPy ring buffer, two separate Q-networks (and their targets),
a tanh-normal actor, automatic entropy tuning, one fused Adam over everything (three parameter
groups), Python-loop soft target updates — sequential: step the envs, then update. The SAC
recipe's settings: Lift, Panda, OSC controller, proprio + object state (60 inputs), 7 actions,
sparse reward, episodes end on success or after 200 steps, 2 envs stepped one after the other,
2x256 MLPs, batch 256, Adam 3e-4, gamma 0.99, tau 0.005, one update per frame after
``--learning-starts`` uniformly random frames. It imports nothing from vlmrb_torchrl, so it
measures a plain loop, not this package.

Usage: ``python benchmarks/plain_sac.py --frames 6000 --learning-starts 1000 --seed 0``; prints one
JSON line with ``env_steps``, ``loop_s``, ``env_steps_per_s`` (collection + learning) and ``updates``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import robosuite  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

logging.getLogger("robosuite_logs").setLevel(logging.ERROR)


def make_env(seed: int, horizon: int):
    return robosuite.make("Lift", robots="Panda", has_renderer=False, has_offscreen_renderer=False,
                          use_camera_obs=False, use_object_obs=True, reward_shaping=False, control_freq=20,
                          horizon=horizon, ignore_done=True, hard_reset=False, seed=seed)


def flat(obs: dict) -> np.ndarray:
    return np.concatenate([obs["robot0_proprio-state"], obs["object-state"]]).astype(np.float32)


def mlp(inputs: int, outputs: int, hidden: int = 256) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, outputs))


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.net = mlp(obs_dim, 2 * act_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw_std = self.net(obs).chunk(2, -1)
        std = F.softplus(raw_std + math.log(math.e - 1)).clamp_min(1e-4)  # 1 at 0, as TorchRL's biased softplus
        u = mean + std * torch.randn_like(mean)
        action = torch.tanh(u)
        log_prob = torch.distributions.Normal(mean, std).log_prob(u) - torch.log(1 - action.pow(2) + 1e-6)
        return action, log_prob.sum(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=6_000)
    parser.add_argument("--learning-starts", type=int, default=1_000)
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    gamma, tau, lr = 0.99, 0.005, 3e-4

    envs = [make_env(args.seed + i, args.horizon) for i in range(args.num_envs)]
    obs = np.stack([flat(env.reset()) for env in envs])
    steps = np.zeros(args.num_envs, dtype=np.int64)
    obs_dim, act_dim = obs.shape[1], envs[0].action_dim
    low, high = envs[0].action_spec

    actor = Actor(obs_dim, act_dim)
    q1, q2 = mlp(obs_dim + act_dim, 1), mlp(obs_dim + act_dim, 1)
    q1_target, q2_target = mlp(obs_dim + act_dim, 1), mlp(obs_dim + act_dim, 1)
    q1_target.load_state_dict(q1.state_dict())
    q2_target.load_state_dict(q2.state_dict())
    log_alpha = torch.zeros((), requires_grad=True)
    target_entropy = -float(act_dim)
    optim = torch.optim.Adam([{"params": actor.parameters()}, {"params": [*q1.parameters(), *q2.parameters()]},
                              {"params": [log_alpha]}], lr=lr, fused=True)

    capacity = args.frames
    buf_obs = np.zeros((capacity, obs_dim), np.float32)
    buf_next = np.zeros((capacity, obs_dim), np.float32)
    buf_act = np.zeros((capacity, act_dim), np.float32)
    buf_rew = np.zeros(capacity, np.float32)
    buf_term = np.zeros(capacity, np.float32)
    size = updates = 0

    start = time.perf_counter()
    frames = 0
    while frames < args.frames:
        # --- step every env once (the policy batched over the envs)
        if frames < args.learning_starts:
            actions = rng.uniform(low, high, size=(args.num_envs, act_dim)).astype(np.float32)
        else:
            with torch.no_grad():
                actions = actor(torch.from_numpy(obs))[0].numpy()
        for i, env in enumerate(envs):
            next_obs, reward, _, _ = env.step(actions[i].astype(np.float64))
            next_flat = flat(next_obs)
            steps[i] += 1
            success = bool(env._check_success())
            buf_obs[size], buf_act[size], buf_rew[size] = obs[i], actions[i], reward
            buf_next[size], buf_term[size] = next_flat, float(success)
            size += 1
            if success or steps[i] >= args.horizon:
                next_flat, steps[i] = flat(env.reset()), 0
            obs[i] = next_flat
        frames += args.num_envs
        if frames < args.learning_starts:
            continue
        # --- then one update per frame
        for _ in range(args.num_envs):
            idx = rng.integers(0, size, args.batch_size)
            o, a = torch.from_numpy(buf_obs[idx]), torch.from_numpy(buf_act[idx])
            r, d, o2 = torch.from_numpy(buf_rew[idx]), torch.from_numpy(buf_term[idx]), torch.from_numpy(buf_next[idx])
            alpha = log_alpha.detach().exp()
            with torch.no_grad():
                a2, logp2 = actor(o2)
                oa2 = torch.cat([o2, a2], -1)
                q_next = torch.min(q1_target(oa2), q2_target(oa2)).squeeze(-1) - alpha * logp2
                y = r + gamma * (1 - d) * q_next
            oa = torch.cat([o, a], -1)
            q_loss = F.mse_loss(q1(oa).squeeze(-1), y) + F.mse_loss(q2(oa).squeeze(-1), y)
            pi, logp = actor(o)
            opi = torch.cat([o, pi], -1)
            q_pi = torch.min(q1(opi), q2(opi)).squeeze(-1)  # critics get no gradient: only q_loss steps them
            actor_loss = (alpha * logp - q_pi).mean()
            alpha_loss = (-log_alpha * (logp.detach() + target_entropy)).mean()
            optim.zero_grad()
            q_loss.backward(inputs=[*q1.parameters(), *q2.parameters()])
            (actor_loss + alpha_loss).backward(inputs=[*actor.parameters(), log_alpha])
            optim.step()
            with torch.no_grad():
                for net, target in ((q1, q1_target), (q2, q2_target)):
                    for p, tp in zip(net.parameters(), target.parameters()):
                        tp.data.copy_(tau * p.data + (1 - tau) * tp.data)
            updates += 1
    loop_s = time.perf_counter() - start
    for env in envs:
        env.close()
    print(json.dumps({"env_steps": frames, "loop_s": loop_s, "env_steps_per_s": frames / loop_s,
                      "updates": updates}))


if __name__ == "__main__":
    main()
