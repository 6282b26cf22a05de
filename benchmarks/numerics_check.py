"""Checks that a recipe of this checkout computes exactly what the recipe of another revision computes.

Speed-ups of the recipe must not change its numbers: learning studies run from frozen checkouts
and are compared with runs of the current code. This runs ``vlmrb train dqn`` with a fixed seed,
synchronous scoring and one torch thread from this checkout and from ``--before REV`` (a temporary
``git worktree``), for each replay mode, and compares:

- ``metrics.csv``: every column but the timing ones (``env_steps_per_s``, ``time_s``,
  ``scorer_clips_per_s``), as written (6 significant digits); columns only this checkout writes (new
  measurements) are not compared;
- the final checkpoint, bit for bit: the networks' and optimizer's tensors, the counters, the RNG
  states, and every tensor of the replay buffer's storage and sampler state (counters only this
  checkout keeps are not compared).

Exits 1 and names the first difference of each arm when they differ.

``--recipe sac`` checks the SAC recipe instead (robosuite Lift, ``oracle:robosuite`` by default);
``--before .`` runs both arms from this checkout, so that ``--now-extra`` / ``--before-extra`` (overrides
of one arm) compare two settings that must not change the numbers, e.g. frames drawn from state
(``frames_from_state``) against frames passed by the envs.

Usage::

    python benchmarks/numerics_check.py --before main --frames 20000 --replays uniform,vlm
    python benchmarks/numerics_check.py --recipe sac --before . --frames 3000 --replays vlm_td \
        --scorer builtin:lift --now-extra frames_from_state=true --before-extra frames_from_state=false
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
#: Checkpoint entries this checkout may add without changing the learner: counters of new measurements.
ADDED_OK = ("state/counters/",)


def command(replay: str, frames: int, out: Path, env: str, extra: list[str], *, recipe: str = "dqn",
            scorer: str | None = None) -> list[str]:
    if recipe == "sac":
        return [sys.executable, "-m", "vlmrb_torchrl.cli", "train", "sac", f"env={env}", f"replay={replay}",
                f"scorer={scorer or 'oracle:robosuite'}", f"total_frames={frames}",
                f"learning_starts={min(1000, frames // 2)}", f"eval_every={frames}", "eval_episodes=2",
                f"checkpoint_every={frames}", "async_scoring=false", "torch_threads=1", "progress=false",
                "tensorboard=false", "gallery_clips=0", "seed=0", f"output_dir={out}", "overwrite=true", *extra]
    return [sys.executable, "-m", "vlmrb_torchrl.cli", "train", "dqn", f"env={env}", f"replay={replay}",
            f"scorer={scorer or 'oracle:minigrid'}", f"total_frames={frames}", "learning_starts=2000",
            "eval_every=10000", "eval_episodes=20", f"checkpoint_every={frames}", "async_scoring=false",
            "torch_threads=1", "progress=false", "tensorboard=false", "gallery_clips=0", "seed=0",
            f"output_dir={out}", "overwrite=true", *extra]


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
    """Every leaf of a checkpoint, in one form for both checkpoint formats (TorchRL's ``rb.dumps``
    directory of earlier versions, ``replay.pt`` + ``replay.json`` since issue 35): the modules' and
    optimizer's tensors, the counters, the RNG states, the replay's filled storage rows, writer,
    generator and sampler state (a VLM sampler's per-slot arrays at full capacity, a TorchRL
    ``PrioritizedSampler``'s priorities of the filled slots).
    """
    import torch

    state = torch.load(path / "state.pt", weights_only=False, map_location="cpu")  # (our own runs' files)
    rng = state.get("rng", {})
    if isinstance(rng.get("numpy"), tuple):  # the older form: NumPy's and Python's state tuples
        name, keys, pos, has_gauss, cached = rng["numpy"]
        rng["numpy"] = {"name": name, "keys": torch.from_numpy(keys.astype("int64")), "pos": int(pos),
                        "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    if isinstance(rng.get("python"), tuple):
        version, internal, gauss = rng["python"]
        rng["python"] = [version, list(internal), gauss]
    leaves = dict(_flatten(state, "state"))
    replay = path / "replay"
    leaves.update(_replay_leaves(replay) if (replay / "replay.json").exists() else _dumps_leaves(replay))
    return leaves


def _replay_leaves(replay: Path) -> dict[str, object]:
    import json

    import torch

    from vlmrb_torchrl.recipes.replay_checkpoint import expand

    meta = json.loads((replay / "replay.json").read_text())
    tensors = torch.load(replay / "replay.pt", weights_only=True)
    leaves = {"replay/len": meta["len"], "replay/writer/cursor": meta["writer"]["_cursor"],
              "replay/writer/write_count": meta["writer"]["_write_count"], "replay/batch_size": meta["batch_size"]}
    if "rng" in tensors:
        leaves["replay/rng"] = tensors["rng"]
    for key, stored, note in zip(meta["storage_keys"], tensors["storage"], meta["storage_notes"]):
        leaves["replay/storage/" + "/".join(key)] = expand(stored, note)
    sampler = meta["sampler"]
    if sampler["kind"] == "vlm":
        for name, note in sampler["notes"].items():
            used = expand(tensors["sampler"][name], note)
            full = torch.zeros((sampler["capacity"], *used.shape[1:]), dtype=used.dtype)
            full[: sampler["used"]] = used
            leaves[f"replay/sampler/{name}"] = full
        leaves.update(_flatten(json.loads(json.dumps(sampler["scalars"])), "replay/sampler"))
    elif sampler["kind"] == "prioritized":
        leaves["replay/sampler/sum"] = tensors["sampler"]["sum"].double()
        leaves["replay/sampler/min"] = tensors["sampler"]["min"].double()
        leaves.update(_flatten([float(x) for x in tensors["sampler"]["max_priority"]], "replay/sampler/max_priority"))
    return leaves


def _dumps_leaves(replay: Path) -> dict[str, object]:
    """The same leaves from TorchRL's ``rb.dumps`` directory (checkpoints before issue 35)."""
    import json

    import numpy as np
    import torch
    from tensordict import TensorDict

    storage = replay / "storage"
    n = json.loads((storage / "storage_metadata.json").read_text())["len"]
    writer = json.loads((replay / "writer" / "metadata.json").read_text())
    leaves = {"replay/len": n, "replay/writer/cursor": writer["cursor"], "replay/writer/write_count":
              writer["write_count"], "replay/batch_size": json.loads((replay / "buffer_metadata.json").read_text())[
                  "batch_size"]}
    if (replay / "rng_state").exists():
        leaves["replay/rng"] = TensorDict.load_memmap(replay / "rng_state")["rng_state"].clone()
    rows = TensorDict.load_memmap(storage)
    for key in rows.keys(include_nested=True, leaves_only=True):
        name = "/".join((key,) if isinstance(key, str) else key)
        leaves[f"replay/storage/{name}"] = rows[key][:n].clone()
    sampler = replay / "sampler"
    if (sampler / "slots").exists():
        slots = TensorDict.load_memmap(sampler / "slots")
        for name in slots.keys():
            leaves[f"replay/sampler/{name}"] = slots[name].clone()
        scalars = json.loads((sampler / "sampler_metadata.json").read_text())
        leaves.update(_flatten(scalars, "replay/sampler"))
    elif (sampler / "sumtree.memmap").exists():
        meta = json.loads((sampler / "sampler_metadata.json").read_text())
        capacity = int(meta["_max_capacity"])
        for name, tree in (("sum", "sumtree"), ("min", "mintree")):
            values = np.fromfile(sampler / f"{tree}.memmap", dtype=np.float64 if (
                sampler / f"{tree}.memmap").stat().st_size == 8 * capacity else np.float32)
            leaves[f"replay/sampler/{name}"] = torch.from_numpy(values[:n].astype(np.float64))
        leaves.update(_flatten([float(x) for x in meta["_max_priority"]], "replay/sampler/max_priority"))
    return leaves


def _relocated(leaf, before_root: Path | None):
    """A string leaf of the ``--before`` run with its checkout's path replaced by this checkout's: a
    scorer's provenance records its model directory (``builtin:`` models ship inside the package), which
    names the checkout and is not a difference between the two codes."""
    if before_root is None or not isinstance(leaf, str):
        return leaf
    return leaf.replace(str(before_root.resolve()), str(ROOT.resolve()))


def compare(now: Path, before: Path, before_root: Path | None = None) -> list[str]:
    """What differs between two runs: metrics rows (timings aside) and every leaf of the last checkpoint.
    ``before_root``: the checkout the ``before`` run ran from (its path in string leaves is mapped to this one's).

    Examples:
        >>> _relocated(str(Path("/tmp/x/before/vlmrb_torchrl/m").resolve()), Path("/tmp/x/before")) == str(
        ...     ROOT.resolve() / "vlmrb_torchrl" / "m")
        True
    """
    problems = []
    rows_now, rows_before = metrics_rows(now / "metrics.csv"), metrics_rows(before / "metrics.csv")
    if len(rows_now) != len(rows_before):
        problems.append(f"metrics.csv: {len(rows_now)} rows vs {len(rows_before)}")
    for i, (a, b) in enumerate(zip(rows_now, rows_before)):
        # columns this checkout adds (new measurements) are not differences of the learner's numbers
        diff = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k) and k in b}
        if diff:
            problems.append(f"metrics.csv row {i}: " + ", ".join(f"{k} {x} vs {y}" for k, (x, y) in diff.items()))
            break
    steps = sorted((now / "checkpoints").glob("step_*"))
    if not steps:
        return [*problems, "no checkpoint"]
    ckpt_now, ckpt_before = steps[-1], before / "checkpoints" / steps[-1].name
    leaves_now, leaves_before = checkpoint_leaves(ckpt_now), checkpoint_leaves(ckpt_before)
    added = {k for k in set(leaves_now) - set(leaves_before) if k.startswith(ADDED_OK)}
    if set(leaves_now) - added != set(leaves_before):
        problems.append(f"checkpoint entries differ: {sorted((set(leaves_now) - added) ^ set(leaves_before))[:8]}")
    for key in sorted(set(leaves_now) & set(leaves_before)):
        if not _same(leaves_now[key], _relocated(leaves_before[key], before_root)):
            problems.append(f"checkpoint {ckpt_now.name}: {key} differs")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="git revision to compare with ('.': this checkout)")
    parser.add_argument("--recipe", choices=("dqn", "sac"), default="dqn")
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--env", default=None, help="default: MiniGrid-DoorKey-5x5-v0 (dqn), robosuite/Lift (sac)")
    parser.add_argument("--scorer", default=None, help="default: oracle:minigrid (dqn), oracle:robosuite (sac)")
    parser.add_argument("--replays", default="uniform,vlm")
    parser.add_argument("--extra", default="", help="more key=value overrides for both arms, space-separated")
    parser.add_argument("--now-extra", default="", help="overrides for this checkout's arm only")
    parser.add_argument("--before-extra", default="", help="overrides for the --before arm only")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    args = parser.parse_args()
    env_id = args.env or ("robosuite/Lift" if args.recipe == "sac" else "MiniGrid-DoorKey-5x5-v0")
    extra = {"now": args.extra.split() + args.now_extra.split(),
             "before": args.extra.split() + args.before_extra.split()}
    same_checkout = args.before == "."
    with tempfile.TemporaryDirectory(prefix="numerics_check_") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        before = ROOT if same_checkout else Path(tmp) / "before"
        if not same_checkout:
            subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT, check=True,
                           capture_output=True)
        failed = False
        try:
            for replay in args.replays.split(","):
                procs = {name: run(cwd, command(replay, args.frames, work / f"{name}_{replay}", env_id, extra[name],
                                                recipe=args.recipe, scorer=args.scorer))
                         for name, cwd in (("now", ROOT), ("before", before))}
                for name, proc in procs.items():
                    _, err = proc.communicate()
                    if proc.returncode:
                        print(f"{replay} ({name}) failed:\n{err[-3000:]}", file=sys.stderr)
                        return 2
                problems = compare(work / f"now_{replay}", work / f"before_{replay}",
                                   None if same_checkout else before)
                status = "identical" if not problems else "DIFFERENT"
                arms = (f"{args.now_extra or 'now'} vs {args.before_extra or 'before'}" if same_checkout
                        else f"to {args.before}")
                print(f"{args.recipe} {replay}: {status}, {arms} ({args.frames} frames, {env_id})", flush=True)
                for p in problems[:10]:
                    print(f"  {p}")
                failed |= bool(problems)
        finally:
            if not same_checkout:
                subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
