"""Scoring overhead: learner env-steps/s with VLM-RB scoring vs plain uniform replay.

One collector + learner loop (double DQN on MiniGrid DoorKey, 4 envs, one update of 64 per 4
frames) per replay mode, all in one process, same seed:

- ``uniform``: TorchRL ``TensorDictReplayBuffer`` with its ``RandomSampler`` (baseline);
- ``uniform+render``: the same, with the env rendering frames (the VLM's input) every step;
- ``oracle``: ``make_vlm_replay_buffer(..., "oracle:minigrid")`` (clips, async worker, sampler);
- ``sleep:<ms>``: a frame-reading scorer that sleeps ``ms`` per clip, emulating a VLM on another
  device (the worker waits, the learner does not).

Prints env steps/s, the ratio to ``uniform``, the scorer backlog at the end and dropped clips.
Usage:

    python benchmarks/scoring_overhead.py [--frames 12000] [--modes uniform,uniform+render,oracle,sleep:0.5,sleep:2]
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

from vlmrb_torchrl import ClipSpec, make_vlm_replay_buffer
from vlmrb_torchrl.envs import make_minigrid_env


class SleepScorer:
    """Reads the frames, then sleeps ``delay`` seconds per clip (a VLM elsewhere)."""

    prompt = "sleep"
    in_keys = ["pixels", "mask"]

    def __init__(self, delay: float):
        self.delay = delay
        self.provenance = {"backend": "sleep", "delay_s": delay}

    def score(self, clips):
        time.sleep(self.delay * clips.shape[0])
        return clips["pixels"].float().mean((1, 2, 3, 4)) / 255


def run(mode: str, frames: int, env_id: str, seed: int, clip_len: int) -> dict:
    torch.manual_seed(seed)
    render = mode != "uniform" and mode != "oracle"
    env = SerialEnv(4, functools.partial(make_minigrid_env, env_id, render=render))
    env.set_seed(seed)
    action_spec = env.action_spec_unbatched
    qnet = QValueActor(MLP(out_features=action_spec.space.n, num_cells=[256, 256]), in_keys=["observation"],
                       spec=action_spec)
    qnet(env.reset())
    policy = TensorDictSequential(qnet, EGreedyModule(action_spec, annealing_num_steps=frames, eps_end=0.05))
    loss = DQNLoss(qnet, action_space=action_spec, delay_value=True, double_dqn=True)
    loss.make_value_estimator(gamma=0.99)
    target = HardUpdate(loss, value_network_update_interval=250)
    optim = torch.optim.Adam(loss.parameters(), lr=5e-4)

    capacity, generator = 100_000, torch.Generator().manual_seed(seed)
    if mode.startswith("uniform"):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), batch_size=64, generator=generator)
    else:
        scorer = "oracle:minigrid" if mode == "oracle" else SleepScorer(float(mode.split(":")[1]) / 1000)
        rb = make_vlm_replay_buffer(capacity, scorer, clip_spec=ClipSpec(clip_len=clip_len), batch_size=64,
                                    generator=generator, sampler_kwargs={"warmup": 1_000})

    collector = Collector(env, policy, frames_per_batch=128, total_frames=frames,
                          auto_register_policy_transforms=False)
    start, done = time.perf_counter(), 0
    for batch in collector:
        flat = batch.reshape(-1)
        rb.extend(flat if not mode.startswith("uniform") else flat.exclude("pixels", ("next", "pixels")))
        done += flat.numel()
        if done >= 2_000:
            for _ in range(flat.numel() // 4):
                sample = rb.sample()
                out = loss(sample)
                optim.zero_grad()
                out["loss"].backward()
                optim.step()
                target.step()
            collector.update_policy_weights_()
    elapsed = time.perf_counter() - start
    collector.shutdown()
    result = {"mode": mode, "steps_per_s": done / elapsed, "backlog": 0, "dropped": 0, "scored_fraction": float("nan")}
    if not mode.startswith("uniform"):
        stats = rb.vlm_stats()
        result.update(backlog=stats["scorer/backlog"], dropped=stats["scorer/dropped"],
                      scored_fraction=stats["fraction_scored"])
        rb.close(flush=False)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=12_000)
    parser.add_argument("--env", default="MiniGrid-DoorKey-5x5-v0")
    parser.add_argument("--clip-len", type=int, default=16)
    parser.add_argument("--modes", default="uniform,uniform+render,oracle,sleep:0.5,sleep:2")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; the median is reported")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    modes = args.modes.split(",")
    results = {m: [] for m in modes}
    for _ in range(args.repeats):  # interleave modes so machine noise hits all of them
        for mode in modes:
            results[mode].append(run(mode, args.frames, args.env, args.seed, args.clip_len))
            print(f"  run {mode}: {results[mode][-1]['steps_per_s']:.0f} steps/s", flush=True)
    print(f"{args.env}, {args.frames} frames, clip_len {args.clip_len}, median of {args.repeats}")
    print(f"{'mode':<16} {'steps/s':>9} {'x uniform':>9} {'backlog':>8} {'dropped':>8} {'scored':>7}")
    base = sorted(r["steps_per_s"] for r in results[modes[0]])[len(results[modes[0]]) // 2]
    for mode in modes:
        runs = sorted(results[mode], key=lambda r: r["steps_per_s"])
        r = runs[len(runs) // 2]
        print(f"{mode:<16} {r['steps_per_s']:>9.0f} {r['steps_per_s'] / base:>9.3f} {r['backlog']:>8} "
              f"{r['dropped']:>8} {r['scored_fraction']:>7.3f}")


if __name__ == "__main__":
    main()
