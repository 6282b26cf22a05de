"""Runs the learning-efficiency study: every (arm, seed) of a study, resumable, in the background.

A *study* fixes the environment and budget (``doorkey5``, ``doorkey6``, ...); an *arm* is one
replay configuration (``uniform``, ``per``, ``vlm_oracle``, ``vlm_noise20``, ``vlm_random``,
``vlm_builtin``, ...). Every arm of a study shares every hyper-parameter but its replay
settings; DQN arms score with ``oracle:minigrid`` unless they name a scorer. Each run is a
plain ``vlmrb train dqn`` process (``vlmrb train sac`` for the robosuite study ``lift``):

- run directories (checkpoints, TensorBoard) go to ``runs/learning/<study>/<arm>/seed<N>/``
  (not committed), each run's output to ``seed<N>.stdout.log`` beside it (a fresh run refuses a
  directory that holds files it did not write);
- ``metrics.csv``, ``config.json`` and ``summary.json`` are copied, while the run goes and when
  it ends, to ``studies/learning/results/<study>/<arm>/seed<N>/`` (small, committed), so
  results survive a change of machine;
- a run that was interrupted (the machine restarted, the runner was killed) resumes from its
  latest checkpoint the next time the runner is started; finished runs are skipped and their
  checkpoints deleted (a DoorKey checkpoint holds the replay buffer: ~0.8 GB);
- a runner holds a lock on each run it starts (``seed<N>.runner.lock`` beside the run directory, an
  ``flock`` the system releases when the runner dies): a second runner given the same run skips it,
  so two runners never write one run; ``--status`` shows such a run as ``running``.

Jobs run seed-major (every arm of seed 0, then seed 1, ...), so that whenever the runner stops,
the arms have (nearly) the same number of seeds.

Commands::

    # the 5x5 quick check, 5 seeds of every main arm, 2 runs at a time, in the background
    python benchmarks/learning/run.py --study doorkey5 --seeds 0-4 --jobs 2 --background
    # what is done, running, resumable or pending (no runs started)
    python benchmarks/learning/run.py --study doorkey5 --seeds 0-4 --status
    # ablations of the oracle arm
    python benchmarks/learning/run.py --study doorkey5 --arms ablation --seeds 0-4 --jobs 2 --background
    # robosuite Lift, SAC: uniform vs TD-boosted VLM-RB with the oracle (pip install -e ".[robosuite]")
    python benchmarks/learning/run.py --study lift --arms uniform,vlm_td_oracle --seeds 0-2 --background
    # OGBench Scene task 2, SAC: uniform vs VLM-RB with oracle:ogbench and builtin:scene, one run at a time,
    # in chunks of 50k frames (--set stop_at=...; the next start resumes) (pip install -e ".[ogbench]")
    python benchmarks/learning/run.py --study scene2 --arms scene --seeds 0-2 --jobs 1 --background
    # Atari Breakout at the Atari-100k budget, DQN: uniform vs VLM-RB with oracle:atari and builtin:atari
    python benchmarks/learning/run.py --study breakout --arms atari --seeds 0-2 --jobs 2 --background

Then ``python benchmarks/learning/analyze.py --study doorkey5`` draws the plots and the table.
Runs use one torch thread each and synchronous scoring (``async_scoring=false``): a run is
reproducible from its seed, and ``--jobs 2`` fills the 2 cores of the reference machine.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "studies" / "learning" / "results"
RUNS = ROOT / "runs" / "learning"

#: Settings every arm of every study shares (on top of the DQN recipe's defaults, which were
#: tuned on uniform replay: lr 5e-4, target copy every 250 updates, 3-step double DQN).
COMMON = {
    "async_scoring": "false",  # reproducible runs; the oracle is fast, nothing to hide
    "torch_threads": "1",
    "progress": "false",
    "tensorboard": "false",
    "gallery_clips": "0",
    "stop_at": "none",  # explicit: a chunk's stop_at (--set stop_at=N) must not reach the runs that follow
    # the paper's sampler; the *_cap4 arms set the recipes' default ceiling (max_oversampling=4)
    "max_oversampling": "none",
}
#: Per recipe, on top of COMMON.
RECIPE_COMMON: dict[str, dict[str, str]] = {
    # Nature-DQN's evaluation epsilon; at 0.01 near-greedy policies loop for the whole episode.
    # The oracle arms mean the oracle: pinned, since the recipe's default scorer is builtin:minigrid
    "dqn": {"eval_episodes": "50", "eval_eps": "0.05", "scorer": "oracle:minigrid"},
    # SAC evaluates its deterministic actor; a robosuite episode costs ~200 env steps of ~25 ms
    # The oracle arms mean the oracle: pinned, since the recipe's default scorer is builtin:lift
    "sac": {"eval_episodes": "10", "scorer": "oracle:robosuite"},
}

STUDIES: dict[str, dict[str, str]] = {
    "doorkey5": {"env": "MiniGrid-DoorKey-5x5-v0", "total_frames": "60000", "eval_every": "5000",
                 "checkpoint_every": "30000"},
    "doorkey6": {"env": "MiniGrid-DoorKey-6x6-v0", "total_frames": "120000", "eval_every": "5000",
                 "checkpoint_every": "40000"},
    # the budget: one uniform seed with 1M frames (results/doorkey8_1M) reached 80% at 180k frames
    # and stayed at 0.96-1.0 from 260k on, so the study runs half a million (epsilon over 200k)
    "doorkey8": {"env": "MiniGrid-DoorKey-8x8-v0", "total_frames": "500000", "eval_every": "10000",
                 "checkpoint_every": "100000"},
    # A pilot sized to 2 cores (~40 SAC updates/s; ~29 min per run two at a time), far below
    # the paper's budget; hence the shaped reward, whose return shows reaching and grasping
    # long before a first lift succeeds.
    # The VLM-RB paper's regime (issue 30): the big grids, where uniform replay has to find rare goal clips.
    # The egocentric 7x7 view through a memoryless MLP stayed at 0 success on 16x16 through 2M frames (a
    # pilot), so these studies observe the full state, as the paper's agents do, together with the
    # egocentric view (view=both): on DoorKey-5x5 the full state alone (view=full) was still at 0 success
    # after 60k frames where the egocentric view and view=both reached 1.0 and 0.75 at 20k. Evaluation
    # episodes are capped at a quarter of MiniGrid's limit (10 * size**2): a failing policy would otherwise
    # play 50 x 2,560 steps per evaluation; a learned policy needs well under 100 steps.
    # Since issue 59 every run also evaluates at MiniGrid's own limit (1,440 on 12x12) every 100k frames
    # (eval_full_*; it leaves the learner's numbers as they were: runs before it have the capped evaluation only).
    "doorkey12": {"env": "MiniGrid-DoorKey-12x12-v0", "total_frames": "1000000", "eval_every": "50000",
                  "checkpoint_every": "200000", "view": "both", "eval_max_episode_steps": "360",
                  "eval_full_every": "100000"},
    "doorkey16": {"env": "MiniGrid-DoorKey-16x16-v0", "total_frames": "2000000", "eval_every": "100000",
                  "checkpoint_every": "200000", "view": "both", "eval_max_episode_steps": "640"},
    "lift": {"env": "robosuite/Lift", "total_frames": "50000", "eval_every": "10000",
             "checkpoint_every": "10000", "reward_shaping": "true",
             "buffer_size": "50000"},  # holds the whole run; a checkpoint saves the storage's capacity
}
# OGBench Scene, SAC (issue 32): scene<N> is task N at the budget this machine affords (300k frames,
# ~1 h a run at ~80 env-steps/s on an idle core). The oracle arms read oracle:ogbench (a subgoal becomes
# satisfied, or the task is solved); OGBench's own reward (the subgoal count) unless an arm says otherwise.
# Clips of 16 steps every 16 steps, 5 frames each (0, 4, ..., 16: a quarter of the steps rendered for the
# pixel scorer), each clip's score on all its transitions (cover_max): the same geometry in every arm.
for _task in range(1, 6):
    STUDIES[f"scene{_task}"] = {"env": f"ogbench/scene-task{_task}", "total_frames": "300000", "eval_every": "10000",
                                "checkpoint_every": "25000", "buffer_size": "300000", "scorer": "oracle:ogbench",
                                "clip_len": "16", "clip_stride": "16", "clip_frames": "5", "clip_assign": "cover_max"}
# Atari, DQN (issue 33): the Atari-100k budget (100k agent steps = 400k emulator frames), the most this machine
# affords (a Nature-CNN update costs ~50-100 ms of CPU on one core: ~25k of them per run). Far too short for Pong
# (DQN needs millions of frames there; a study of whether any arm leaves -21), enough for Breakout to rise above a
# random policy. Adam at 1e-4 and batches of 32 (CleanRL's Atari DQN), target copies every 250 updates (1k agent
# steps), epsilon 1 -> 0.05 over 40k steps; half the run in the buffer (a transition holds two 4x84x84 stacks:
# ~2.8 GB per run). The oracle arms read oracle:atari (a clip with a positive reward); evaluations play 10 whole
# games (raw score) cut at 4,500 steps (5 minutes of play).
for _game in ("Breakout", "Pong"):
    STUDIES[_game.lower()] = {"env": f"ALE/{_game}-v5", "total_frames": "100000", "eval_every": "10000",
                              "checkpoint_every": "25000", "buffer_size": "50000", "learning_starts": "5000",
                              "lr": "1e-4", "batch_size": "32", "scorer": "oracle:atari", "eval_episodes": "10",
                              "eval_max_episode_steps": "4500"}
#: The recipe a study runs (``vlmrb train <recipe>``); DQN unless listed.
STUDY_RECIPE: dict[str, str] = {"lift": "sac", **{f"scene{task}": "sac" for task in range(1, 6)}}


def study_recipe(study: str) -> str:
    return STUDY_RECIPE.get(study, "dqn")

_RANDOM = "python:vlmrb_torchrl.scorers.baselines:RandomScorer"
ARMS: dict[str, dict[str, str]] = {
    "uniform": {"replay": "uniform"},
    "per": {"replay": "per"},
    "vlm_oracle": {"replay": "vlm"},
    "vlm_noise10": {"replay": "vlm", "label_noise": "0.1"},
    "vlm_noise20": {"replay": "vlm", "label_noise": "0.2"},
    "vlm_noise30": {"replay": "vlm", "label_noise": "0.3"},
    "vlm_random": {"replay": "vlm", "scorer": _RANDOM},
    "vlm_td_oracle": {"replay": "vlm_td"},
    # the small CLIP shipped with the package, scoring rendered frames (no privileged flags)
    "vlm_builtin": {"replay": "vlm", "scorer": "builtin:minigrid"},
    # the same teacher distilled into a student that scores 90% of the clips once trusted
    "vlm_builtin_distill": {"replay": "vlm", "scorer": "builtin:minigrid", "distill": "true"},
}
#: One change at a time to the oracle arm: the mechanisms the study investigates.
ABLATIONS: dict[str, dict[str, str]] = {
    "vlm_oracle_beta04": {"replay": "vlm", "vlm_beta": "0.4"},  # importance correction
    "vlm_oracle_lmax025": {"replay": "vlm", "lambda_max": "0.25"},  # less prioritised mass
    "vlm_oracle_lmax1": {"replay": "vlm", "lambda_max": "1.0"},  # only prioritised replay
    "vlm_oracle_clip8": {"replay": "vlm", "clip_len": "8"},  # shorter clips: later saturation
    "vlm_oracle_warmup0": {"replay": "vlm", "vlm_warmup": "0"},  # no warm-up
    # no warm-up with an imperfect scorer: early over-sampling of false positives
    "vlm_noise20_warmup0": {"replay": "vlm", "label_noise": "0.2", "vlm_warmup": "0"},
    # Lift: do importance weights undo the over-sampling of rare grasp clips?
    "vlm_td_oracle_beta04": {"replay": "vlm_td", "vlm_beta": "0.4"},
}
#: The over-sampling ceiling (max_oversampling=4, the recipes' default): no transition is drawn more than 4x as
#: often as under uniform replay; lambda is lowered while that would be exceeded (rare positives).
CEILING: dict[str, dict[str, str]] = {
    "vlm_oracle_cap4": {"replay": "vlm", "max_oversampling": "4"},  # DoorKey: does the ceiling leave it alone?
    "vlm_td_oracle_cap4": {"replay": "vlm_td", "max_oversampling": "4"},  # Lift: rare grasp clips, capped
    # Scene: the 4x ceiling kept the critics bounded but held lambda at ~0.01 (positives ~3% of the buffer);
    # does a looser one let VLM-RB weigh something without the uncapped arm's divergence?
    "vlm_td_oracle_cap16": {"replay": "vlm_td", "max_oversampling": "16"},
    # Lift with the shipped pixel scorer instead of the privileged flags (the recorded runs: agentview frames and
    # the model of issue 19; since issue 32 the recipe's default is front_close frames and the model built on them,
    # and since the second camera front_close+eye_in_hand frames and a model per camera)
    "vlm_td_builtin_cap4": {"replay": "vlm_td", "scorer": "builtin:lift", "max_oversampling": "4"},
}
#: The paper's labels (issue 30): only clips that reach the goal are progress ("a clear instance of goal
#: satisfaction"), from the oracle or the shipped pixel model asked the goal check alone; with and
#: without the over-sampling ceiling, which on rare goal clips lowers lambda far below 0.5.
PAPER: dict[str, dict[str, str]] = {
    "vlm_goal": {"replay": "vlm", "scorer": "oracle:minigrid_goal"},
    "vlm_goal_cap4": {"replay": "vlm", "scorer": "oracle:minigrid_goal", "max_oversampling": "4"},
    "vlm_builtin_goal": {"replay": "vlm", "scorer": "builtin:minigrid_goal"},
}
#: Why the paper's sampler slows DoorKey-12x12 (issue 59): one intervention per arm on vlm_goal (goal-only oracle,
#: the paper's sampler), pre-registered in studies/results.md. vlm_oracle (key + door + goal labels) separates "the
#: method" from "goal-only labels"; the ceilings 8 and 4 (with uniform = 1 and vlm_goal = none) are the
#: over-sampling dose; L32 is the paper's clip length; rr2 a replay ratio of 2 (batch 32 every 16 frames) instead
#: of 16, for both replays.
MECHANISM: dict[str, dict[str, str]] = {
    "vlm_goal_cap8": {"replay": "vlm", "scorer": "oracle:minigrid_goal", "max_oversampling": "8"},
    "vlm_goal_L32": {"replay": "vlm", "scorer": "oracle:minigrid_goal", "clip_len": "32"},
    "uniform_rr2": {"replay": "uniform", "train_every": "16", "batch_size": "32"},
    "vlm_goal_rr2": {"replay": "vlm", "scorer": "oracle:minigrid_goal", "train_every": "16", "batch_size": "32"},
    # the variant (item 4): episode credit, a goal clip lifts the transitions before it by 0.99**d (the discount)
    "vlm_goal_spread": {"replay": "vlm", "scorer": "oracle:minigrid_goal", "vlm_spread": "0.99"},
}
#: OGBench Scene: the sparse reward (0 when solved, else -1) instead of OGBench's subgoal count, and VLM-RB with the
#: pixel scorer shipped for Scene (builtin:scene, the task's prompt set) instead of the privileged oracle.
SCENE: dict[str, dict[str, str]] = {
    "uniform_sparse": {"replay": "uniform", "reward_shaping": "false"},
    "vlm_td_builtin": {"replay": "vlm_td", "scorer": "builtin:scene"},
}
#: Atari: VLM-RB with the pixel scorer shipped for Pong and Breakout (builtin:atari, reading 64-px RGB frames)
#: instead of the privileged reward oracle.
ATARI: dict[str, dict[str, str]] = {
    "vlm_builtin_atari": {"replay": "vlm", "scorer": "builtin:atari"},
}
#: Uniform replay under other learner settings: is the collapse after solving a tuning problem?
TUNING: dict[str, dict[str, str]] = {
    "uniform_lr1e-4": {"replay": "uniform", "lr": "1e-4"},
    "uniform_target1000": {"replay": "uniform", "target_update": "1000"},
    "uniform_epsend0.1": {"replay": "uniform", "eps_end": "0.1"},
}
ARM_GROUPS = {"main": list(ARMS), "ablation": list(ABLATIONS), "tuning": list(TUNING), "ceiling": list(CEILING),
              "paper": ["uniform", *PAPER], "scene": ["uniform", "vlm_td_oracle", "vlm_td_builtin"],
              "atari": ["uniform", "vlm_oracle", "vlm_builtin_atari"],
              "mechanism": ["vlm_oracle", "vlm_goal_cap4", "vlm_goal_cap8", "vlm_goal_L32", "uniform_rr2",
                            "vlm_goal_rr2"]}


@dataclass
class Job:
    study: str
    arm: str
    seed: int
    overrides: dict[str, str] = field(default_factory=dict)
    runs_root: Path = RUNS
    results_root: Path = RESULTS

    @property
    def name(self) -> str:
        return f"{self.study}/{self.arm}/seed{self.seed}"

    @property
    def run_dir(self) -> Path:
        return self.runs_root / self.study / self.arm / f"seed{self.seed}"

    @property
    def log_path(self) -> Path:
        """The run's stdout and stderr: beside its directory, which a fresh run must find empty."""
        return self.run_dir.with_name(f"seed{self.seed}.stdout.log")

    @property
    def result_dir(self) -> Path:
        return self.results_root / self.study / self.arm / f"seed{self.seed}"

    @property
    def recipe(self) -> str:
        return study_recipe(self.study)

    @property
    def total_frames(self) -> int:
        return int(self.overrides["total_frames"])

    @property
    def lock_path(self) -> Path:
        """The runner's lock on this run (beside its directory): held while a runner runs the job."""
        return self.run_dir.with_name(f"seed{self.seed}.runner.lock")

    def lock(self) -> int | None:
        """Takes the run's lock (``flock``, released when the runner exits, however it exits) and returns its
        file descriptor; ``None`` when another runner holds it: two runners never write one run."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def locked_by_other(self) -> bool:
        """Whether another runner holds the run's lock now."""
        if not self.lock_path.exists():
            return False
        fd = self.lock()
        if fd is None:
            return True
        unlock(fd)
        return False

    def status(self) -> str:
        """done | resumable | pending."""
        summary = self.run_dir / "summary.json"
        if summary.exists() and json.loads(summary.read_text()).get("env_steps", 0) >= self.total_frames:
            return "done"
        if any((p / "DONE").exists() for p in (self.run_dir / "checkpoints").glob("step_*")):
            return "resumable"
        return "pending"

    def command(self) -> list[str]:
        args = [f"{k}={v}" for k, v in self.overrides.items()]
        args += [f"seed={self.seed}", f"output_dir={self.run_dir}"]
        if self.status() == "resumable":
            args.append(f"resume={self.run_dir}")
        elif self.run_dir.exists() and any(self.run_dir.iterdir()):
            args.append("overwrite=true")  # killed before its first checkpoint: start it again
        return [sys.executable, "-m", "vlmrb_torchrl.cli", "train", self.recipe, *args]


