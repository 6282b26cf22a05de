"""The DQN recipe, whole process, against the fastest hand-written loop (and an earlier commit), interleaved.

One run, interleaved: every round runs each arm once, one process at a time (one torch thread
each), so that a machine getting busier or idler moves every arm alike. Arms:

- ``plain``: :mod:`benchmarks/plain_dqn.py <plain_dqn>`, the fastest hand-written double DQN we
  could write with the recipe's settings (one-hot cells into ``nn.Linear``; imports nothing from
  this package); ``plain_ebag``: the same loop reading the one-hot positions with
  ``nn.EmbeddingBag`` (the recipe's sparse first layer);
- ``recipe:<replay>[:<scorer>[:<backend>]]``: ``vlmrb train dqn`` of this checkout (``uniform``, ``per``,
  ``vlm`` / ``vlm_td`` with a scorer: ``oracle`` = ``oracle:minigrid``, ``builtin`` =
  ``builtin:minigrid``, the pixel scorer; ``backend`` = the recipe's ``scorer_backend``, ``thread`` by
  default, ``process`` to score in a child process on another core);
- ``recipe:...+key=value[+key=value]``: the recipe arm with more config keys (e.g.
  ``recipe:vlm:builtin+frames_from_state=false``: the envs render and pass frames);
- ``before:<replay>[:<scorer>]``: the same command run from ``--before REV`` (a temporary ``git worktree``).

Modes (DoorKey-5x5, 8 envs, batch 64, one update per 4 frames, 2x256 MLP, 3-step double DQN):

- ``--mode whole`` (issue 38): ``--frames`` (60k) frames, learning after 2k frames, one evaluation
  at the end (50 episodes); the recipe otherwise with its defaults (checkpoints every 50k frames
  and at the end, TensorBoard; the VLM arms score asynchronously, the default). What counts is
  the whole process: start-up, imports, evaluation, checkpoints;
- ``--mode defaults``: what ``vlmrb train dqn replay=X total_frames=30000`` does (learning after 5k,
  evaluation every 10k frames and at the end), synchronous scoring;
- ``--mode loop``: the learning loop alone (learning after 5k, one 10-episode evaluation at the end,
  which the env-steps/s does not include; no checkpoint before the end).

Reported per arm, median over rounds: the process's wall-clock and CPU time (user + system, all
threads: on a shared machine, the less load-dependent of the two), env-steps/s over the loop (the
recipe's ``env_steps_per_s``, the plain loop's counterpart), and ratios against ``plain`` (speed:
``plain_s / arm_s``) and against ``before:<same arm>``. The machine's load average is printed
before and after.

Usage::

    python benchmarks/learner_throughput.py --mode whole --rounds 3 --arms plain,plain_ebag,recipe:uniform,recipe:vlm:builtin
    python benchmarks/learner_throughput.py --mode defaults --frames 30000 --before b7b1378
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _checkouts import checkout  # benchmarks/_checkouts.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
SCORERS = {"oracle": "oracle:minigrid", "builtin": "builtin:minigrid"}


def recipe_command(replay: str, scorer: str, frames: int, out: Path, mode: str, backend: str = "",
                   extra: tuple[str, ...] = ()) -> list[str]:
    common = [sys.executable, "-m", "vlmrb_torchrl.cli", "train", "dqn", f"replay={replay}",
              f"scorer={SCORERS.get(scorer, scorer or 'oracle:minigrid')}", f"total_frames={frames}",
              "progress=false", "gallery_clips=0", "seed=0", f"output_dir={out}", "overwrite=true", *extra]
    if backend:
        common.append(f"scorer_backend={backend}")
    if mode == "whole":  # the settings; everything else the recipe's defaults
        return [*common, "learning_starts=2000", f"eval_every={frames}"]
    common.append("async_scoring=false")
    if mode == "defaults":  # the recipe's own eval_every/eval_episodes/checkpoint_every/tensorboard
        return common
    return [*common, f"eval_every={frames}", "eval_episodes=10", f"checkpoint_every={10 * frames}", "tensorboard=false"]


def plain_command(frames: int, mode: str, first_layer: str) -> list[str]:
    command = [sys.executable, str(ROOT / "benchmarks" / "plain_dqn.py"), "--frames", str(frames),
               "--first-layer", first_layer]
    if mode == "whole":
        return [*command, "--learning-starts", "2000"]
    command += ["--learning-starts", "5000"]
    if mode == "defaults":
        return [*command, "--eval-every", "10000", "--eval-episodes", "50"]
    return [*command, "--eval-episodes", "10"]


def last_row(metrics: Path) -> dict[str, str]:
    with open(metrics, newline="") as f:
        return list(csv.DictReader(f))[-1]


def _timed(command: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float, float]:
    """Runs ``command``; its wall-clock and CPU seconds (user + system of the child, all its threads)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_arm(arm: str, *, frames: int, before: Path | None, work: Path, mode: str) -> dict[str, float]:
    arm, *extra = arm.split("+")
    kind, _, rest = arm.partition(":")
    replay, _, scorer = rest.partition(":")
    scorer, _, backend = scorer.partition(":")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    if kind in ("plain", "plain_ebag"):
        command = plain_command(frames, mode, "embedding_bag" if kind == "plain_ebag" else "linear")
        out, wall, cpu = _timed(command, env=env)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        return {"env_steps_per_s": result["env_steps_per_s"], "wall_s": wall, "cpu_s": cpu}
    cwd = ROOT if kind == "recipe" else before
    env["PYTHONPATH"] = str(cwd)  # the checkout's package, not the installed one
    out_dir = work / "_".join([arm.replace(":", "_"), *extra]).replace("=", "-")
    _, wall, cpu = _timed(recipe_command(replay, scorer, frames, out_dir, mode, backend, tuple(extra)), cwd=cwd,
                          env=env)
    return {"env_steps_per_s": float(last_row(out_dir / "metrics.csv")["env_steps_per_s"]), "wall_s": wall,
            "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("whole", "defaults", "loop"), default="whole")
    parser.add_argument("--frames", type=int, default=None, help="default: 60000 (whole), 30000 (the others)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--arms", default="plain,plain_ebag,recipe:uniform,recipe:vlm:builtin")
    parser.add_argument("--before", default=None, help="git revision of the recipe to compare with (none: skip)")
    parser.add_argument("--out", type=Path, default=None, help="also write the per-round results as JSON here")
    args = parser.parse_args()
    frames = args.frames or (60_000 if args.mode == "whole" else 30_000)
    arms = args.arms.split(",")
    if args.before:
        arms += [arm.replace("recipe:", "before:", 1) for arm in arms if arm.startswith("recipe:")]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="learner_throughput_") as tmp, \
            checkout(ROOT, args.before, Path(tmp) / "before") as before:
        work = Path(tmp)
        results: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
        for round_ in range(args.rounds):
            for arm in arms:
                results[arm].append(run_arm(arm, frames=frames, before=before, work=work, mode=args.mode))
                r = results[arm][-1]
                print(f"round {round_} {arm:22s} {r['env_steps_per_s']:7.1f} env-steps/s  {r['wall_s']:6.1f} s "
                      f"wall  {r['cpu_s']:6.1f} s CPU  (load {os.getloadavg()[0]:.1f})", flush=True)
    load_after = os.getloadavg()
    keys = ("env_steps_per_s", "wall_s", "cpu_s")
    median = {arm: {k: statistics.median(r[k] for r in rs) for k in keys} for arm, rs in results.items()}
    plain = median.get("plain")
    print(f"\n{frames} frames, DoorKey-5x5, mode {args.mode}, median of {args.rounds} interleaved rounds"
          + (f", before = {args.before}" if args.before else "")
          + f"; load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after, on {os.cpu_count()} cores")
    print("| arm | wall-clock (s) | CPU (s) | env-steps/s | vs plain (wall) | vs plain (CPU) | vs plain (env-steps/s) "
          "| vs before (wall) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for arm, m in median.items():
        old = median.get(arm.replace("recipe:", "before:", 1)) if arm.startswith("recipe:") else None
        vs_before = "" if old is None else f"{old['wall_s'] / m['wall_s']:.2f}x"
        if plain is None:
            vs_plain = ["", "", ""]
        else:
            vs_plain = [f"{plain['wall_s'] / m['wall_s']:.2f}x", f"{plain['cpu_s'] / m['cpu_s']:.2f}x",
                        f"{m['env_steps_per_s'] / plain['env_steps_per_s']:.2f}x"]
        print(f"| {arm} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} | {m['env_steps_per_s']:.0f} | "
              + " | ".join(vs_plain) + f" | {vs_before} |")
    if args.out:
        args.out.write_text(json.dumps({"frames": frames, "mode": args.mode, "before": args.before,
                                        "load": [load_before, load_after], "rounds": results}, indent=2))


if __name__ == "__main__":
    main()
