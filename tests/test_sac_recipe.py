"""SAC recipe on robosuite Lift: smoke runs in each replay mode, outputs, CLI."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import csv  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("robosuite")

from vlmrb_torchrl.cli import main as cli_main  # noqa: E402
from vlmrb_torchrl.recipes.config import ConfigError, SACConfig, apply_overrides  # noqa: E402
from vlmrb_torchrl.recipes.sac import main as sac_main  # noqa: E402
from vlmrb_torchrl.scorers import scorer_factory  # noqa: E402

TINY = dict(total_frames=200, num_envs=2, frames_per_batch=50, learning_starts=100, max_episode_steps=50,
            batch_size=32, hidden=32, buffer_size=1_000, eval_every=200, eval_episodes=1, checkpoint_every=200,
            clip_len=4, progress=False, gallery_clips=0)


def read_metrics(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


class TestSACConfig:
    @pytest.mark.parametrize("override, match", [
        ("env=MiniGrid-DoorKey-5x5-v0", "env='MiniGrid-DoorKey-5x5-v0' is invalid: expected robosuite/<Task>"),
        ("tau=2", "tau=2.0 is invalid: expected a number in \\[0, 1\\]"),
        ("env_backend=threads", "env_backend='threads' is invalid"),
        ("env=robosuite/Stack scorer=builtin:lift", "scorer='builtin:lift' is invalid: expected a scorer for this task"),
        # a typo is the env's, not the scorer's (builtin:lift would refuse it otherwise)
        ("env=robosuite/Lfit", "env='robosuite/Lfit' is invalid: expected robosuite/<Task> .*did you mean 'robosuite/Lift'"),
        ("frame_size=128", "frame_size=128 is invalid: expected 64 with scorer=builtin:lift"),
        ("camera=agentview", "camera='agentview' is invalid: expected front_close\\+eye_in_hand with scorer=builtin:lift"),
        ("max_oversampling=0.5", "max_oversampling=0.5 is invalid: max_oversampling must be None \\(no ceiling\\) or a finite number >= 1"),
        ("policy_frequency=0", "policy_frequency=0 is invalid: expected an integer >= 1"),
        ("env_backend=parallel", "async_collection=True is invalid: expected false with env_backend=parallel"),
        ("q_lr=-1", "q_lr=-1.0 is invalid"),
        ("utd_ratio=0.007", "utd_ratio=0.007 is invalid: .* whole number"),  # 1.4 updates per 200-frame batch
    ])
    def test_bad_values(self, override, match):
        with pytest.raises(ConfigError, match=match):
            apply_overrides(SACConfig(), override.split()).validate()

    def test_defaults(self):
        cfg = SACConfig().validate()
        assert cfg.replay == "vlm_td" and cfg.scorer == "builtin:lift" and cfg.env == "robosuite/Lift"
        assert cfg.max_oversampling == 4.0
        assert cfg.camera == "front_close+eye_in_hand"  # the two cameras builtin:lift's models were trained on
        # another camera with another scorer; another task's default camera
        assert apply_overrides(SACConfig(), ["camera=agentview", "scorer=oracle:robosuite"]).validate().camera == "agentview"
        assert apply_overrides(SACConfig(), ["env=robosuite/Stack", "replay=uniform"]).validate().camera == "agentview"
        # other tasks, or no scorer: no complaint about builtin:lift
        for overrides in (["env=robosuite/Stack", "scorer=oracle:robosuite"], ["env=robosuite/Stack", "replay=uniform"],
                          ["max_oversampling=none"]):
            apply_overrides(SACConfig(), overrides).validate()

    def test_auto_scorer_on_a_task_without_a_builtin_model_is_the_oracle_said_once(self, capsys):
        cfg = apply_overrides(SACConfig(), ["env=robosuite/Stack"]).validate()
        assert cfg.scorer == "oracle:robosuite" and cfg.camera == "agentview"
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 1 and "oracle:robosuite, which is privileged" in lines[0] and "scorer=clip:<dir>" in lines[0]
        dataclasses.replace(cfg).validate()  # the recipe validates again: the resolved oracle is not announced twice
        assert capsys.readouterr().out == ""

    def test_updates_per_batch(self):
        assert SACConfig().updates_for(200) == 200  # one update per frame
        assert apply_overrides(SACConfig(), ["train_every=2"]).validate().updates_for(200) == 100
        assert apply_overrides(SACConfig(), ["utd_ratio=0.25"]).validate().updates_for(200) == 50
        assert apply_overrides(SACConfig(), ["utd_ratio=2"]).validate().updates_for(200) == 400
        with pytest.raises(ConfigError, match="give one of the two"):
            apply_overrides(SACConfig(), ["utd_ratio=2", "train_every=2"]).validate()

    def test_cli_help(self, capsys):
        with pytest.raises(SystemExit):
            cli_main(["train", "sac", "--help"])
        out = capsys.readouterr().out
        for key in ("tau=", "alpha_init=", "camera=", "replay='vlm_td'", "policy_lr=", "q_lr=", "policy_frequency=",
                    "utd_ratio=", "async_collection=", "fast_render="):
            assert key in out


_SLOW = pytest.mark.slow


# vlm_td (the default, with the gallery) stays in the default run; the other modes are slow
@pytest.mark.parametrize("replay", [pytest.param("uniform", marks=_SLOW), pytest.param("per", marks=_SLOW),
                                    pytest.param("vlm", marks=_SLOW), "vlm_td"])
def test_lift_smoke_each_replay_mode(tmp_path, replay):
    cfg = apply_overrides(SACConfig(), {**TINY, "replay": replay, "output_dir": str(tmp_path / replay),
                                        "gallery_clips": 1 if replay == "vlm_td" else 0})
    summary = sac_main(cfg)
    run_dir = tmp_path / replay
    rows = read_metrics(run_dir)
    assert [int(r["env_steps"]) for r in rows] == [200]
    for col in ("eval_success", "eval_return", "loss", "loss_actor", "loss_qvalue", "alpha", "entropy", "q_value",
                "env_steps_per_s"):
        assert math.isfinite(float(rows[-1][col])), (col, rows[-1])
    if replay.startswith("vlm"):
        for col in ("lambda", "lambda_effective", "fraction_scored", "max_oversampling_ratio"):
            assert math.isfinite(float(rows[-1][col]))
        # the ceiling holds (max_oversampling=4, the default)
        assert float(rows[-1]["max_oversampling_ratio"]) <= 4.0 + 1e-6
    assert summary["env_steps"] == 200 and summary["updates"] == 150
    assert summary["q_ceiling_exceeded_at"] is None  # critics within what the rewards can back up
    assert json.loads((run_dir / "config.json").read_text())["replay"] == replay
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "checkpoints" / "step_200" / "DONE").exists()
    if replay == "vlm_td":
        assert len(list((run_dir / "gallery").glob("*_score*"))) == 2


@pytest.mark.slow  # trains; the Lift smoke stays in the default run
def test_diverging_critics_are_reported(tmp_path, monkeypatch):
    # a ceiling no value can stay under stands in for critics that left what the rewards can back up
    import warnings

    import torch

    import vlmrb_torchrl.recipes.sac as sac_module
    from vlmrb_torchrl.recipes.value_ceiling import SoftValueCeiling

    class Unreachable(SoftValueCeiling):
        def ceiling(self, alpha: float) -> float:
            return -math.inf

    made = []
    monkeypatch.setattr(sac_module, "SoftValueCeiling", lambda **kw: made.append(Unreachable(**kw)) or made[-1])
    cfg = apply_overrides(SACConfig(), {**TINY, "replay": "uniform", "output_dir": str(tmp_path / "run"),
                                        "async_collection": False})  # no collector process: a fast test
    with pytest.warns(RuntimeWarning, match="critics are diverging") as caught:
        summary = sac_main(cfg)
    assert sum("critics are diverging" in str(w.message) for w in caught) == 1  # reported once
    ceiling = made[0]
    assert ceiling.gamma == cfg.gamma and ceiling.max_entropy == pytest.approx(7 * math.log(2))  # Lift: 7 actions
    # the third batch with updates in a row: learning starts at 100 frames, batches of 50
    assert summary["q_ceiling_exceeded_at"] == 200 == ceiling.exceeded_at
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["q_ceiling_exceeded_at"] == 200
    # checkpointed with the learner: a resumed run still says when it diverged, and does not report it again
    state = torch.load(tmp_path / "run" / "checkpoints" / "step_200" / "state.pt", weights_only=True)
    assert state["value_ceiling"]["exceeded_at"] == 200 and state["value_ceiling"]["reward_max"] <= 0
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        resumed = sac_main(apply_overrides(SACConfig(), {**TINY, "replay": "uniform", "total_frames": 300,
                                                         "resume": str(tmp_path / "run"), "async_collection": False,
                                                         "output_dir": str(tmp_path / "run")}))
    assert resumed["env_steps"] == 300 and resumed["q_ceiling_exceeded_at"] == 200
    assert not any("critics are diverging" in str(w.message) for w in again)
    assert len(made) == 2 and made[1].exceeded_at == 200  # the resumed run's ceiling took the saved state


@pytest.mark.slow  # trains and resumes through the CLI
def test_cli_vlm_frames_and_resume(tmp_path, capsys):
    # a pixel-reading scorer makes the env render (stride = clip_len: F of every L steps)
    args = [f"{k}={v}" for k, v in TINY.items()] + [
        "replay=vlm", "scorer=python:tests.test_sac_recipe:mean_pixel_scorer", "clip_stride=4", "clip_frames=2",
        f"output_dir={tmp_path / 'cli'}", "tensorboard=false", "stop_at=100", "checkpoint_every=100"]
    assert cli_main(["train", "sac", *args]) == 0
    # the saved python: spec is code a run directory names: given again (or trust_checkpoint=true), it is resumed
    assert cli_main(["train", "sac", f"resume={tmp_path / 'cli'}", "stop_at=None", "progress=false"]) == 2
    assert "trust_checkpoint=true" in capsys.readouterr().err
    assert cli_main(["train", "sac", f"resume={tmp_path / 'cli'}", "stop_at=None", "progress=false",
                     "scorer=python:tests.test_sac_recipe:mean_pixel_scorer"]) == 0
    assert int(read_metrics(tmp_path / "cli")[-1]["env_steps"]) == 200


class _MeanPixelScorer:
    prompt = "mean pixel"
    in_keys = ["pixels", "mask"]
    provenance = {"backend": "test"}

    def score(self, clips):
        return (clips["pixels"].float().mean((-1, -2, -3, -4)) / 255.0).clamp(0, 1)


@scorer_factory
def mean_pixel_scorer(**kwargs):
    return _MeanPixelScorer()


@pytest.mark.slow  # two short training runs
@pytest.mark.parametrize("async_collection", [True, False])
def test_a_seed_gives_the_same_run(tmp_path, async_collection):
    """robosuite draws Lift's cube size when it builds the model: the recipe seeds that build too. Collecting in a
    child process one batch ahead (weights sent by value with each batch request) is reproducible as well."""
    settings = {**TINY, "replay": "uniform", "total_frames": 300, "eval_every": 100, "checkpoint_every": 1_000,
                "tensorboard": False, "seed": 3, "async_collection": async_collection}
    runs = []
    for name in ("a", "b"):
        sac_main(apply_overrides(SACConfig(), {**settings, "output_dir": str(tmp_path / name)}))
        runs.append([{k: v for k, v in row.items() if k not in ("env_steps_per_s", "time_s")}
                     for row in read_metrics(tmp_path / name)])
    assert len(runs[0]) == 3 and runs[0] == runs[1]


def _rows_without_timing(run_dir):
    timing = {"env_steps_per_s", "time_s", "scorer_clips_per_s"}
    return [{k: v for k, v in row.items() if k not in timing} for row in read_metrics(run_dir)]


@pytest.mark.slow  # three short training runs
@pytest.mark.parametrize("replay", ["per", "vlm_td"])
def test_resume_reproduces_uninterrupted_run(tmp_path, replay):
    """A run stopped at a checkpoint and resumed logs what the uninterrupted run logs and ends with the same
    learner (networks, targets, temperature, optimizer) — bit for bit (synchronous scoring)."""
    import torch

    base = {**TINY, "replay": replay, "scorer": "oracle:robosuite", "async_scoring": False, "total_frames": 300,
            "eval_every": 100, "checkpoint_every": 200, "tensorboard": False, "policy_frequency": 2}
    full = sac_main(apply_overrides(SACConfig(), {**base, "output_dir": str(tmp_path / "full")}))
    sac_main(apply_overrides(SACConfig(), {**base, "stop_at": 200, "output_dir": str(tmp_path / "split")}))
    resumed = sac_main(apply_overrides(SACConfig(), {**base, "resume": str(tmp_path / "split"),
                                                     "output_dir": str(tmp_path / "split")}))
    assert _rows_without_timing(tmp_path / "full") == _rows_without_timing(tmp_path / "split")
    for key in ("env_steps", "episodes", "updates"):
        assert full[key] == resumed[key]
    a = torch.load(tmp_path / "full" / "checkpoints" / "step_300" / "state.pt", weights_only=False)
    b = torch.load(tmp_path / "split" / "checkpoints" / "step_300" / "state.pt", weights_only=False)
    assert a["learner"].keys() == b["learner"].keys() and any("target_critic" in k for k in a["learner"])
    for name, tensor in a["learner"].items():
        assert torch.equal(tensor, b["learner"][name]), name
    assert a["optim"]["state"].keys() == b["optim"]["state"].keys()


@pytest.mark.slow  # trains twice
def test_frames_from_state_scores_what_frames_passed_score(tmp_path):
    # frames_from_state=true: the envs write positions, the scorer's side draws the frames (RobosuiteStateRenderer);
    # synchronous scoring makes both runs score the same clips, so their rows and scores must be the same
    summaries = {}
    for state in (True, False):
        out = tmp_path / str(state)
        cfg = apply_overrides(SACConfig(), {**TINY, "replay": "vlm_td", "scorer": "builtin:lift", "output_dir": str(out),
                                            "frames_from_state": state, "async_scoring": False, "gallery_clips": 0})
        summaries[state] = sac_main(cfg)
        rows = read_metrics(out)
        summaries[state]["rows"] = [{k: v for k, v in r.items() if k not in ("env_steps_per_s", "time_s", "scorer_clips_per_s")}
                                     for r in rows]
    assert summaries[True]["fraction_scored"] > 0.5
    assert summaries[True]["rows"] == summaries[False]["rows"]