def make_jobs(study: str, arms: list[str], seeds: list[int], *, runs_root: Path = RUNS,
              results_root: Path = RESULTS) -> list[Job]:
    table = {**ARMS, **ABLATIONS, **TUNING, **CEILING, **PAPER, **MECHANISM, **SCENE, **ATARI}
    unknown = [a for a in arms if a not in table]
    if unknown:
        raise SystemExit(f"unknown arms {unknown}; known: {sorted(table)} or groups {sorted(ARM_GROUPS)}")
    common = {**COMMON, **RECIPE_COMMON[study_recipe(study)]}
    return [Job(study, arm, seed, {**common, **STUDIES[study], **table[arm]}, runs_root, results_root)
            for seed in seeds for arm in arms]


def code_state() -> str:
    """The commit the runs execute (``git rev-parse HEAD`` of this checkout), ``+dirty`` with uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def record_commit(job: Job, commit: str) -> None:
    """Appends the code state a run (or one of its chunks) ran under to ``<result_dir>/commits.txt``:
    a study's runs must share one code state, and a resumed chunk must not silently run other code."""
    job.result_dir.mkdir(parents=True, exist_ok=True)
    with open(job.result_dir / "commits.txt", "a") as out:
        out.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {job.status()} {commit}\n")


def sync_results(job: Job) -> None:
    """Copies the run's small files to the committed results folder."""
    job.result_dir.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.csv", "config.json", "summary.json"):
        src = job.run_dir / name
        if src.exists():
            shutil.copyfile(src, job.result_dir / name)


