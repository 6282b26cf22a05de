"""Checks that the DQN recipe of this checkout computes exactly what the recipe of another revision computes.

Speed-ups of the recipe must not change its numbers: learning studies run from frozen checkouts
and are compared with runs of the current code. This runs ``vlmrb train dqn`` with a fixed seed,
synchronous scoring and one torch thread from this checkout and from ``--before REV`` (a temporary
``git worktree``), for each replay mode, and compares:

- ``metrics.csv``: every column but the timing ones (``env_steps_per_s``, ``time_s``,
  ``scorer_clips_per_s``), as written (6 significant digits);
- the final checkpoint, bit for bit: the networks' and optimizer's tensors, the counters, the RNG
  states, and every tensor of the replay buffer's storage and sampler state.

Exits 1 and names the first difference of each arm when they differ.

Usage::

    python benchmarks/numerics_check.py --before main --frames 20000 --replays uniform,vlm
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("env_steps_per_s", "time_s", "scorer_clips_per_s")


def command(replay: str, frames: int, out: Path, env: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "vlmrb_torchrl.cli", "train", "dqn", f"env={env}", f"replay={replay}",
            "scorer=oracle:minigrid", f"total_frames={frames}", "learning_starts=2000", "eval_every=10000",
            "eval_episodes=20", f"checkpoint_every={frames}", "async_scoring=false", "torch_threads=1",
            "progress=false", "tensorboard=false", "gallery_clips=0", "seed=0", f"output_dir={out}",
            "overwrite=true", *extra]


def run(cwd: Path, cmd: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(cwd)}
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def metrics_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(f)]


def _flatten(obj, prefix=""):
    """(path, leaf) pairs of nested dicts / lists / tuples / tensors / arrays."""
    import numpy as np
    import torch

    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flatten(v, f"{prefix}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _flatten(v, f"{prefix}[{i}]")
    elif isinstance(obj, (torch.Tensor, np.ndarray)):
        yield prefix, obj
    else:
        yield prefix, obj


def _same(a, b) -> bool:
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b) or (
            a.is_floating_point() and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    return a == b or (a != a and b != b)


def checkpoint_leaves(path: Path) -> dict[str, object]:
    """Every leaf of the final checkpoint: ``state.pt`` and the replay directory's tensors and JSON files.

    The replay storage's tensors are compared on their filled rows only: the rows beyond the
    storage's length are allocated but never written (their bytes are whatever memory held).
    """
    import json

    import numpy as np
    import torch

    leaves = dict(_flatten(torch.load(path / "state.pt", weights_only=False, map_location="cpu"), "state"))
    storage = path / "replay" / "storage"
    filled = json.loads((storage / "storage_metadata.json").read_text())["len"] if storage.exists() else None
    for file in sorted((path / "replay").rglob("*")):
        rel = file.relative_to(path).as_posix()
        if file.suffix == ".memmap" and filled is not None and storage in file.parents:
            meta = json.loads((file.parent / "meta.json").read_text())[file.stem]
            row = int(np.prod(meta["shape"][1:])) * torch.empty((), dtype=getattr(torch, meta["dtype"].split(".")[-1])
                                                               ).element_size()
            leaves[rel] = file.read_bytes()[: filled * row]
        elif file.suffix == ".memmap":
            leaves[rel] = file.read_bytes()
        elif file.suffix == ".json":
            leaves.update(_flatten(json.loads(file.read_text()), rel))
        elif file.suffix in (".pt", ".pth"):
            leaves.update(_flatten(torch.load(file, weights_only=False, map_location="cpu"), rel))
        elif file.is_file():
            leaves[rel] = file.read_bytes()
    return leaves


def compare(now: Path, before: Path) -> list[str]:
    problems = []
    rows_now, rows_before = metrics_rows(now / "metrics.csv"), metrics_rows(before / "metrics.csv")
    if len(rows_now) != len(rows_before):
        problems.append(f"metrics.csv: {len(rows_now)} rows vs {len(rows_before)}")
    for i, (a, b) in enumerate(zip(rows_now, rows_before)):
        diff = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
        if diff:
            problems.append(f"metrics.csv row {i}: " + ", ".join(f"{k} {x} vs {y}" for k, (x, y) in diff.items()))
            break
    steps = sorted((now / "checkpoints").glob("step_*"))
    if not steps:
        return [*problems, "no checkpoint"]
    ckpt_now, ckpt_before = steps[-1], before / "checkpoints" / steps[-1].name
    leaves_now, leaves_before = checkpoint_leaves(ckpt_now), checkpoint_leaves(ckpt_before)
    if set(leaves_now) != set(leaves_before):
        problems.append(f"checkpoint entries differ: {sorted(set(leaves_now) ^ set(leaves_before))[:8]}")
    for key in sorted(set(leaves_now) & set(leaves_before)):
        if not _same(leaves_now[key], leaves_before[key]):
            problems.append(f"checkpoint {ckpt_now.name}: {key} differs")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="git revision to compare with")
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--env", default="MiniGrid-DoorKey-5x5-v0")
    parser.add_argument("--replays", default="uniform,vlm")
    parser.add_argument("--extra", default="", help="more key=value overrides for both arms, space-separated")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    args = parser.parse_args()
    extra = args.extra.split()
    with tempfile.TemporaryDirectory(prefix="numerics_check_") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        before = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT, check=True,
                       capture_output=True)
        failed = False
        try:
            for replay in args.replays.split(","):
                procs = {name: run(cwd, command(replay, args.frames, work / f"{name}_{replay}", args.env, extra))
                         for name, cwd in (("now", ROOT), ("before", before))}
                for name, proc in procs.items():
                    _, err = proc.communicate()
                    if proc.returncode:
                        print(f"{replay} ({name}) failed:\n{err[-3000:]}", file=sys.stderr)
                        return 2
                problems = compare(work / f"now_{replay}", work / f"before_{replay}")
                status = "identical" if not problems else "DIFFERENT"
                print(f"{replay}: {status} to {args.before} ({args.frames} frames, {args.env})", flush=True)
                for p in problems[:10]:
                    print(f"  {p}")
                failed |= bool(problems)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
