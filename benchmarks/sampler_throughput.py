"""Sampler throughput: VLMPrioritizedSampler vs TorchRL's PrioritizedSampler and RandomSampler.

Measures, in one process on the same storage:
- ``sample()`` of a batch (default 256) from a full buffer (default 1M slots);
- an update of 1024 priorities (``update_priority`` for PER; ``update_scores`` with
  generations and ``update_priority`` with ``td_boost`` for ours);
- resident memory per slot added by building the sampler and filling it.

Prints the medians and the ratios against PrioritizedSampler. Usage:

    python benchmarks/sampler_throughput.py [--capacity 1000000] [--batch 256] [--repeats 300]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, PrioritizedSampler, RandomSampler

from vlmrb_torchrl import VLMPrioritizedSampler
from vlmrb_torchrl.replay._sumtree import torchrl_trees_available


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def median_us(fn, repeats: int) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--update", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    cap = args.capacity

    storage = LazyTensorStorage(cap)
    storage.set(torch.arange(cap), TensorDict(obs=torch.zeros(cap, dtype=torch.uint8), batch_size=[cap]))
    all_index = torch.arange(cap)
    g = torch.Generator().manual_seed(0)
    upd_index = torch.randint(0, cap, (args.update,), generator=g)
    upd_value = torch.rand(args.update, generator=g)

    rows = []

    def build(name, factory, prepare):
        gc.collect()
        before = rss_bytes()
        sampler = factory()
        prepare(sampler)
        mem = (rss_bytes() - before) / cap
        return sampler, mem

    # TorchRL PrioritizedSampler (PER)
    have_per = torchrl_trees_available()
    if have_per:
        def prep_per(s):
            s.mark_update(all_index)
            s.update_priority(all_index, torch.rand(cap, generator=g))

        per, mem = build("per", lambda: PrioritizedSampler(cap, alpha=0.6, beta=0.4), prep_per)
        per._rng = torch.Generator().manual_seed(1)
        rows.append(("PrioritizedSampler (TorchRL PER)", median_us(lambda: per.sample(storage, args.batch), args.repeats),
                     median_us(lambda: per.update_priority(upd_index, upd_value), args.repeats), mem))
    rand, _ = build("random", RandomSampler, lambda s: None)
    rows.append(("RandomSampler", median_us(lambda: rand.sample(storage, args.batch), args.repeats), float("nan"), 0.0))

    backends = ["torchrl", "numpy"] if have_per else ["numpy"]
    for backend in backends:
        for beta, td_boost in [(0.0, False), (0.4, True)]:
            def prep(s):
                s.mark_update(all_index)
                s.update_scores(all_index[: cap // 2], torch.rand(cap // 2, generator=g))
                s._rng = torch.Generator().manual_seed(1)
                s.sample(storage, 8)  # builds the min trees when beta > 0

            vlm, mem = build("vlm", lambda: VLMPrioritizedSampler(cap, warmup=0, beta=beta, td_boost=td_boost,
                                                                  tree_backend=backend), prep)
            gen = vlm.generations(upd_index)
            sample_us = median_us(lambda: vlm.sample(storage, args.batch), args.repeats)
            # first scores of never-scored slots (the common case: fresh transitions) ...
            fresh = iter([(i, vlm.generations(i)) for i in torch.arange(cap // 2, cap).split(args.update)])
            def first_scores():
                index, generation = next(fresh)
                vlm.update_scores(index, upd_value, generation)

            first_us = median_us(first_scores, args.repeats)
            rows.append((f"VLMPrioritizedSampler [{backend}, beta={beta}, td_boost={td_boost}] first scores",
                         sample_us, first_us, mem))
            # ... and re-scores of scored slots (several clips covering one transition)
            score_us = median_us(lambda: vlm.update_scores(upd_index, upd_value, gen), args.repeats)
            rows.append((f"VLMPrioritizedSampler [{backend}, beta={beta}, td_boost={td_boost}] re-scores",
                         sample_us, score_us, mem))
            if td_boost:
                td_us = median_us(lambda: vlm.update_priority(upd_index, upd_value), args.repeats)
                rows.append((f"VLMPrioritizedSampler [{backend}, beta={beta}, td_boost={td_boost}] update_priority",
                             sample_us, td_us, mem))

    print(f"capacity {cap:,}, batch {args.batch}, update {args.update}, torch {torch.__version__}")
    print(f"{'sampler':<78} {'sample us':>10} {'update us':>10} {'B/slot':>7} {'x PER smp':>9} {'x PER upd':>9}")
    base_s, base_u = (rows[0][1], rows[0][2]) if have_per else (float("nan"), float("nan"))
    for name, s_us, u_us, mem in rows:
        print(f"{name:<78} {s_us:>10.1f} {u_us:>10.1f} {mem:>7.1f} {s_us / base_s:>9.2f} {u_us / base_u:>9.2f}")


if __name__ == "__main__":
    main()
