"""DQN recipe and the vlmrb command: config validation, smoke runs, outputs, resume."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("minigrid")

from vlmrb_torchrl.cli import main as cli_main  # noqa: E402
from vlmrb_torchrl.recipes.config import ConfigError, DQNConfig, apply_overrides  # noqa: E402
from vlmrb_torchrl.recipes.dqn import main as dqn_main  # noqa: E402

TINY = dict(total_frames=512, num_envs=2, frames_per_batch=64, learning_starts=128, eval_every=256,
            eval_episodes=2, buffer_size=2_000, checkpoint_every=512, clip_len=4, batch_size=16,
            progress=False, hidden=32, n_steps=2, gallery_clips=1, gallery_steps=200)


def read_metrics(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


class TestConfig:
    def test_unknown_key_suggests(self):
        with pytest.raises(ConfigError, match="unknown key 'lamda_max'; did you mean 'lambda_max'"):
            apply_overrides(DQNConfig(), ["lamda_max=0.3"])

    @pytest.mark.parametrize("override, match", [
        ("replay=prio", "replay='prio' is invalid: expected one of"),
        ("lambda_max=1.5", "lambda_max=1.5 is invalid: lambda_max must be in \\[0, 1\\]"),
        ("total_frames=abc", "total_frames='abc' is invalid: expected int"),
        ("frames_per_batch=100", "frames_per_batch=100 is invalid: expected a multiple of num_envs=8"),
        ("clip_frames=40", "clip_frames=40 is invalid"),
        ("unscored_priority=median", "unscored_priority='median' is invalid: unscored_priority must be 'mean', 'max'"),
        ("async_scoring=maybe", "async_scoring='maybe' is invalid: expected bool"),
        ("torch_threads=0", "torch_threads=0 is invalid: expected an integer >= 1"),
        ("scorer_kwargs={p: 0.3}", "scorer_kwargs='{p: 0.3}' is invalid: expected a JSON object"),
        ("scorer_kwargs=[0.3]", "scorer_kwargs='\\[0.3\\]' is invalid: expected a JSON object, got list"),
        ("view=global", r"view='global' is invalid: expected one of \['partial', 'full', 'both'\]"),
        ("eval_max_episode_steps=0", "eval_max_episode_steps=0 is invalid: expected None or an integer >= 1"),
        ("spread=0", r"spread=0.0 is invalid: spread must be None \(no episode credit\) or a per-step decay in \(0, 1\]"),
        ("spread=1.2", r"spread=1.2 is invalid: spread must be None"),
        ("per_alpha=-1", r"per_alpha=-1.0 is invalid: \(the sampler's alpha\) alpha must be a finite number >= 0"),
    ])
    def test_bad_values(self, override, match):
        with pytest.raises(ConfigError, match=match):
            apply_overrides(DQNConfig(), [override]).validate()

    def test_over_sampling_ceiling_defaults_per_recipe(self):
        # DQN: the paper's sampler (a ceiling of 4 switches VLM-RB off where goal clips are rare, issue 30);
        # SAC keeps 4 (robosuite Lift); either recipe's default reaches the sampler, and both can be overridden.
        from vlmrb_torchrl.recipes.config import SACConfig
        from vlmrb_torchrl.recipes.replay import make_replay
        from vlmrb_torchrl.scorers import make_scorer

        assert DQNConfig().max_oversampling is None and SACConfig().max_oversampling == 4.0
        for cfg, expected in ((DQNConfig(replay="vlm", buffer_size=64), None),
                              (apply_overrides(DQNConfig(replay="vlm", buffer_size=64), ["max_oversampling=4"]), 4.0),
                              (SACConfig(replay="vlm", buffer_size=64), 4.0)):
            replay = make_replay(cfg, generator=torch.Generator().manual_seed(0), updates=10,
                                 scorer=make_scorer("oracle:minigrid"))
            try:
                assert replay.buffer.sampler.max_oversampling == expected
            finally:
                replay.close()

    def test_zero_eps_with_importance_weights_and_only_prioritised_replay_is_refused(self):
        with pytest.raises(ConfigError, match="eps=0.0 is invalid: eps=0 with beta=0.4 > 0 and lambda reaching 1"):
            apply_overrides(DQNConfig(), ["eps=0", "beta=0.4", "lambda_max=1"]).validate()
        apply_overrides(DQNConfig(), ["eps=0", "beta=0.4", "lambda_max=0.5"]).validate()  # uniform share

    def test_full_view_is_for_minigrid(self):
        with pytest.raises(ConfigError, match="view='full' is invalid: expected 'partial' \\(the others are for MiniGrid"):
            apply_overrides(DQNConfig(), ["env=ALE/Pong-v5", "view=full"]).validate()
        apply_overrides(DQNConfig(), ["env=MiniGrid-DoorKey-12x12-v0", "view=full",
                                      "scorer=oracle:minigrid_goal"]).validate()

    def test_action_subsets_are_for_minigrid(self):
        with pytest.raises(ConfigError, match="actions='left,right' is invalid: expected 'auto' or 'all'"):
            apply_overrides(DQNConfig(), ["env=ALE/Pong-v5", "actions=left,right"]).validate()
        from vlmrb_torchrl.envs import DOORKEY_ACTIONS
        from vlmrb_torchrl.envs.minigrid import minigrid_actions

        assert minigrid_actions("MiniGrid-DoorKey-6x6-v0", "auto") == DOORKEY_ACTIONS
        assert minigrid_actions("MiniGrid-Empty-5x5-v0", "auto") is None
        assert minigrid_actions("MiniGrid-DoorKey-6x6-v0", "all") is None
        assert minigrid_actions("MiniGrid-DoorKey-6x6-v0", "left, right,forward") == ("left", "right", "forward")

    def test_old_key_names_are_read_as_the_new_ones_with_one_line(self, capsys):
        import dataclasses

        from vlmrb_torchrl.recipes import config

        config._TOLD.clear()  # (the message is said once per process)
        cfg = apply_overrides(DQNConfig(), ["vlm_warmup=100", "default_priority=max", "vlm_eps=0.02", "vlm_beta=0.1",
                                            "vlm_spread=0.9"]).validate()
        assert (cfg.warmup, cfg.unscored_priority, cfg.eps, cfg.beta, cfg.spread) == (100, "max", 0.02, 0.1, 0.9)
        lines = capsys.readouterr().err.splitlines()
        assert "vlmrb: vlm_warmup is now called warmup (the sampler's name); vlm_warmup=100 is read as warmup=100." in lines
        assert len(lines) == 5
        apply_overrides(DQNConfig(), {"vlm_eps": 0.03})  # once per process
        assert capsys.readouterr().err == ""
        with pytest.raises(ConfigError, match="vlm_eps and eps are the same key"):
            apply_overrides(DQNConfig(), ["vlm_eps=0.1", "eps=0.2"])
        names = {f.name for f in dataclasses.fields(DQNConfig)}
        assert set(config.RENAMED_KEYS.values()) <= names and not set(config.RENAMED_KEYS) & names

    def test_a_checkpoint_of_a_run_with_the_old_key_names_resumes(self, tmp_path):
        from vlmrb_torchrl.recipes.checkpoint import check_resume_config

        checkpoint = tmp_path / "checkpoints" / "step_100"
        checkpoint.mkdir(parents=True)
        old = json.loads(json.dumps(vars(DQNConfig(eps=0.02, warmup=50)))) | {"resume": str(checkpoint)}
        for new, before in (("eps", "vlm_eps"), ("warmup", "vlm_warmup"), ("unscored_priority", "default_priority"),
                            ("beta", "vlm_beta"), ("spread", "vlm_spread")):
            old[before] = old.pop(new)
        (checkpoint / "config.json").write_text(json.dumps(old))
        check_resume_config(DQNConfig(eps=0.02, warmup=50, resume=str(checkpoint)), checkpoint)  # the same run
        with pytest.raises(ConfigError, match=r"eps: 0.02 \(checkpoint\) vs 0.5 \(now\)"):
            check_resume_config(DQNConfig(eps=0.5, warmup=50, resume=str(checkpoint)), checkpoint)

    def test_conversions(self):
        cfg = apply_overrides(DQNConfig(), ["threshold=None", "clip_frames=8", "async_scoring=false", "lr=1e-3",
                                            "total_frames=3e5"])
        assert cfg.threshold is None and cfg.clip_frames == 8 and cfg.async_scoring is False
        assert cfg.lr == 1e-3 and cfg.total_frames == 300_000

    def test_threshold_auto_is_the_scorers_decision_threshold(self):
        from vlmrb_torchrl.recipes.config import SACConfig

        assert DQNConfig().validate().threshold == 0.5  # builtin:minigrid: no tuned threshold
        assert SACConfig().validate().threshold == 0.01  # scorer=auto on robosuite/Lift: builtin:lift's (tuned: 0.01)
        assert SACConfig(scorer="oracle:robosuite").validate().threshold == 0.5
        assert SACConfig(env="ogbench/scene-task2").validate().threshold == 0.95  # builtin:scene-task2's
        # builtin:scene with other checks: its threshold was tuned for its own
        scene = {"env": "ogbench/scene-task2", "scorer": "builtin:scene-task2"}
        custom = {"prompt": "the cube is in the drawer", "negatives": ["the cube is on the table"]}
        assert SACConfig(**scene).validate().threshold == 0.95
        assert SACConfig(**scene, scorer_kwargs=custom).validate().threshold == 0.5
        assert SACConfig(**scene, prompt="the drawer is open").validate().threshold == 0.5
        # given on the command line: auto, a number or none; a word that is neither is refused
        assert apply_overrides(SACConfig(), ["threshold=0.7"]).validate().threshold == 0.7
        assert apply_overrides(SACConfig(), ["threshold=none"]).validate().threshold is None
        assert apply_overrides(SACConfig(**scene), ["threshold=auto"]).validate().threshold == 0.95
        with pytest.raises(ConfigError, match="threshold='high' is invalid"):
            apply_overrides(SACConfig(), ["threshold=high"])
        with pytest.raises(ConfigError, match="threshold=1.5 is invalid"):
            SACConfig(threshold=1.5).validate()

    def test_scorer_kwargs_reach_the_scorer(self, tmp_path):
        from vlmrb_torchrl.cli import _train_parser, build_config
        from vlmrb_torchrl.recipes.replay import make_scorer_from_config

        spec = "scorer=python:vlmrb_torchrl.scorers.baselines:RandomScorer"
        cfg = apply_overrides(DQNConfig(), [spec, 'scorer_kwargs={"p": 0.3, "seed": 7}']).validate()
        scorer = make_scorer_from_config(cfg)
        assert (scorer.p, scorer.provenance["seed"]) == (0.3, 7)
        # a config file gives a mapping; a resumed run reads it back from config.json
        (tmp_path / "run.yaml").write_text("scorer_kwargs:\n  p: 0.25\n")
        args = _train_parser("dqn").parse_args(["--config", str(tmp_path / "run.yaml"), spec])
        assert build_config("dqn", args).scorer_kwargs == {"p": 0.25}
        (tmp_path / "config.json").write_text(json.dumps({"scorer_kwargs": {"p": 0.2}}))
        args = _train_parser("dqn").parse_args([f"resume={tmp_path}"])
        assert build_config("dqn", args).scorer_kwargs == {"p": 0.2}
        with pytest.raises(ConfigError, match="scorer_kwargs=.* is invalid: expected None or a mapping"):
            apply_overrides(DQNConfig(), ["prompt=open the door", 'scorer_kwargs={"prompt": "x"}']).validate()
        with pytest.raises(ValueError, match="RandomScorer.p must be a number in \\[0, 1\\]"):
            make_scorer_from_config(apply_overrides(DQNConfig(), [spec, 'scorer_kwargs={"p": 2}']))

    def test_cli_reports_errors_and_help(self, capsys):
        assert cli_main(["train", "dqn", "replay=nope"]) == 2
        assert "replay='nope' is invalid" in capsys.readouterr().err
        # a typo in env is blamed on env (it used to surface as the built-in scorer's mission error)
        assert cli_main(["train", "dqn", "env=MiniGrid-DoorKy-8x8-v0", "output_dir=unused"]) == 2
        err = capsys.readouterr().err
        assert "env='MiniGrid-DoorKy-8x8-v0' is invalid" in err and "did you mean 'MiniGrid-DoorKey-8x8-v0'" in err
        assert "scorer" not in err
        assert cli_main(["--help"]) == 0
        assert "vlmrb train dqn" in capsys.readouterr().out
        with pytest.raises(SystemExit):
            cli_main(["train", "dqn", "--help"])
        out = capsys.readouterr().out
        for key in ("lambda_max=", "replay=", "scorer=", "total_frames=", "resume="):
            assert key in out

    @pytest.mark.parametrize("argv, code, says", [
        (["--version"], 0, "vlmrb-torchrl 0.1.0"),
        (["--help"], 0, "vlmrb train dqn"),
        (["train", "dqn", "--help"], 0, "lambda_max="),
        (["train", "sac", "--help"], 0, "tau="),
        (["train", "dqn", "lamda_max=0.3"], 2, "did you mean 'lambda_max'"),
        (["train", "dqn", "total_frames=abc"], 2, "expected int"),
        (["train", "dqn", "--config", "/nonexistent.yaml"], 2, "cannot read the file"),
    ])
    def test_quick_answers_load_neither_torch_nor_torchrl(self, argv, code, says):
        # help, the version and configuration errors must answer at once: torch + TorchRL take seconds to import
        script = ("import sys\nfrom vlmrb_torchrl.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
                  "except SystemExit as exit:\n    code = exit.code\n"
                  "heavy = sorted(m for m in ('torch', 'torchrl', 'tensordict', 'numpy') if m in sys.modules)\n"
                  "print('HEAVY', heavy, file=sys.stderr)\nsys.exit(code)\n")
        out = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120,
                             cwd=Path(__file__).resolve().parents[1])
        assert out.returncode == code, out.stderr
        assert says in out.stdout + out.stderr
        assert "HEAVY []" in out.stderr

    def test_third_party_info_lines_stay_out_of_the_progress_bar(self):
        # issue 63: TorchRL's INFO lines (and transformers' "Loading weights" bar) were printed inside the bar
        script = ("import logging, torch\nfrom vlmrb_torchrl.cli import quiet_third_party\nquiet_third_party()\n"
                  "from torchrl.data import LazyTensorStorage, ReplayBuffer\n"
                  "ReplayBuffer(storage=LazyTensorStorage(10)).extend(torch.zeros(3, 2))\n"
                  "print('--- TorchRL at INFO again:', flush=True)\nlogger = logging.getLogger('torchrl')\nfor h in [logger, *logger.handlers]:\n    h.setLevel('INFO')\n"
                  "ReplayBuffer(storage=LazyTensorStorage(10)).extend(torch.zeros(3, 2))\n")
        env = {k: v for k, v in os.environ.items() if k not in ("RL_LOGGING_LEVEL", "TORCHRL_CONSOLE_STREAM")}
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, env=env,
                             cwd=Path(__file__).resolve().parents[1])
        assert out.returncode == 0, out.stderr
        quiet, loud = out.stdout.split("--- TorchRL at INFO again:")
        assert "[INFO]" not in quiet + out.stderr
        assert "Initialized LazyTensorStorage" in loud  # the line the quiet part kept out (so this test can fail)

    def test_console_script_installed(self):
        # the `vlmrb` entry point pip generates next to the interpreter (or anywhere on PATH)
        script = Path(sys.executable).parent / "vlmrb"
        script = str(script) if script.exists() else shutil.which("vlmrb")
        assert script is not None, "the vlmrb console script is not installed (pip install -e .)"
        out = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "vlmrb train dqn" in out.stdout and "vlmrb train sac" in out.stdout
        out = subprocess.run([script, "train", "nope"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and "unknown recipe 'nope'" in out.stderr

    def test_help_names_the_default_run_directory(self, capsys, tmp_path, monkeypatch):
        from vlmrb_torchrl.recipes.run import Run

        with pytest.raises(SystemExit):
            cli_main(["train", "dqn", "--help"])
        assert "runs/<recipe>__<env>__<replay>__seed<seed>__<time>" in capsys.readouterr().out
        monkeypatch.chdir(tmp_path)
        cfg = apply_overrides(DQNConfig(), {**TINY, "tensorboard": False})
        with Run(cfg, recipe="dqn", total=1) as run:  # output_dir=None: the documented default
            assert run.dir.parent == Path("runs")
            assert run.dir.name.startswith("dqn__MiniGrid-DoorKey-5x5-v0__vlm__seed0__")


def test_n_step_returns_take_done_flags_at_the_end_of_the_window():
    from tensordict import TensorDict
    from torchrl.data.postprocs import MultiStep

    from vlmrb_torchrl.recipes.dqn import n_step_returns

    # env 0 terminates at t=3; env 1 is truncated (time limit) at t=2
    steps = 6
    done = torch.zeros(2, steps, 1, dtype=torch.bool)
    done[0, 3] = done[1, 2] = True
    terminated, truncated = done.clone(), done.clone()
    terminated[1], truncated[0] = False, False
    batch = TensorDict({"obs": torch.arange(steps).float().expand(2, steps).unsqueeze(-1),
                        "next": {"obs": torch.arange(1, steps + 1).float().expand(2, steps).unsqueeze(-1),
                                 "reward": torch.ones(2, steps, 1), "done": done, "terminated": terminated,
                                 "truncated": truncated}}, [2, steps])
    out = n_step_returns(MultiStep(gamma=0.5, n_steps=3), batch)
    # next obs: the window's last next-obs (cut at episode ends and at the batch end)
    assert out["next", "obs"].squeeze(-1).tolist() == [[3, 4, 4, 4, 6, 6], [3, 3, 3, 6, 6, 6]]
    assert out["next", "reward"].squeeze(-1).tolist() == [[1.75, 1.75, 1.5, 1, 1.5, 1], [1.75, 1.5, 1, 1.75, 1.5, 1]]
    # t=1, 2 of env 0 end their window at the termination: no bootstrap from the terminal obs
    assert out["next", "terminated"].squeeze(-1).tolist() == [[False, True, True, True, False, False], [False] * 6]
    # truncation still bootstraps (terminated False) but ends the window
    assert out["next", "truncated"].squeeze(-1).tolist() == [[False] * 6, [True, True, True, False, False, False]]
    assert torch.equal(out["next", "done"], out["next", "terminated"] | out["next", "truncated"])
    # what the fix is for: TorchRL's MultiStep alone keeps the first step's flags
    assert not MultiStep(gamma=0.5, n_steps=3)(batch.clone())["next", "terminated"][0, 1]


_SLOW = pytest.mark.slow


@pytest.mark.parametrize("replay", [pytest.param("uniform", marks=_SLOW), pytest.param("per", marks=_SLOW), "vlm",
                                    pytest.param("vlm_td", marks=_SLOW)])
def test_minigrid_smoke_each_replay_mode(tmp_path, monkeypatch, replay):
    from torchrl.data.postprocs import MultiStep

    n_step_inputs = []  # the entries each n-step computation was given
    forward = MultiStep.forward
    monkeypatch.setattr(MultiStep, "forward", lambda self, td: n_step_inputs.append(
        set(td.keys(True, True))) or forward(self, td))
    cfg = apply_overrides(DQNConfig(), {**TINY, "replay": replay, "output_dir": str(tmp_path / replay)})
    summary = dqn_main(cfg)
    # rendered frames go to the clip stream only, never through the n-step returns (they cost ~4x its time)
    assert len(n_step_inputs) == 512 // 64
    assert all(not any("pixels" in (k if isinstance(k, tuple) else (k,)) for k in keys) for keys in n_step_inputs)
    run_dir = tmp_path / replay
    rows = read_metrics(run_dir)
    assert [int(r["env_steps"]) for r in rows] == [256, 512]
    for row in rows:
        for col in ("eval_success", "eval_return", "loss", "epsilon", "env_steps_per_s"):
            assert math.isfinite(float(row[col])), (col, row)
        if replay.startswith("vlm"):
            for col in ("lambda", "fraction_scored", "scorer_clips_per_s"):
                assert math.isfinite(float(row[col])), (col, row)
            assert 0.0 <= float(row["sampled_positive_fraction"]) <= 1.0
        else:
            assert row["sampled_positive_fraction"] == ""
    assert summary["env_steps"] == 512 and summary["updates"] == (512 - 128) // 4 + 64 // 4
    config = json.loads((run_dir / "config.json").read_text())
    assert config["replay"] == replay
    if replay.startswith("vlm"):  # builtin:minigrid's checks, derived from DoorKey's mission, are in the config
        assert config["scorer_checks"]["checks_from"] == "mission"
        assert config["scorer_checks"]["task"] == "use the key to open the door and then get to the goal"
        assert config["scorer_checks"]["checks"][0] == 'progress("the agent holds the key" vs "the key is on the floor")'
    else:
        assert "scorer_checks" not in config
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "checkpoints" / "step_512" / "DONE").exists()
    state = torch.load(run_dir / "checkpoints" / "step_512" / "state.pt", weights_only=False)
    assert [t.shape for k, t in state["loss"].items() if k.endswith("bias")][-1] == (5,)  # DoorKey's 5 actions
    if replay.startswith("vlm"):
        gifs = sorted(p.name for p in (run_dir / "gallery").glob("*_score*"))  # GIFs, or PNGs of still clips
        assert len(gifs) == 2 and gifs[0].startswith("bottom") and gifs[1].startswith("top")
        assert all("_step" in name for name in gifs)  # the run gallery: clips of the whole run, with their step
        # the checkpoint holds every transition's score: pending tails are flushed before it
        from vlmrb_torchrl.recipes.replay_checkpoint import expand

        replay_dir = run_dir / "checkpoints" / "step_512" / "replay"
        sampler = json.loads((replay_dir / "replay.json").read_text())["sampler"]
        scored = expand(torch.load(replay_dir / "replay.pt", weights_only=True)["sampler"]["scored"],
                        sampler["notes"]["scored"])
        assert sampler["used"] == 512 and scored.all()  # (a checkpoint holds the slots in use only)


def test_full_view_run_with_goal_labels_and_capped_evaluation(tmp_path):
    """view=full (padded index observations), oracle:minigrid_goal, evaluation episodes capped at 5 steps."""
    cfg = apply_overrides(DQNConfig(), {**TINY, "env": "MiniGrid-DoorKey-6x6-v0", "view": "full", "replay": "vlm",
                                        "scorer": "oracle:minigrid_goal", "gallery_clips": 0, "tensorboard": False,
                                        "eval_max_episode_steps": 5, "max_episode_steps": 50,
                                        "output_dir": str(tmp_path)})
    summary = dqn_main(cfg)
    rows = read_metrics(tmp_path)
    assert [int(r["env_steps"]) for r in rows] == [256, 512] and summary["updates"] > 0
    # 5 steps cannot solve DoorKey-6x6 (the key, the door and the goal are further apart): every episode failed
    assert all(float(r["eval_success"]) == 0.0 for r in rows)
    assert all(float(r["eval_episode_len"]) == 5.0 for r in rows)
    # the evaluation at the training limit (50 steps): at the checkpoint (512, also the end) only
    assert rows[0]["eval_full_success"] == "" and rows[1]["eval_full_success"] != ""
    assert 5.0 < float(rows[1]["eval_full_episode_len"]) <= 50.0
    # the training episodes that ended before each row (each env copy plays >= 2 per row): success share, length
    for r in rows:
        assert 0.0 <= float(r["train_success"]) <= 1.0 and 1.0 <= float(r["train_episode_len"]) <= 50.0
    state = torch.load(tmp_path / "checkpoints" / "step_512" / "state.pt", weights_only=False)
    first = next(t for k, t in state["loss"].items() if k.endswith("weight"))
    assert first.shape == (36 * 17 + 36 + 4 + 15, 32)  # the full view's one-hot size, OneHotLinear's layout


@pytest.mark.slow
def test_a_task_that_changes_every_episode_is_scored_per_clip(tmp_path, capsys):
    """BabyAI-GoToLocal draws a new mission every episode: the envs write it, the scorer (scorer=auto: a "go to"
    mission, builtin:minigrid_agent on frames of the agent-centred view) scores each clip with its own mission's
    checks, and the log says so."""
    cfg = apply_overrides(DQNConfig(), {**TINY, "env": "BabyAI-GoToLocal-v0", "replay": "vlm",
                                        "async_scoring": False,  # scored before the last row, however busy the machine
                                        "output_dir": str(tmp_path / "run")})
    summary = dqn_main(cfg)
    assert summary["env_steps"] == 512
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["scorer"], config["frame_view"]) == ("builtin:minigrid_agent", "agent")
    assert config["scorer_checks"]["checks_from"] == "mission per clip"
    assert config["scorer_checks"]["doors"] is False  # a single room: no implied door checks
    out = capsys.readouterr().out
    assert "derived for each clip from its episode's mission" in out and "agent-centred view" in out
    assert "the door checks a mission only implies are left out" in out
    assert sum(line.startswith("builtin:minigrid_agent: ") for line in out.splitlines()) == 1  # one line per scorer
    rows = read_metrics(tmp_path / "run")
    assert float(rows[-1]["fraction_scored"]) > 0


@pytest.mark.parametrize("replay", ["uniform", "vlm"])
def test_a_failing_run_closes_its_replay_and_restores_torch_threads(tmp_path, monkeypatch, replay):
    import threading

    from vlmrb_torchrl.recipes import dqn, loop

    made = []

    def make_replay(*args, **kwargs):
        made.append(make_replay.original(*args, **kwargs))
        return made[-1]

    def failing_evaluation(*args, counters, **kwargs):  # fails once learning is under way
        seen.append(counters["env_steps"])
        if counters["env_steps"] >= 256:
            raise RuntimeError("evaluation failed")
        return loop_maybe_evaluate(*args, counters=counters, **kwargs)

    seen = []
    loop_maybe_evaluate = loop.maybe_evaluate
    make_replay.original = dqn.make_replay
    monkeypatch.setattr(dqn, "make_replay", make_replay)
    monkeypatch.setattr(loop, "maybe_evaluate", failing_evaluation)
    threads_before = torch.get_num_threads()
    scorers_before = {t.ident for t in threading.enumerate() if t.name == "vlmrb-async-scorer"}
    cfg = apply_overrides(DQNConfig(), {**TINY, "replay": replay, "output_dir": str(tmp_path / replay),
                                        "torch_threads": threads_before + 1, "tensorboard": False})
    with pytest.raises(RuntimeError, match="evaluation failed"):
        dqn_main(cfg)
    assert seen == [64, 128, 192, 256]  # it failed mid-run, with updates made
    assert torch.get_num_threads() == threads_before
    assert len(made) == 1 and made[0].closed
    assert not [t for t in threading.enumerate()
                if t.name == "vlmrb-async-scorer" and t.ident not in scorers_before and t.is_alive()]


def _equal_metrics(a, b):
    # timings, and the scorer's frame-embedding cache (not checkpointed: a resumed run starts it empty,
    # so it embeds again what the uninterrupted run had cached; the scores are the same)
    timing = {"env_steps_per_s", "time_s", "scorer_clips_per_s", "scorer_embedding_cache_hits",
              "scorer_embedding_cache_size", "scorer_frames_embedded"}
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert {k: v for k, v in ra.items() if k not in timing} == {k: v for k, v in rb.items() if k not in timing}


@pytest.mark.parametrize("threads", [1, 2])
def test_closing_a_batched_env_keeps_torch_threads(threads):
    """TorchRL's SerialEnv.close() raises torch's threads by its workers; the recipes' keeps the learner's."""
    from vlmrb_torchrl.envs.minigrid.env import make_minigrid_env
    from vlmrb_torchrl.recipes.envs import make_batched_env

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        env = make_batched_env(lambda: make_minigrid_env("MiniGrid-Empty-5x5-v0"), 2)  # not a partial: SerialEnv
        assert type(env).__name__ == "SerialEnv"
        env.rollout(3)
        env.close()
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)


def test_a_distilled_scorer_is_checkpointed_with_the_run(tmp_path):
    from vlmrb_torchrl.recipes.config import ConfigError

    # async_scoring=False: every batch waits for its scores, so the one metrics row has teacher calls to report
    # however busy the machine (a background scorer can still be at its first batch when a 256-frame run ends)
    cfg = apply_overrides(DQNConfig(), {**TINY, "replay": "vlm", "distill": True, "gallery_clips": 0,
                                        "total_frames": 256, "checkpoint_every": 256, "eval_episodes": 1,
                                        "async_scoring": False, "tensorboard": False, "output_dir": str(tmp_path)})
    dqn_main(cfg)
    rows = read_metrics(tmp_path)
    assert all(0.0 < float(r["scorer_teacher_share"]) <= 1.0 for r in rows)  # the scorer's stats(), prefixed
    assert {float(r["scorer_trusted"]) for r in rows} <= {0.0, 1.0}
    state = torch.load(tmp_path / "checkpoints" / "step_256" / "state.pt", weights_only=False)
    assert state["scorer"]["counters"]["teacher_calls"] > 0 and state["scorer"]["student"]
    with pytest.raises(ConfigError, match="distill=True is invalid.*scorer_backend=thread"):
        apply_overrides(DQNConfig(), {"replay": "vlm", "distill": True, "scorer_backend": "process"}).validate()


@pytest.mark.slow
@pytest.mark.parametrize("replay", ["vlm", "per", "vlm_distill", "vlm_spread"])
def test_resume_reproduces_uninterrupted_run(tmp_path, replay):
    # bit-exact only with MKL_CBWR set before MKL's first call (conftest.py does, as the vlmrb command does)
    distill = replay == "vlm_distill"
    spread = {"spread": 0.9} if replay == "vlm_spread" else {}  # episode credit: links and credit checkpointed
    # eval_max_episode_steps: the evaluation at the training limit runs at the checkpoints too
    base = {**TINY, **spread, "replay": "vlm" if distill or spread else replay, "async_scoring": False, "total_frames": 1024,
            "checkpoint_every": 512, "gallery_clips": 0, "distill": distill, "eval_max_episode_steps": 20}
    full = dqn_main(apply_overrides(DQNConfig(), {**base, "output_dir": str(tmp_path / "full")}))
    dqn_main(apply_overrides(DQNConfig(), {**base, "stop_at": 512, "output_dir": str(tmp_path / "split")}))
    resumed = dqn_main(apply_overrides(DQNConfig(), {**base, "resume": str(tmp_path / "split"),
                                                       "output_dir": str(tmp_path / "split")}))
    _equal_metrics(read_metrics(tmp_path / "full"), read_metrics(tmp_path / "split"))
    for key in ("env_steps", "episodes", "updates"):
        assert full[key] == resumed[key]
    a = torch.load(tmp_path / "full" / "checkpoints" / "step_1024" / "state.pt", weights_only=False)
    b = torch.load(tmp_path / "split" / "checkpoints" / "step_1024" / "state.pt", weights_only=False)
    for name, tensor in a["loss"].items():
        assert torch.equal(tensor, b["loss"][name]), name
    if distill:  # the student resumed where it stopped: same weights and routing counters at the end
        assert a["scorer"]["counters"] == b["scorer"]["counters"]
        for name, tensor in a["scorer"]["student"].items():
            assert torch.equal(tensor, b["scorer"]["student"][name]), name


@pytest.mark.slow  # trains and resumes through the CLI
def test_cli_quick_preset_and_resume_dir(tmp_path, capsys):
    code = cli_main(["train", "dqn", *[f"{k}={v}" for k, v in TINY.items()], "replay=vlm",
                     f"output_dir={tmp_path / 'cli'}", "tensorboard=false"])
    assert code == 0
    out = capsys.readouterr().out
    assert "eval success" in out and str(tmp_path / "cli") in out
    # resume=<run dir> reads the run's config back; a larger total continues the same run
    code = cli_main(["train", "dqn", f"resume={tmp_path / 'cli'}", "total_frames=640", "progress=false"])
    assert code == 0
    rows = read_metrics(tmp_path / "cli")
    assert int(rows[-1]["env_steps"]) == 640


def test_quick_preset_follows_the_env(capsys):
    from vlmrb_torchrl.cli import _train_parser, build_config
    from vlmrb_torchrl.envs import get_family
    from vlmrb_torchrl.recipes.config import QUICK_PRESETS

    parser = _train_parser("dqn")
    atari = build_config("dqn", parser.parse_intermixed_args(["--quick", "env=ALE/Pong-v5", "eval_episodes=2"]))
    for key, value in get_family("atari").quick_preset.items():
        assert getattr(atari, key) == (2 if key == "eval_episodes" else value), key  # overrides win
    assert atari.scorer == "builtin:atari"
    grid = build_config("dqn", parser.parse_intermixed_args(["--quick"]))
    assert grid.total_frames == QUICK_PRESETS["dqn"]["total_frames"] and grid.scorer == "builtin:minigrid"
    # the bounds are in --help
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "with env=ALE/Pong-v5 and the other Atari ids:" in out and "eval_max_episode_steps" in out
    assert "gallery_steps" in out


# the default run has the user's own Atari run below (vlm with the shipped scorer, through the CLI)
@pytest.mark.parametrize("replay", [pytest.param("uniform", marks=_SLOW), pytest.param("per", marks=_SLOW),
                                    pytest.param("vlm", marks=_SLOW), pytest.param("vlm_td", marks=_SLOW)])
def test_atari_smoke_each_replay_mode(tmp_path, replay):
    pytest.importorskip("ale_py")
    cfg = apply_overrides(DQNConfig(), {
        **TINY, "env": "ALE/Breakout-v5", "replay": replay, "output_dir": str(tmp_path / replay),
        "scorer": "python:vlmrb_torchrl.scorers.baselines:RandomScorer", "max_episode_steps": 100,
        "total_frames": 256, "learning_starts": 64, "eval_every": 256, "checkpoint_every": 256})
    summary = dqn_main(cfg)
    rows = read_metrics(tmp_path / replay)
    assert int(rows[-1]["env_steps"]) == 256 and math.isfinite(float(rows[-1]["eval_return"]))
    assert rows[-1]["eval_success"] == "nan"  # Atari has no success flag
    assert summary["updates"] == (256 - 64) // 4 + 64 // 4
    if replay.startswith("vlm"):
        assert len(list((tmp_path / replay / "gallery").glob("*_score*"))) == 2


def test_atari_quick_run_through_the_cli_with_the_shipped_scorer(tmp_path, capsys):
    """A user's first Atari run, shrunk: `vlmrb train dqn env=ALE/Breakout-v5 --quick` with scorer=auto
    (-> builtin:atari scoring 64-px frames) writes its summary, metrics and gallery, evaluations bounded."""
    pytest.importorskip("ale_py")
    run_dir = tmp_path / "quick"
    code = cli_main(["train", "dqn", "--quick", "env=ALE/Breakout-v5", f"output_dir={run_dir}", "total_frames=256",
                     "learning_starts=64", "eval_every=256", "checkpoint_every=256", "eval_max_episode_steps=50",
                     "gallery_clips=1", "progress=false", "tensorboard=false"])
    assert code == 0
    assert "eval return" in capsys.readouterr().out
    config = json.loads((run_dir / "config.json").read_text())
    assert config["scorer"] == "builtin:atari" and config["replay"] == "vlm"
    assert config["eval_episodes"] == 4 and config["gallery_steps"] == 1_000  # the Atari preset
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 256 and summary["updates"] == 2 * 128 // 4  # 2 batches of 128, both learn
    assert summary["fraction_scored"] > 0 and math.isfinite(summary["eval_return"])
    rows = read_metrics(run_dir)
    assert rows[-1]["eval_success"] == "nan"  # Atari has no success flag
    gifs = sorted(p.name for p in (run_dir / "gallery").glob("*_score*"))
    assert len(gifs) == 2 and gifs[0].startswith("bottom_") and gifs[1].startswith("top_")


@pytest.mark.parametrize("replay", ["uniform", "per", "vlm", "vlm_td"])
def test_replay_sample_equals_torchrl_buffer_sample(replay):
    """Replay.sample (sample_tensordict) returns what buffer.sample() returns: the same draws, entries and info."""
    from tensordict import TensorDict

    from vlmrb_torchrl.envs import MINIGRID_EVENT_KEYS
    from vlmrb_torchrl.recipes.replay import Replay, make_replay
    from vlmrb_torchrl.scorers import make_scorer

    n, gen = 300, torch.Generator().manual_seed(0)
    batch = TensorDict({"observation": torch.randint(0, 984, (4, n // 4, 148), dtype=torch.int16, generator=gen),
                        "action": torch.randint(0, 5, (4, n // 4), generator=gen),
                        ("collector", "traj_ids"): torch.arange(4).repeat_interleave(n // 4).reshape(4, n // 4),
                        ("next", "reward"): torch.rand(4, n // 4, 1, generator=gen),
                        ("next", "done"): torch.zeros(4, n // 4, 1, dtype=torch.bool),
                        **{("next", key): torch.rand(4, n // 4, 1, generator=gen) < 0.1 for key in MINIGRID_EVENT_KEYS}},
                       [4, n // 4])
    cfg = apply_overrides(DQNConfig(), {**TINY, "replay": replay, "scorer": "oracle:minigrid", "async_scoring": False,
                                        "warmup": 0, "clip_len": 4})
    replays = [make_replay(cfg, generator=torch.Generator().manual_seed(1), updates=10,
                           scorer=make_scorer("oracle:minigrid") if replay.startswith("vlm") else None)
               for _ in range(2)]
    try:
        for r in replays:
            r.store(batch.exclude("collector") if not replay.startswith("vlm") else batch, batch)
        ours, theirs = replays
        for _ in range(5):
            a, b = ours.sample(), theirs.buffer.sample()
            assert a.batch_size == b.batch_size == (cfg.batch_size,) and a.device == b.device
            assert set(a.keys(True, True)) == set(b.keys(True, True))
            for key in b.keys(True, True):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
            for r, s in ((ours, a), (theirs, b)):  # the same priority updates keep them in step
                s.set("td_error", s["next", "reward"].clone())
                r.update_priority(s)
        assert "index" in a.keys() and ("priority_weight" in a.keys()) == (replay != "uniform")
    finally:
        for r in replays:
            r.close()
    assert type(replays[0]).sample is Replay.sample and Replay.sample.__code__.co_names.count("sample_tensordict")


@pytest.mark.slow
def test_a_run_directory_with_the_old_key_names_resumes(tmp_path, capsys):
    """A run whose ``config.json`` names keys by their old names (``vlm_eps``, ``default_priority``, ...: a run of
    an older version) resumes: its keys are read as the new ones, silently, and the run goes on."""
    out = tmp_path / "run"
    common = ["env=MiniGrid-DoorKey-5x5-v0", "replay=vlm", "scorer=oracle:minigrid", "total_frames=1024", "num_envs=2",
              "frames_per_batch=128", "learning_starts=256", "checkpoint_every=512", "eval_every=512",
              "eval_episodes=2", "eval_envs=1", "gallery_clips=0", "progress=false", "tensorboard=false"]
    assert cli_main(["train", "dqn", *common, "stop_at=512", f"output_dir={out}"]) == 0
    config = json.loads((out / "config.json").read_text())
    for new, old in (("eps", "vlm_eps"), ("warmup", "vlm_warmup"), ("beta", "vlm_beta"), ("spread", "vlm_spread"),
                     ("unscored_priority", "default_priority")):
        config[old] = config.pop(new)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    capsys.readouterr()
    assert cli_main(["train", "dqn", f"resume={out}"]) == 0
    assert "is now called" not in capsys.readouterr().err
    with open(out / "metrics.csv", newline="") as f:
        assert int(list(csv.DictReader(f))[-1]["env_steps"]) == 1024


@pytest.mark.slow  # trains (a few hundred frames) through the CLI
def test_a_function_that_reads_an_undeclared_entry_stops_the_run_with_one_line(tmp_path, monkeypatch, capsys):
    """issue 63: a python: function sees only its in_keys (default: the frames); reading ("next", "reward")
    without declaring it ends the command with one line naming the entry and the fix, not a traceback; declared
    as JSON lists, the same function runs."""
    from vlmrb_torchrl.cli import main as cli_main

    (tmp_path / "reward_fn.py").write_text(
        "def rewarded(clips):\n"
        "    reward = clips['next', 'reward'].reshape(clips.shape).clamp(min=0)\n"
        "    return ((reward * clips['mask']) > 0).any(dim=1).float()\n")
    monkeypatch.chdir(tmp_path)
    args = ["train", "dqn", "scorer=python:reward_fn:rewarded", "total_frames=512", "num_envs=2",
            "frames_per_batch=64", "learning_starts=128", "eval_every=512", "eval_episodes=2",
            "checkpoint_every=512", "buffer_size=2000", "clip_len=4", "batch_size=16", "hidden=32",
            "progress=false", "tensorboard=false", "gallery_clips=0", "async_scoring=false"]
    assert cli_main([*args, f"output_dir={tmp_path / 'bad'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("vlmrb train dqn: scorer='python:reward_fn:rewarded': CallableScorer(rewarded) read an "
                              "entry its clips do not carry")
    assert not any(line.startswith("Traceback") for line in err)
    declared = '{"in_keys": [["next", "reward"], "mask"]}'
    assert cli_main([*args, f"scorer_kwargs={declared}", f"output_dir={tmp_path / 'good'}"]) == 0


def test_every_summary_key_is_documented():
    """issue 63: summary.json's keys (results, and the loop's bookkeeping apart) are listed in docs/recipes.md."""
    from vlmrb_torchrl.recipes.checkpoint import resume_counters
    from vlmrb_torchrl.recipes.loop import EpisodeTracker
    from vlmrb_torchrl.recipes.run import BOOKKEEPING_KEYS, METRIC_COLUMNS, SAC_METRIC_COLUMNS

    page = (Path(__file__).resolve().parents[1] / "docs" / "recipes.md").read_text()
    section = page.split("### `summary.json`", 1)[1].split("\n## ", 1)[0]
    counters = resume_counters(DQNConfig(), None, modules={}, rb=None)
    keys = {*counters, *BOOKKEEPING_KEYS, *EpisodeTracker.COUNTERS, *METRIC_COLUMNS, *SAC_METRIC_COLUMNS,
            "run_dir", "gallery", "drawn", "drawn_positive", "q_ceiling_exceeded_at"}
    missing = sorted(k for k in keys if f"`{k}`" not in section and not (k.startswith(("eval_", "scorer_"))
                                                                           and k not in counters))
    assert not missing, missing
