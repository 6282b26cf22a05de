"""A minimal hand-written double DQN on MiniGrid: the baseline of ``learner_throughput.py``.

What a researcher writes without TorchRL (CleanRL style): gymnasium MiniGrid envs stepped in a
Python loop, MiniGrid's own partial view one-hot encoded with NumPy, a NumPy ring buffer,
n-step returns from a per-env window, and PyTorch's defaults (``nn.Linear`` MLP, ``Adam``) —
the recipe's settings: 2x256 tanh MLP, Huber loss, grad-norm clip 10, Adam lr 5e-4, gamma 0.99,
3-step returns, batch 64, one update per 4 frames after 5k, 8 envs, epsilon 1 -> 0.05 over 40%
of the frames, hard target copy every 250 updates, DoorKey's 5 actions. It imports nothing from
vlmrb_torchrl, so it measures the cost of a plain loop, not of this package.

With ``--eval-every N`` it evaluates like the recipe's defaults: every N frames and at the end,
``--eval-episodes`` episodes at epsilon 0.01 in one env, one episode after the other.

Usage: ``python benchmarks/plain_dqn.py --frames 30000 --seed 0 [--eval-every 10000]``; prints one
JSON line with ``env_steps``, ``loop_s`` (collection + learning + the evaluations before the last), ``env_steps_per_s``
and the last ``eval_success``.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import time

import gymnasium as gym
import minigrid  # noqa: F401  (registers the ids)
import numpy as np
import torch
import torch.nn.functional as F
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX
from torch import nn

ACTIONS = (0, 1, 2, 3, 5)  # left, right, forward, pickup, toggle


def encode(obs: dict) -> np.ndarray:
    image, direction = obs["image"], obs["direction"]
    n_obj, n_col, n_state = len(OBJECT_TO_IDX), len(COLOR_TO_IDX), len(STATE_TO_IDX)
    per_cell = n_obj + n_col + n_state
    cells = image.reshape(-1, 3).astype(np.int64)
    out = np.zeros(cells.shape[0] * per_cell + 4, dtype=np.float32)
    base = np.arange(cells.shape[0]) * per_cell
    out[base + cells[:, 0]] = 1
    out[base + n_obj + cells[:, 1]] = 1
    out[base + n_obj + n_col + cells[:, 2]] = 1
    out[cells.shape[0] * per_cell + direction] = 1
    return out


@torch.no_grad()
def evaluate(qnet: nn.Module, env_id: str, *, episodes: int, seed: int, rng: np.random.Generator) -> float:
    env = gym.make(env_id)
    successes = 0
    for episode in range(episodes):
        raw, done = env.reset(seed=seed + episode)[0], False
        while not done:
            greedy = int(qnet(torch.from_numpy(encode(raw))).argmax())
            a = int(rng.integers(len(ACTIONS))) if rng.random() < 0.01 else greedy
            raw, reward, terminated, truncated, _ = env.step(ACTIONS[a])
            done = terminated or truncated
        successes += reward > 0
    env.close()
    return successes / episodes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="MiniGrid-DoorKey-5x5-v0")
    parser.add_argument("--frames", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=0, help="0: no evaluation")
    parser.add_argument("--eval-episodes", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    n_envs, n_steps, gamma, batch, capacity = 8, 3, 0.99, 64, 100_000
    learning_starts, train_every, target_every, eps_frames = 5_000, 4, 250, int(0.4 * args.frames)

    envs = [gym.make(args.env) for _ in range(n_envs)]
    obs = [encode(env.reset(seed=args.seed + i)[0]) for i, env in enumerate(envs)]
    dim = obs[0].shape[0]
    qnet = nn.Sequential(nn.Linear(dim, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, len(ACTIONS)))
    target = copy.deepcopy(qnet)
    optim = torch.optim.Adam(qnet.parameters(), lr=5e-4)

    buf_obs = np.zeros((capacity, dim), np.float32)
    buf_next = np.zeros((capacity, dim), np.float32)
    buf_act = np.zeros(capacity, np.int64)
    buf_ret = np.zeros(capacity, np.float32)
    buf_disc = np.zeros(capacity, np.float32)  # gamma ** n, 0 after a termination
    size = pos = 0
    windows = [collections.deque() for _ in range(n_envs)]  # (obs, action, reward) of the last n steps

    def store(o, a, ret, nxt, disc):
        nonlocal size, pos
        buf_obs[pos], buf_act[pos], buf_ret[pos], buf_next[pos], buf_disc[pos] = o, a, ret, nxt, disc
        pos = (pos + 1) % capacity
        size = min(size + 1, capacity)

    def flush(window, nxt, terminated):
        # the oldest step's n-step return, bootstrapping from `nxt` unless the episode terminated
        ret = sum(r * gamma**k for k, (_, _, r) in enumerate(window))
        o, a, _ = window.popleft()
        store(o, a, ret, nxt, 0.0 if terminated else gamma ** (len(window) + 1))

    frames = updates = 0
    success = float("nan")
    next_eval = args.eval_every or None
    start = time.perf_counter()
    while frames < args.frames:
        eps = max(0.05, 1.0 - 0.95 * frames / eps_frames)
        with torch.no_grad():
            greedy = qnet(torch.from_numpy(np.stack(obs))).argmax(-1).numpy()
        for i, env in enumerate(envs):
            a = int(rng.integers(len(ACTIONS))) if rng.random() < eps else int(greedy[i])
            raw, reward, terminated, truncated, _ = env.step(ACTIONS[a])
            nxt = encode(raw)
            windows[i].append((obs[i], a, float(reward)))
            if len(windows[i]) == n_steps:
                flush(windows[i], nxt, terminated)
            if terminated or truncated:
                while windows[i]:
                    flush(windows[i], nxt, terminated)
                nxt = encode(env.reset()[0])
            obs[i] = nxt
            frames += 1
            if frames >= learning_starts and frames % train_every == 0 and size >= batch:
                idx = rng.integers(size, size=batch)
                o, nx = torch.from_numpy(buf_obs[idx]), torch.from_numpy(buf_next[idx])
                act, ret, disc = torch.from_numpy(buf_act[idx]), torch.from_numpy(buf_ret[idx]), torch.from_numpy(buf_disc[idx])
                q = qnet(o).gather(1, act[:, None]).squeeze(1)
                with torch.no_grad():
                    y = ret + disc * target(nx).gather(1, qnet(nx).argmax(1, keepdim=True)).squeeze(1)
                loss = F.smooth_l1_loss(q, y)
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(qnet.parameters(), 10.0)
                optim.step()
                updates += 1
                if updates % target_every == 0:
                    target.load_state_dict(qnet.state_dict())
        loop_s = time.perf_counter() - start  # as the recipe's env_steps_per_s: the last evaluation not included
        if next_eval is not None and (frames >= next_eval or frames >= args.frames):
            success = evaluate(qnet, args.env, episodes=args.eval_episodes, seed=args.seed + 10_000 + frames, rng=rng)
            next_eval += args.eval_every
    print(json.dumps({"env_steps": frames, "updates": updates, "loop_s": loop_s, "env_steps_per_s": frames / loop_s,
                      "eval_success": success}))


if __name__ == "__main__":
    main()
