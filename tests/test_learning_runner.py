"""The learning-study runner: job grid, status, resumption from checkpoints, result syncing."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("minigrid")

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "learning" / "run.py"
_spec = importlib.util.spec_from_file_location("learning_run", _PATH)
runner = importlib.util.module_from_spec(_spec)
sys.modules["learning_run"] = runner  # dataclasses resolve their module by name
_spec.loader.exec_module(runner)

TINY = {"total_frames": "512", "num_envs": "2", "frames_per_batch": "64", "learning_starts": "128",
        "eval_every": "256", "eval_episodes": "2", "eval_envs": "2", "buffer_size": "2000",
        "checkpoint_every": "256", "clip_len": "4", "batch_size": "16", "hidden": "32"}


def jobs(tmp_path, arms, seeds, **extra):
    out = runner.make_jobs("doorkey5", arms, seeds, runs_root=tmp_path / "runs", results_root=tmp_path / "results")
    for job in out:
        job.overrides.update({**TINY, **extra})
    return out


def test_grid_is_seed_major_and_arms_share_everything_but_replay(tmp_path):
    grid = runner.make_jobs("doorkey5", ["uniform", "vlm_oracle", "vlm_noise20"], [0, 1], runs_root=tmp_path)
    assert [(j.arm, j.seed) for j in grid] == [("uniform", 0), ("vlm_oracle", 0), ("vlm_noise20", 0),
                                              ("uniform", 1), ("vlm_oracle", 1), ("vlm_noise20", 1)]
    replay_keys = {"replay", "label_noise", "scorer"}
    shared = [{k: v for k, v in j.overrides.items() if k not in replay_keys} for j in grid]
    assert all(s == shared[0] for s in shared)
    assert grid[2].overrides["label_noise"] == "0.2" and grid[1].overrides["replay"] == "vlm"
    assert grid[0].run_dir == tmp_path / "doorkey5" / "uniform" / "seed0"


def test_unknown_arm_and_seed_ranges():
    with pytest.raises(SystemExit, match="unknown arms \\['vlm_orcale'\\]"):
        runner.make_jobs("doorkey5", ["vlm_orcale"], [0])
    assert runner._parse_seeds("0-2,5") == [0, 1, 2, 5]


def test_status_command_and_pruning(tmp_path):
    (job,) = jobs(tmp_path, ["vlm_oracle"], [3])
    assert job.status() == "pending" and not any(a.startswith("resume=") for a in job.command())
    for step in (256, 512):
        (job.run_dir / "checkpoints" / f"step_{step}").mkdir(parents=True)
    (job.run_dir / "checkpoints" / "step_256" / "DONE").write_text("{}")
    assert job.status() == "resumable" and f"resume={job.run_dir}" in job.command()
    (job.run_dir / "checkpoints" / "step_512" / "DONE").write_text("{}")
    runner.prune_checkpoints(job, keep_latest=True)
    assert sorted(p.name for p in (job.run_dir / "checkpoints").iterdir()) == ["step_512"]
    (job.run_dir / "summary.json").write_text(json.dumps({"env_steps": 512}))
    assert job.status() == "done"
    runner.prune_checkpoints(job, keep_latest=False)
    assert not list((job.run_dir / "checkpoints").iterdir())


def test_the_runners_log_leaves_a_fresh_run_directory_empty(tmp_path):
    (job,) = jobs(tmp_path, ["uniform"], [0])
    # what run_jobs does before starting a run: open its log
    job.log_path.parent.mkdir(parents=True, exist_ok=True)
    job.log_path.write_text("")
    assert not job.run_dir.exists() and job.status() == "pending"
    # a recipe refuses overwrite=true on a directory with files no run wrote: a fresh run must not need it
    assert not [arg for arg in job.command() if arg.startswith(("overwrite=", "resume="))]


def _rows(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # trains and resumes through the CLI
def test_interrupted_run_resumes_and_results_are_synced(tmp_path):
    (job,) = jobs(tmp_path, ["vlm_oracle"], [0], stop_at="256")  # an interruption after the first checkpoint
    assert runner.run_jobs([job], parallel=1, poll_s=0.2) == 1  # stopped short: not done
    assert job.status() == "resumable"
    assert job.log_path.is_file() and not (job.run_dir / "stdout.log").exists()
    assert [int(r["env_steps"]) for r in _rows(job.result_dir / "metrics.csv")] == [256]
    job.overrides["stop_at"] = "none"
    assert runner.run_jobs([job], parallel=1, poll_s=0.2) == 0
    assert job.status() == "done"
    rows = _rows(job.result_dir / "metrics.csv")
    assert [int(r["env_steps"]) for r in rows] == [256, 512]
    assert all(0.0 <= float(r["sampled_positive_fraction"]) <= 1.0 for r in rows)
    assert json.loads((job.result_dir / "config.json").read_text())["eval_eps"] == 0.05
    assert json.loads((job.result_dir / "summary.json").read_text())["env_steps"] == 512
    assert not list((job.run_dir / "checkpoints").iterdir())  # finished: checkpoints deleted
    assert runner.run_jobs([job], parallel=1, poll_s=0.2) == 0  # nothing left to do


def test_lift_study_runs_the_sac_recipe_with_its_own_evaluation_settings(tmp_path):
    uniform, td = runner.make_jobs("lift", ["uniform", "vlm_td_oracle"], [1], runs_root=tmp_path)
    assert uniform.command()[3:5] == ["train", "sac"]
    # the oracle arms pin the oracle (the recipe's default scorer is builtin:lift) and the paper's sampler
    assert td.overrides["replay"] == "vlm_td" and td.overrides["scorer"] == "oracle:robosuite"
    assert td.overrides["max_oversampling"] == "none"
    capped, builtin = runner.make_jobs("lift", ["vlm_td_oracle_cap4", "vlm_td_builtin_cap4"], [1], runs_root=tmp_path)
    assert capped.overrides["max_oversampling"] == builtin.overrides["max_oversampling"] == "4"
    assert capped.overrides["scorer"] == "oracle:robosuite" and builtin.overrides["scorer"] == "builtin:lift"
    assert {k: v for k, v in capped.overrides.items() if k != "max_oversampling"} == \
        {k: v for k, v in td.overrides.items() if k != "max_oversampling"}
    assert "eval_eps" not in uniform.overrides and uniform.overrides["eval_episodes"] == "10"
    (dqn,) = runner.make_jobs("doorkey6", ["uniform"], [1], runs_root=tmp_path)
    assert dqn.command()[3:5] == ["train", "dqn"] and dqn.overrides["eval_eps"] == "0.05"


def test_atari_studies_compare_uniform_and_vlm_rb_with_the_oracle_and_the_shipped_scorer(tmp_path):
    assert runner.ARM_GROUPS["atari"] == ["uniform", "vlm_oracle", "vlm_builtin_atari"]
    for study, env in (("breakout", "ALE/Breakout-v5"), ("pong", "ALE/Pong-v5")):
        uniform, oracle, builtin = runner.make_jobs(study, runner.ARM_GROUPS["atari"], [0], runs_root=tmp_path)
        assert uniform.command()[3:5] == ["train", "dqn"] and uniform.overrides["env"] == env
        # the oracle arm reads Atari rewards (the study's scorer), not the DQN default oracle:minigrid
        assert (oracle.overrides["replay"], oracle.overrides["scorer"]) == ("vlm", "oracle:atari")
        assert (builtin.overrides["replay"], builtin.overrides["scorer"]) == ("vlm", "builtin:atari")
        replay_keys = {"replay", "scorer"}
        assert len({tuple(sorted((k, v) for k, v in j.overrides.items() if k not in replay_keys))
                    for j in (uniform, oracle, builtin)}) == 1  # everything else is shared
        assert uniform.total_frames == 100_000 and uniform.overrides["eval_max_episode_steps"] == "4500"
    # every arm's settings make a valid DQN config (scorer=builtin:atari knows both games)
    from vlmrb_torchrl.recipes.config import DQNConfig, apply_overrides

    for job in (oracle, builtin):
        cfg = apply_overrides(DQNConfig(), {**job.overrides, "seed": "0", "output_dir": str(job.run_dir)}).validate()
        assert cfg.scorer == job.overrides["scorer"] and cfg.lr == 1e-4 and cfg.max_oversampling is None


def test_a_run_another_runner_holds_is_skipped(tmp_path, capsys):
    """Two runners given the same run: the second one skips it (the lock is an flock, per open file)."""
    (job,) = jobs(tmp_path, ["uniform"], [0])
    other = job.lock()  # another runner (here: another open file of this process) holds it
    assert other is not None and job.lock() is None and job.locked_by_other()
    try:
        assert runner.run_jobs([job], parallel=1, poll_s=0.01) == 0
        assert "skip  doorkey5/uniform/seed0: another runner holds" in capsys.readouterr().out
        assert not job.run_dir.exists() and not job.result_dir.exists()  # nothing written, nothing started
    finally:
        runner.unlock(other)
    assert not job.locked_by_other()
    fd = job.lock()  # released: the next runner takes it
    assert fd is not None
    runner.unlock(fd)


def test_the_mechanism_arms_change_one_thing_each():
    grid = {j.arm: j.overrides for j in runner.make_jobs("doorkey12", runner.ARM_GROUPS["mechanism"] + [
        "uniform", "vlm_goal"], [0])}
    goal = grid["vlm_goal"]
    changed = {arm: {k for k in set(o) | set(goal) if o.get(k) != goal.get(k)} for arm, o in grid.items()}
    assert changed["vlm_goal_cap8"] == {"max_oversampling"} and grid["vlm_goal_cap8"]["max_oversampling"] == "8"
    assert changed["vlm_goal_L32"] == {"clip_len"} and changed["vlm_oracle"] == {"scorer"}
    assert changed["vlm_goal_rr2"] == {"train_every", "batch_size"}
    assert grid["uniform_rr2"]["train_every"] == "16" and grid["uniform_rr2"]["batch_size"] == "32"
    assert goal["max_oversampling"] == "none" and goal["eval_full_every"] == "100000"
