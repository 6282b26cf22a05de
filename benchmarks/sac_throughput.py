"""The SAC recipe's env-steps/s on robosuite Lift against a plain sequential SAC loop, in one run.

One run, interleaved: every round runs each arm once, one process at a time, so that a machine
getting busier or idler moves every arm alike. Arms:

- ``plain``: :mod:`benchmarks/plain_sac.py <plain_sac>`, a CleanRL-style PyTorch SAC (one file,
  separate Q-networks, one fused Adam, step the envs then update; imports nothing from this
  package);
- ``uniform``: ``vlmrb train sac replay=uniform`` (the default learner and collection: the fast
  learner, collection in a child process one batch ahead);
- ``uniform-sync``: the same with ``async_collection=false`` (collect, then learn, one process);
- ``vlm_td-builtin``: ``replay=vlm_td scorer=builtin:lift`` (VLM-RB with the shipped pixel scorer:
  every step's frame rendered from the recipe's Lift scorer cameras, ``front_close+eye_in_hand`` (two
  64-px pictures side by side: the front camera and the gripper's), fast rendering; scoring in a thread);
- ``vlm_td-builtin-frames``: ``vlm_td-builtin`` with ``frames_from_state=false``: the envs render the
  frames (only those some clip shows) and pass them, instead of writing the positions they are drawn
  from for the scorer's thread to render (ψ, the default);
- ``vlm_td-oracle``: ``replay=vlm_td scorer=oracle:robosuite`` (no frames);
- ``vlm_td-builtin-sparse``: ``vlm_td-builtin`` with a clip every 16 steps, 5 frames each
  (``clip_stride=16 clip_frames=5 clip_assign=cover_max``: a quarter of the steps rendered, clips sharing their end frames);
- ``before-uniform`` (with ``--before REV``): the recipe of an earlier commit, uniform replay.

All with the recipe's defaults (Lift, 2 envs, 200-frame batches, batch 256, 2x256 MLPs, one update
per frame) for ``--frames`` frames, learning after ``--learning-starts``; one evaluation episode at
the end (not timed), no checkpoint before the end. Reported per arm: env-steps/s (the recipe's own
``env_steps_per_s``: collection + storing + learning, from the first frame; the plain loop's
counterpart), median over rounds, and its ratio to ``plain`` and to ``uniform``; and the CPU seconds of the
arm's processes (the recipe, its collector child and scorer, from ``getrusage``), steadier than
env-steps/s on a loaded machine.

Usage::

    MUJOCO_GL=egl python benchmarks/sac_throughput.py --frames 6000 --learning-starts 1000 --rounds 2
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
ARMS = {
    "plain": None,
    "uniform": ["replay=uniform"],
    "uniform-sync": ["replay=uniform", "async_collection=false"],
    "vlm_td-builtin": ["replay=vlm_td", "scorer=builtin:lift"],
    "vlm_td-builtin-frames": ["replay=vlm_td", "scorer=builtin:lift", "frames_from_state=false"],
    "vlm_td-oracle": ["replay=vlm_td", "scorer=oracle:robosuite"],
    # the Scene study's clip geometry: a clip every 16 steps, 5 of its 17 frames rendered, its score on every step
    "vlm_td-builtin-sparse": ["replay=vlm_td", "scorer=builtin:lift", "clip_stride=16", "clip_frames=5",
                              "clip_assign=cover_max"],
}


def recipe_command(overrides: list[str], frames: int, learning_starts: int, out: Path) -> list[str]:
    return [sys.executable, "-m", "vlmrb_torchrl.cli", "train", "sac", *overrides, f"total_frames={frames}",
            f"learning_starts={learning_starts}", f"eval_every={frames}", "eval_episodes=1",
            f"checkpoint_every={10 * frames}", "gallery_clips=0", "progress=false", "tensorboard=false", "seed=0",
            f"output_dir={out}", "overwrite=true"]


def run_arm(arm: str, *, frames: int, learning_starts: int, before: Path | None, work: Path) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    if arm == "plain":
        command = [sys.executable, str(ROOT / "benchmarks" / "plain_sac.py"), "--frames", str(frames),
                   "--learning-starts", str(learning_starts)]
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])["env_steps_per_s"]
    old = arm.startswith("before-")
    cwd = before if old else ROOT
    env["PYTHONPATH"] = str(cwd)  # that checkout's package, not the installed one
    out_dir = work / arm
    overrides = ARMS[arm.removeprefix("before-")]
    subprocess.run(recipe_command(overrides, frames, learning_starts, out_dir), cwd=cwd, env=env, check=True,
                   capture_output=True)
    with open(out_dir / "metrics.csv", newline="") as f:
        return float(list(csv.DictReader(f))[-1]["env_steps_per_s"])


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=6_000)
    parser.add_argument("--learning-starts", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--before", default=None, help="git revision of the recipe to compare with (uniform replay)")
    parser.add_argument("--out", type=Path, default=None, help="also write the per-round results as JSON here")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}; choose from {list(ARMS)}")
    if args.before:
        arms.append("before-uniform")
    results: dict[str, list[float]] = {arm: [] for arm in arms}
    cpu_s: dict[str, list[float]] = {arm: [] for arm in arms}
    load: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sac_throughput_") as tmp, \
            checkout(ROOT, args.before, Path(tmp) / "before") as before:
        work = Path(tmp)
        for round_ in range(args.rounds):
            for arm in arms:
                start, cpu = time.perf_counter(), _children_cpu()
                results[arm].append(run_arm(arm, frames=args.frames, learning_starts=args.learning_starts,
                                            before=before, work=work))
                cpu_s[arm].append(_children_cpu() - cpu)
                load.append(os.getloadavg()[0])
                print(f"round {round_} {arm:16s} {results[arm][-1]:7.1f} env-steps/s  "
                      f"({time.perf_counter() - start:5.0f} s wall, {cpu_s[arm][-1]:5.0f} s CPU, load {load[-1]:.1f})",
                      flush=True)
    median = {arm: statistics.median(values) for arm, values in results.items()}
    print(f"\nrobosuite Lift, {args.frames} frames (learning after {args.learning_starts}), median of {args.rounds} "
          f"interleaved rounds; 1-min load average during the run {min(load):.1f}-{max(load):.1f} on "
          f"{os.cpu_count()} cores")
    print("| arm | env-steps/s | vs plain | vs uniform | CPU (s) |")
    print("|---|---:|---:|---:|---:|")
    for arm, value in median.items():
        vs_plain = f"{value / median['plain']:.2f}x" if "plain" in median else ""
        vs_uniform = f"{value / median['uniform']:.2f}x" if "uniform" in median else ""
        print(f"| {arm} | {value:.1f} | {vs_plain} | {vs_uniform} | {statistics.median(cpu_s[arm]):.1f} |")
    if args.out:
        args.out.write_text(json.dumps({"frames": args.frames, "learning_starts": args.learning_starts,
                                        "rounds": results, "cpu_s": cpu_s, "load": load}, indent=2))


if __name__ == "__main__":
    main()
