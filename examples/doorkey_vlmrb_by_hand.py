"""VLM-RB composed by hand in a plain TorchRL DQN loop on MiniGrid DoorKey.

The way a TorchRL user adopts the pieces without the package's recipes:

    Collector(ParallelEnv of make_minigrid_env)            # agent: symbolic obs; VLM: frames/events
      -> TensorDictReplayBuffer(sampler=VLMPrioritizedSampler)   # stores transitions (no frames)
      -> ClipStream.push(batch, index, generations)         # cuts per-trajectory clips
      -> AsyncScorer(VLMScoreTransform(scorer))            # scores off the learner's thread
         (make_clip_scoring builds the stream and transform that fit the scorer)
      -> sampler.update_scores(...)                         # generation-checked write-back
    learner: rb.sample() -> DQNLoss -> rb.update_tensordict_priority

The scorer defaults to the privileged MiniGrid oracle (key picked up, door opened, goal
reached), a perfect "VLM" for ablations; ``--scorer python:my_module:my_fn`` plugs in your own.
``make_vlm_replay_buffer`` builds the same wiring in one call.

Run:
    python examples/doorkey_vlmrb_by_hand.py --total-frames 40000
"""

from __future__ import annotations

import argparse
import functools
import time

import torch
from tensordict.nn import TensorDictSequential
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import SerialEnv
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate

from vlmrb_torchrl import AsyncScorer, ClipSpec, VLMPrioritizedSampler, make_clip_scoring
from vlmrb_torchrl.envs import make_minigrid_env
from vlmrb_torchrl.scorers import make_scorer


def main(env_id: str = "MiniGrid-DoorKey-5x5-v0", scorer_spec: str = "oracle:minigrid", total_frames: int = 40_000,
         num_envs: int = 4, frames_per_batch: int = 128, clip_len: int = 16, seed: int = 0,
         learning_starts: int = 2_000, log_every: int = 20) -> dict:
    torch.manual_seed(seed)
    scorer = make_scorer(scorer_spec)
    needs_frames = "pixels" in scorer.in_keys  # the oracle reads events only: skip rendering
    env_fn = functools.partial(make_minigrid_env, env_id, render=needs_frames)
    env = SerialEnv(num_envs, env_fn)
    env.set_seed(seed)

    # agent: double DQN on the symbolic observation
    action_spec = env.action_spec_unbatched
    qnet = QValueActor(MLP(out_features=action_spec.space.n, num_cells=[256, 256]),
                       in_keys=["observation"], spec=action_spec)
    qnet(env.reset())
    explore = TensorDictSequential(qnet, EGreedyModule(action_spec, annealing_num_steps=total_frames * 2 // 5,
                                                       eps_init=1.0, eps_end=0.05))
    loss = DQNLoss(qnet, action_space=action_spec, delay_value=True, double_dqn=True, loss_function="smooth_l1")
    loss.make_value_estimator(gamma=0.99)
    target_update = HardUpdate(loss, value_network_update_interval=250)
    optim = torch.optim.Adam(loss.parameters(), lr=5e-4)

    # replay: the VLM-RB sampler in a plain TorchRL buffer
    capacity = 100_000
    updates = (total_frames - learning_starts) // 4
    sampler = VLMPrioritizedSampler(capacity, lambda_max=0.5, warmup=max(1, updates // 2))
    sampler.provenance = scorer.provenance
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=sampler, batch_size=64,
                                generator=torch.Generator().manual_seed(seed))
    # the clip stream carries what the scorer reads (frames only if it reads "pixels"), and the
    # transform packs the same keys for it
    stream, transform = make_clip_scoring(scorer, ClipSpec(clip_len=clip_len), frame_key="pixels")

    collector = Collector(env, explore, frames_per_batch=frames_per_batch, total_frames=total_frames,
                          auto_register_policy_transforms=False)
    successes, start, frames = [], time.perf_counter(), 0
    with AsyncScorer(transform, sampler, batch_size=64) as scoring:
        for i, batch in enumerate(collector):
            flat = batch.reshape(-1)  # [num_envs, T] -> [num_envs * T]; clips follow traj ids
            index = rb.extend(flat.exclude("pixels", ("next", "pixels")))  # frames never stored
            scoring.submit(stream.push(flat, index, sampler.generations(index)))
            frames += flat.numel()
            explore[1].step(flat.numel())
            done = flat["next", "done"]
            successes += flat["next", "success"][done].float().tolist()
            if frames >= learning_starts:
                for _ in range(flat.numel() // 4):
                    sample = rb.sample()
                    loss_td = loss(sample)
                    optim.zero_grad()
                    loss_td["loss"].backward()
                    torch.nn.utils.clip_grad_norm_(loss.parameters(), 10.0)
                    optim.step()
                    rb.update_tensordict_priority(sample)  # stored; shapes sampling with td_boost
                    target_update.step()
                collector.update_policy_weights_()
            if i % log_every == 0 and successes:
                stats = sampler.stats()
                print(f"frames {frames:>7}  train success(last 50) {sum(successes[-50:]) / len(successes[-50:]):.2f}  "
                      f"lambda {stats['lambda']:.2f}  scored {stats['fraction_scored']:.2f}  "
                      f"positives {stats['positive_fraction']:.3f}  backlog {scoring.backlog}")
        collector.shutdown()
        scoring.submit(stream.flush())
    result = {"frames": frames, "episodes": len(successes),
              "train_success_last_50": sum(successes[-50:]) / max(1, len(successes[-50:])),
              "frames_per_second": frames / (time.perf_counter() - start),
              **sampler.stats(), **{f"scorer_{k}": v for k, v in scoring.stats().items()}}
    print("final:", {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()})
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="MiniGrid-DoorKey-5x5-v0")
    parser.add_argument("--scorer", default="oracle:minigrid")
    parser.add_argument("--total-frames", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(env_id=args.env, scorer_spec=args.scorer, total_frames=args.total_frames, seed=args.seed)
