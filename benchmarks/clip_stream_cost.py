"""CPU cost of cutting clips: ``ClipStream.push`` against the per-trajectory stream it replaced.

``ClipStream`` cuts every trajectory segment of a batch at once; ``LoopClipStream``
(``tests/_clip_stream_loop.py``) is the earlier stream, one ``_advance``/``_cut`` per trajectory.
Both get the same DoorKey-like stream: ``--envs`` envs, ``--steps`` steps per env and batch
(the recipe's 8 x 8), random episode lengths (mean ``--mean-len``), 60x60x3 uint8 frames with
their ``("next", frame)``, one extra per-step entry, pooled frames and the outcome frame, as the
recipe's VLM replay cuts them. Both streams take each batch in turn (alternating which goes
first; main-thread CPU time, so a loaded machine moves both alike), and their clips are checked
equal at every push, then dropped, as a scorer would.

Usage::

    python benchmarks/clip_stream_cost.py [--batches 200] [--rounds 3] [--clip-len 16] [--stride 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from tensordict import TensorDict

from vlmrb_torchrl.scoring.clips import ClipSpec, ClipStream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _clip_stream_loop import LoopClipStream  # noqa: E402  (the tests' reference stream)


def make_batches(num: int, envs: int, steps: int, mean_len: int, size: int, seed: int) -> list[TensorDict]:
    """Flat ``[envs * steps]`` batches in env-major order, as ``rb.extend(batch.reshape(-1))`` sees them."""
    gen = torch.Generator().manual_seed(seed)
    traj, left, next_id = list(range(envs)), [0] * envs, envs
    for e in range(envs):
        left[e] = int(torch.randint(3, 2 * mean_len, (1,), generator=gen))
    batches = []
    for _ in range(num):
        ids = torch.empty(envs, steps, dtype=torch.long)
        done = torch.zeros(envs, steps, dtype=torch.bool)
        for e in range(envs):
            for t in range(steps):
                ids[e, t] = traj[e]
                left[e] -= 1
                if left[e] == 0:
                    done[e, t] = True
                    traj[e], next_id = next_id, next_id + 1
                    left[e] = int(torch.randint(3, 2 * mean_len, (1,), generator=gen))
        frames = torch.randint(0, 256, (envs, steps + 1, size, size, 3), dtype=torch.uint8, generator=gen)
        batch = TensorDict({"pixels": frames[:, :-1], ("collector", "traj_ids"): ids,
                            ("next", "done"): done[..., None], ("next", "pixels"): frames[:, 1:],
                            ("next", "success"): done[..., None].clone()}, batch_size=[envs, steps])
        batches.append(batch.reshape(-1))
    return batches


def run(spec: ClipSpec, batches: list[TensorDict]) -> dict[str, float]:
    """Both streams in lockstep, alternating which pushes first; main-thread CPU ms per push (the
    final flush included) of each. Each push's clips are compared, then dropped (as a scorer would)."""
    streams = {"per-trajectory": LoopClipStream(spec, pool_frames=True, extra_keys=[("next", "success")]),
               "vectorised": ClipStream(spec, pool_frames=True, extra_keys=[("next", "success")])}
    cpu = dict.fromkeys(streams, 0.0)
    offset = 0
    for i, batch in enumerate([*batches, None]):
        index = torch.arange(offset, offset + (0 if batch is None else batch.numel()))
        offset += index.numel()
        outs = {}
        for name in list(streams)[:: 1 if i % 2 else -1]:
            start = time.thread_time()
            stream = streams[name]
            outs[name] = stream.flush() if batch is None else stream.push(batch, index, torch.zeros_like(index))
            cpu[name] += time.thread_time() - start
        assert same(outs["vectorised"], outs["per-trajectory"]), f"the streams' clips differ at push {i}"
    return {name: t / len(batches) * 1e3 for name, t in cpu.items()}


def same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return (all(torch.equal(x, y) for x, y in zip((a.target_clip, a.index, a.generation),
                                                   (b.target_clip, b.index, b.generation)))
            and (a.clips == b.clips).all() and (a.frames == b.frames).all())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--mean-len", type=int, default=25)
    parser.add_argument("--frame-size", type=int, default=60)
    parser.add_argument("--clip-len", type=int, default=16)
    parser.add_argument("--stride", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = ClipSpec(clip_len=args.clip_len, stride=args.stride)
    batches = make_batches(args.batches, args.envs, args.steps, args.mean_len, args.frame_size, seed=0)
    run(spec, batches[: len(batches) // 4])  # warm-up
    ratios = []
    for r in range(args.rounds):
        ms = run(spec, batches)
        ratios.append(ms["per-trajectory"] / ms["vectorised"])
        print(f"round {r}: per-trajectory {ms['per-trajectory']:.3f} ms/push, vectorised "
              f"{ms['vectorised']:.3f} ms/push (CPU), {ratios[-1]:.2f}x less; same clips", flush=True)
    print(f"median: vectorised {statistics.median(ratios):.2f}x less CPU per push "
          f"({args.envs} envs x {args.steps} steps, clip_len {args.clip_len}, stride {args.stride})")


if __name__ == "__main__":
    main()