def prune_checkpoints(job: Job, *, keep_latest: bool) -> None:
    """Deletes all checkpoints of a finished run, or all but the latest complete one."""
    steps = sorted((p for p in (job.run_dir / "checkpoints").glob("step_*")), key=lambda p: int(p.name.split("_")[1]))
    complete = [p for p in steps if (p / "DONE").exists()]
    keep = complete[-1:] if keep_latest else []
    for path in steps:
        if path not in keep and (path / "DONE").exists():
            shutil.rmtree(path, ignore_errors=True)


def unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def run_jobs(jobs: list[Job], *, parallel: int, poll_s: float = 20.0) -> int:
    """Runs the unfinished jobs, ``parallel`` at a time; returns the number that failed.

    Each job runs under its lock (:meth:`Job.lock`): a job another runner holds is skipped (said in the log).
    """
    todo = [j for j in jobs if j.status() != "done"]
    for job in jobs:
        if job.status() == "done":
            sync_results(job)
            prune_checkpoints(job, keep_latest=False)
    running: list[tuple[Job, subprocess.Popen, object, int]] = []
    failed = 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    commit = code_state()
    while todo or running:
        while todo and len(running) < parallel:
            job = todo.pop(0)
            fd = job.lock()
            if fd is None:
                _say(f"skip  {job.name}: another runner holds {job.lock_path}")
                continue
            if job.status() == "done":  # finished by another runner since this one listed it
                unlock(fd)
                continue
            job.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(job.log_path, "a")
            cmd = job.command()
            record_commit(job, commit)
            _say(f"start {job.name} ({job.status()}) at {commit}: {' '.join(cmd[2:])}")
            running.append((job, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log,
                            fd))
        if not running:
            break
        time.sleep(poll_s)
        still = []
        for job, proc, log, fd in running:
            sync_results(job)
            code = proc.poll()
            if code is None:
                prune_checkpoints(job, keep_latest=True)
                still.append((job, proc, log, fd))
                continue
            log.close()
            unlock(fd)
            if code == 0 and job.status() == "done":
                prune_checkpoints(job, keep_latest=False)
                _say(f"done  {job.name}")
            else:
                failed += 1
                _say(f"FAILED {job.name} (exit {code}); see {job.log_path}")
        running = still
    return failed


