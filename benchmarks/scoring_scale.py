"""Scoring scale-out: clips/s and learner env-steps/s with 1, 2 and 4 Ray scorer workers.

A scorer that sleeps a fixed time per clip (``--delay``, default 20 ms) stands in for a VLM on
its own GPU: the sleep releases the CPU, so several workers overlap even on 2 cores. The learner
is a collector + learner loop over synthetic data (no env, so the CPU measures the scoring path):
each iteration stores a ``[4, 16]`` batch with ``rb.extend``, cuts its clips (``clip_len=8``,
stride 1: one clip per step), submits them to ``AsyncScorer(..., on_full="block")`` and does
one update (sample 64, a small MLP step) per 4 steps. With back-pressure the learner can never
run ahead of the scorers, so its env-steps/s is what the scorer pool sustains.

Every configuration starts its own pool on one local Ray cluster (``num_cpus=2``), waits until
each actor has answered, then measures for ``--seconds``. Configurations are interleaved over
``--repeats`` rounds (1, 2, 4, 1, 2, 4, ...); ``thread`` (the one-thread backend) is the
reference. Prints one row per run and the medians, with the 2-vs-1 clips/s ratio.

Usage:

    OMP_NUM_THREADS=1 python benchmarks/scoring_scale.py [--delay 0.02] [--workers thread,1,2,4] [--seconds 12] [--repeats 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from vlmrb_torchrl import AsyncScorer, ClipSpec, ClipStream, VLMPrioritizedSampler, VLMScoreTransform, make_async_scorer

CLIP_LEN, ENVS, STEPS, CAPACITY = 8, 4, 16, 100_000


class SleepScorer:
    """Sleeps ``delay`` seconds per clip (a VLM elsewhere), then returns a score read from the clip."""

    prompt = "sleep"
    in_keys = ["obs"]

    def __init__(self, delay: float):
        self.delay = delay
        self.provenance = {"backend": "sleep", "delay_s": delay}

    def score(self, clips):
        time.sleep(self.delay * clips.shape[0])
        return clips["obs"][..., 0].float().sigmoid().mean(1)


def batches(seed: int):
    """Endless synthetic collector batches ``[ENVS, STEPS]`` (episodes of 50 steps)."""
    g = torch.Generator().manual_seed(seed)
    t = 0
    while True:
        step = torch.arange(t, t + STEPS).expand(ENVS, STEPS)
        yield TensorDict({"obs": torch.randn(ENVS, STEPS, 8, generator=g),
                          ("collector", "traj_ids"): (step // 50) * ENVS + torch.arange(ENVS)[:, None],
                          ("next", "done"): step % 50 == 49}, batch_size=[ENVS, STEPS])
        t += STEPS


def run(workers: str, delay: float, seconds: float, seed: int) -> dict:
    torch.manual_seed(seed)
    sampler = VLMPrioritizedSampler(CAPACITY)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(CAPACITY), sampler=sampler, batch_size=64)
    stream = ClipStream(ClipSpec(clip_len=CLIP_LEN), frame_key=None, extra_keys=["obs"])
    transform = VLMScoreTransform(SleepScorer(delay), clip_len=CLIP_LEN, in_keys=())
    options = dict(max_pending=256, batch_size=16, on_full="block")
    if workers == "thread":
        pool = AsyncScorer(transform, sampler, **options)
    else:
        pool = make_async_scorer(transform, sampler, backend="ray", num_workers=int(workers), **options)
        import ray

        ray.get([w.actor.ready.remote() for w in pool._workers], timeout=300)  # actors up before the clock starts
    net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optim = torch.optim.Adam(net.parameters(), lr=1e-3)
    data = batches(seed)
    steps = 0
    scored0 = None
    try:
        t0 = time.perf_counter()
        while True:
            flat = next(data).reshape(-1)
            index = rb.extend(flat)
            pool.submit(stream.push(flat, index, sampler.generations(index)))  # blocks when the pool is behind
            for _ in range(len(flat) // 4):
                loss = net(rb.sample()["obs"]).pow(2).mean()
                optim.zero_grad()
                loss.backward()
                optim.step()
            now = time.perf_counter()
            if scored0 is None and now - t0 > 2.0:  # warm-up done: the pipeline is full
                t1, steps, scored0 = now, 0, pool.stats()["scored"]
            steps += len(flat)
            if scored0 is not None and now - t1 >= seconds:
                break
        elapsed = time.perf_counter() - t1
        stats = pool.stats()
    finally:
        pool.close(drain=False)
    return {"workers": workers, "clips_per_s": (stats["scored"] - scored0) / elapsed,
            "env_steps_per_s": steps / elapsed, "dropped": stats["dropped"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--delay", type=float, default=0.02, help="seconds of sleep per clip")
    parser.add_argument("--workers", default="thread,1,2,4", help="comma-separated: thread and/or Ray worker counts")
    parser.add_argument("--seconds", type=float, default=12.0, help="measured seconds per run")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    configs = args.workers.split(",")
    temp_dir = None
    if any(c != "thread" for c in configs):
        import ray

        temp_dir = tempfile.mkdtemp(prefix="vlmrb_ray_")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir)
    results: dict[str, list[dict]] = {c: [] for c in configs}
    try:
        print(f"{'workers':>8} {'clips/s':>9} {'env-steps/s':>12} {'dropped':>8}")
        for _ in range(args.repeats):
            for c in configs:  # interleaved: a busy neighbour slows every configuration alike
                r = run(c, args.delay, args.seconds, args.seed)
                results[c].append(r)
                print(f"{c:>8} {r['clips_per_s']:9.1f} {r['env_steps_per_s']:12.1f} {r['dropped']:8d}", flush=True)
    finally:
        if temp_dir is not None:
            import ray

            ray.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)
    print(f"\nmedians over {args.repeats} interleaved runs, {args.delay * 1000:g} ms/clip "
          f"(ideal: {1 / args.delay:.0f} clips/s per worker)")
    med = {c: (statistics.median(r["clips_per_s"] for r in rs), statistics.median(r["env_steps_per_s"] for r in rs))
           for c, rs in results.items()}
    for c, (clips, steps) in med.items():
        print(f"{c:>8} {clips:9.1f} {steps:12.1f}")
    if "1" in med and "2" in med:
        print(f"2 vs 1 workers: {med['2'][0] / med['1'][0]:.2f}x clips/s, {med['2'][1] / med['1'][1]:.2f}x env-steps/s")
    if "1" in med and "4" in med:
        print(f"4 vs 1 workers: {med['4'][0] / med['1'][0]:.2f}x clips/s, {med['4'][1] / med['1'][1]:.2f}x env-steps/s")


if __name__ == "__main__":
    main()
