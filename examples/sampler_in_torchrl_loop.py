"""VLMPrioritizedSampler inside a plain TorchRL DQN loop (CartPole).

What this shows: how the sampler drops into an existing TorchRL pipeline —
``Collector`` → ``TensorDictReplayBuffer(sampler=VLMPrioritizedSampler(...))`` →
``DQNLoss`` — with scores written back under generation checks and TD errors
flowing through ``rb.update_tensordict_priority`` (``td_boost=True``).

The "scorer" here is a hand-written stand-in for a VLM: it calls a transition
progress when the pole is near upright and the cart near the centre. The real
pipeline renders clips and asks a frozen VLM (see the README); the sampler does not
care where scores come from.

Run:
    python examples/sampler_in_torchrl_loop.py --total-frames 20000
"""

from __future__ import annotations

import argparse
import time

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, RewardSum, StepCounter, TransformedEnv
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, SoftUpdate

from vlmrb_torchrl import VLMPrioritizedSampler


def upright_score(batch: TensorDictBase) -> torch.Tensor:
    """Stand-in for a VLM judgement: 1 when the pole is upright and the cart centred."""
    obs = batch["next", "observation"]
    cart_x, pole_angle = obs[..., 0].abs(), obs[..., 2].abs()
    return ((1 - pole_angle / 0.21) * (1 - cart_x / 2.4)).clamp(0, 1)


def main(total_frames: int = 20_000, seed: int = 0, frames_per_batch: int = 100,
         warmup_samples: int = 2_000, log_every: int = 5) -> dict:
    torch.manual_seed(seed)
    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter(500))
    env.append_transform(RewardSum())
    env.set_seed(seed)

    qnet = QValueActor(MLP(out_features=2, num_cells=[128, 128]), in_keys=["observation"],
                       spec=env.action_spec)
    qnet(env.reset())  # initialise lazy layers
    explore = TensorDictSequential(
        qnet, EGreedyModule(env.action_spec, annealing_num_steps=total_frames // 2, eps_end=0.05)
    )
    loss = DQNLoss(qnet, action_space=env.action_spec, delay_value=True, double_dqn=True)
    loss.make_value_estimator(gamma=0.99)
    target_update = SoftUpdate(loss, eps=0.99)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)

    capacity = 50_000
    sampler = VLMPrioritizedSampler(capacity, lambda_max=0.5, warmup=warmup_samples, td_boost=True)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler, batch_size=64,
                                generator=torch.Generator().manual_seed(seed))

    collector = Collector(env, explore, frames_per_batch=frames_per_batch, total_frames=total_frames,
                          init_random_frames=1_000, auto_register_policy_transforms=False)
    returns, start = [], time.perf_counter()
    for i, batch in enumerate(collector):
        batch = batch.reshape(-1)
        index = rb.extend(batch)
        generation = sampler.generations(index)  # recorded at insertion...
        sampler.update_scores(index, upright_score(batch), generation)  # ...checked at write-back
        returns += batch["next", "episode_reward"][batch["next", "done"]].tolist()
        explore[1].step(frames_per_batch)
        if len(rb) < 1_000:
            continue
        for _ in range(frames_per_batch // 4):
            sample = rb.sample()
            loss_td = loss(sample)  # writes sample["td_error"]; uses priority_weight
            optim.zero_grad()
            loss_td["loss"].backward()
            optim.step()
            rb.update_tensordict_priority(sample)  # TD errors -> td_boost
            target_update.step()
        collector.update_policy_weights_()
        if i % log_every == 0 and returns:
            stats = sampler.stats()
            print(f"frames {(i + 1) * frames_per_batch:>7} "
                  f"return(last 10) {sum(returns[-10:]) / len(returns[-10:]):6.1f} "
                  f"lambda {stats['lambda']:.2f} scored {stats['fraction_scored']:.2f} "
                  f"mean score {stats['mean_score']:.2f}")
    collector.shutdown()
    result = {
        "episodes": len(returns),
        "mean_return_last_10": sum(returns[-10:]) / max(1, len(returns[-10:])),
        "frames_per_second": total_frames / (time.perf_counter() - start),
        **sampler.stats(),
    }
    print("final:", {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()})
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--total-frames", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(total_frames=args.total_frames, seed=args.seed)
