"""The DQN recipe's env-steps/s against a hand-written loop and against the recipe of an earlier commit.

One run, interleaved: every round runs each arm once, one process at a time (one torch
thread each), so that a machine getting busier or idler moves every arm alike. Arms:

- ``plain``: :mod:`benchmarks/plain_dqn.py <plain_dqn>`, a minimal PyTorch double DQN with the
  recipe's settings (imports nothing from this package);
- ``recipe:<replay>``: ``vlmrb train dqn`` of this checkout (``uniform``, ``per``, ``vlm`` with
  ``oracle:minigrid``);
- ``before:<replay>``: the same command run from ``--before REV`` (a temporary ``git worktree``),
  the recipe as it was — e.g. the commit before the fast learner.

All on DoorKey-5x5 with the recipe's defaults (8 envs, batch 64, one update per 4 frames after
5k, 2x256 MLP, 3-step double DQN), ``--frames`` frames, synchronous scoring. Two modes:

- ``--mode defaults`` (what ``vlmrb train dqn replay=... total_frames=30000`` does): evaluation
  every 10k frames and at the end (50 episodes at epsilon 0.01; the plain loop evaluates the
  same way, one episode after the other) and the recipe's checkpoint at the end;
- ``--mode loop``: the learning loop alone (one 10-episode evaluation at the end, which the
  env-steps/s does not include; no checkpoint before the end).

Reported per arm: env-steps/s over the loop (the recipe's own ``env_steps_per_s``, evaluations
included in ``defaults`` mode; the plain loop's counterpart) and the process's wall-clock (imports,
set-up, evaluations, checkpoint), median over rounds, and the ratios against ``plain`` and against
``before:<same replay>``.

Usage::

    python benchmarks/learner_throughput.py --frames 30000 --rounds 2 --before b7b1378 --mode defaults
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPLAYS = ("uniform", "per", "vlm")


def recipe_command(replay: str, frames: int, out: Path, mode: str) -> list[str]:
    common = [sys.executable, "-m", "vlmrb_torchrl.cli", "train", "dqn", f"replay={replay}", "scorer=oracle:minigrid",
              f"total_frames={frames}", "async_scoring=false", "progress=false", "gallery_clips=0", "seed=0",
              f"output_dir={out}", "overwrite=true"]
    if mode == "defaults":  # the recipe's own eval_every/eval_episodes/checkpoint_every/tensorboard
        return common
    return [*common, f"eval_every={frames}", "eval_episodes=10", f"checkpoint_every={10 * frames}", "tensorboard=false"]


def plain_command(frames: int, mode: str) -> list[str]:
    command = [sys.executable, str(ROOT / "benchmarks" / "plain_dqn.py"), "--frames", str(frames)]
    return [*command, "--eval-every", "10000", "--eval-episodes", "50"] if mode == "defaults" else command


def last_row(metrics: Path) -> dict[str, str]:
    with open(metrics, newline="") as f:
        return list(csv.DictReader(f))[-1]


def run_arm(arm: str, *, frames: int, before: Path | None, work: Path, mode: str) -> dict[str, float]:
    kind, _, replay = arm.partition(":")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    if kind == "plain":
        out = subprocess.run(plain_command(frames, mode), env=env, check=True, capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        return {"env_steps_per_s": result["env_steps_per_s"], "wall_s": time.perf_counter() - start}
    cwd = ROOT if kind == "recipe" else before
    env["PYTHONPATH"] = str(cwd)  # the checkout's package, not the installed one
    out_dir = work / arm.replace(":", "_")
    subprocess.run(recipe_command(replay, frames, out_dir, mode), cwd=cwd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    return {"env_steps_per_s": float(last_row(out_dir / "metrics.csv")["env_steps_per_s"]), "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--before", default=None, help="git revision of the recipe to compare with (none: skip)")
    parser.add_argument("--replays", default=",".join(REPLAYS))
    parser.add_argument("--mode", choices=("defaults", "loop"), default="defaults")
    parser.add_argument("--out", type=Path, default=None, help="also write the per-round results as JSON here")
    args = parser.parse_args()
    replays = args.replays.split(",")
    arms = ["plain", *(f"recipe:{r}" for r in replays)]
    with tempfile.TemporaryDirectory(prefix="learner_throughput_") as tmp:
        work = Path(tmp)
        before = None
        if args.before:
            before = work / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT, check=True,
                           capture_output=True)
            arms += [f"before:{r}" for r in replays]
        try:
            results: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
            for round_ in range(args.rounds):
                for arm in arms:
                    results[arm].append(run_arm(arm, frames=args.frames, before=before, work=work, mode=args.mode))
                    r = results[arm][-1]
                    print(f"round {round_} {arm:16s} {r['env_steps_per_s']:7.1f} env-steps/s  {r['wall_s']:6.1f} s",
                          flush=True)
        finally:
            if before is not None:
                subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)
    median = {arm: {k: statistics.median(r[k] for r in rs) for k in ("env_steps_per_s", "wall_s")}
              for arm, rs in results.items()}
    plain = median["plain"]
    print(f"\n{args.frames} frames, DoorKey-5x5, mode {args.mode}, median of {args.rounds} interleaved rounds"
          + (f", before = {args.before}" if args.before else ""))
    print("| arm | env-steps/s | wall-clock (s) | vs plain (env-steps/s) | vs plain (wall) | vs before (env-steps/s) "
          "| vs before (wall) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for arm, m in median.items():
        kind, _, replay = arm.partition(":")
        old = median.get(f"before:{replay}") if kind == "recipe" else None
        vs_before = (f"{m['env_steps_per_s'] / old['env_steps_per_s']:.2f}x", f"{old['wall_s'] / m['wall_s']:.2f}x") \
            if old else ("", "")
        print(f"| {arm} | {m['env_steps_per_s']:.0f} | {m['wall_s']:.1f} | "
              f"{m['env_steps_per_s'] / plain['env_steps_per_s']:.2f}x | {plain['wall_s'] / m['wall_s']:.2f}x | "
              f"{vs_before[0]} | {vs_before[1]} |")
    if args.out:
        args.out.write_text(json.dumps({"frames": args.frames, "mode": args.mode, "before": args.before,
                                             "rounds": results}, indent=2))


if __name__ == "__main__":
    main()