def _say(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}", flush=True)


def _parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", required=True, choices=sorted(STUDIES))
    parser.add_argument("--arms", default="main", help="comma-separated arms, or a group: main | ablation")
    parser.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,2,5")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    parser.add_argument("--status", action="store_true", help="print each run's status and exit")
    parser.add_argument("--background", action="store_true",
                        help="detach and log to runs/learning/<study>/runner-<arms>.log (pid in runner-<arms>.pid)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra recipe overrides for every run (e.g. total_frames=50000)")
    parser.add_argument("--runs-root", type=Path, default=RUNS, help="where run directories go")
    parser.add_argument("--results-root", type=Path, default=RESULTS, help="where the committed CSVs go")
    parser.add_argument("--poll", type=float, default=20.0, help="seconds between result syncs")
    args = parser.parse_args(argv)

    arms = [a for group in args.arms.split(",") for a in ARM_GROUPS.get(group, [group])]
    jobs = make_jobs(args.study, arms, _parse_seeds(args.seeds), runs_root=args.runs_root.resolve(),
                     results_root=args.results_root.resolve())
    for job in jobs:
        job.overrides.update(dict(item.split("=", 1) for item in args.set))
    if args.status:
        for job in jobs:
            state = job.status()
            print(f"{'running' if state != 'done' and job.locked_by_other() else state:10s} {job.name}")
        return 0
    if args.background:
        log = args.runs_root / args.study / f"runner-{args.arms.replace(',', '+')}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--background"]
        with open(log, "a") as out:
            proc = subprocess.Popen([sys.executable, __file__, *argv], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        log.with_suffix(".pid").write_text(str(proc.pid))
        print(f"runner started (pid {proc.pid}); log: {log}")
        return 0
    failed = run_jobs(jobs, parallel=args.jobs, poll_s=args.poll)
    _say(f"finished: {len(jobs) - failed} ok, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
