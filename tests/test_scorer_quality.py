"""benchmarks/scorer_quality.py: the metrics against hand-computed values, the oracle's perfect
score, imperfect scorers below it, reproducibility, and clear errors for bad arguments."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "scorer_quality.py"
_spec = importlib.util.spec_from_file_location("scorer_quality", _PATH)
sq = importlib.util.module_from_spec(_spec)
sys.modules["scorer_quality"] = sq
_spec.loader.exec_module(sq)

DOORKEY5 = "MiniGrid-DoorKey-5x5-v0"
# two short episodes: a scripted one (events) and a random one (mostly no event)
SHORT = ["--episodes", "2", "--policy", "mixed", "--max-steps", "40", "--clip-len", "8", "--quiet"]


def _pairwise_auroc(scores, labels) -> float:
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


# ----------------------------------------------------------------------------- metrics
def test_average_ranks_share_ties():
    assert sq.average_ranks(np.array([3.0, 1.0, 3.0, 3.0, 0.0])).tolist() == [4.0, 2.0, 4.0, 4.0, 1.0]


def test_auroc_hand_computed_with_and_without_ties():
    assert sq.auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    # positive 0.5 vs negatives 0.2 (win) and 0.5 (tie: 1/2); positive 0.9 wins both -> 3.5 / 4
    assert sq.auroc([0.2, 0.5, 0.5, 0.9], [0, 1, 0, 1]) == 0.875
    assert sq.auroc([0.7, 0.7, 0.7, 0.7], [0, 1, 0, 1]) == 0.5  # a constant scorer
    assert sq.auroc([0.9, 0.1], [0, 1]) == 0.0
    assert sq.auroc(np.array([1.0, 1.0, 0.0]), np.array([True, True, False])) == 1.0


def test_auroc_matches_pairwise_count_on_tied_scores():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, size=60) / 4  # many ties
    labels = rng.random(60) < 0.3
    assert sq.auroc(scores, labels) == pytest.approx(_pairwise_auroc(scores, labels), abs=1e-12)


def test_auroc_of_one_class_is_nan():
    assert math.isnan(sq.auroc([0.2, 0.9], [1, 1]))
    assert math.isnan(sq.auroc([0.2, 0.9], [0, 0]))
    with pytest.raises(ValueError, match="one label per score"):
        sq.auroc([0.1, 0.2], [1])


def test_binary_metrics_hand_computed():
    m = sq.binary_metrics([0.9, 0.8, 0.2, 0.6, 0.1, 0.5], [1, 1, 1, 0, 0, 1])
    # score > 0.5 is positive: 0.5 itself is not
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (2, 1, 2, 1)
    assert (m["positives"], m["negatives"], m["clips"]) == (4, 2, 6)
    assert m["precision"] == pytest.approx(2 / 3)
    assert m["recall"] == pytest.approx(2 / 4)
    assert m["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 2))
    assert m["auroc"] == pytest.approx(_pairwise_auroc([0.9, 0.8, 0.2, 0.6, 0.1, 0.5], [1, 1, 1, 0, 0, 1]))
    assert m["f1_all_positive"] == pytest.approx(2 * 4 / (2 * 4 + 2))  # every clip called positive
    lower = sq.binary_metrics([0.9, 0.8, 0.2, 0.6, 0.1, 0.5], [1, 1, 1, 0, 0, 1], threshold=0.15)
    assert (lower["tp"], lower["fp"]) == (4, 1)


def test_binary_metrics_undefined_ratios_are_nan():
    none_predicted = sq.binary_metrics([0.1, 0.2, 0.3], [1, 0, 0])
    assert math.isnan(none_predicted["precision"]) and none_predicted["recall"] == 0.0
    assert none_predicted["f1"] == 0.0
    no_positives = sq.binary_metrics([0.9, 0.2], [0, 0])
    assert math.isnan(no_positives["recall"]) and math.isnan(no_positives["auroc"])
    assert no_positives["precision"] == 0.0
    nothing = sq.binary_metrics([0.1, 0.2], [0, 0])
    assert math.isnan(nothing["f1"]) and math.isnan(nothing["precision"])
    assert nothing["f1_all_positive"] == 0.0  # no positive to find
    assert math.isnan(sq.binary_metrics([], [])["f1_all_positive"])


def test_quality_report_per_type_rows_drop_clips_of_other_events():
    scores = np.array([1.0, 1.0, 0.0, 0.0, 1.0])
    progress = np.array([1, 1, 0, 0, 0], dtype=bool)
    key = np.array([1, 0, 0, 0, 0], dtype=bool)
    door = np.array([0, 1, 0, 0, 0], dtype=bool)
    none = np.zeros(5, dtype=bool)
    report = sq.quality_report(scores, {sq.PROGRESS: progress, "key_picked_up": key, "door_opened": door,
                                        "goal_reached": none, "success": none}, 0.5)
    assert report[sq.PROGRESS]["clips"] == 5 and report[sq.PROGRESS]["fp"] == 1
    # the door clip is neither a positive nor a negative of the key row
    assert report["key_picked_up"]["clips"] == 4 and report["key_picked_up"]["tp"] == 1
    assert report["key_picked_up"]["precision"] == 0.5
    assert report["key_picked_up"]["auroc"] == pytest.approx(2.5 / 3)  # vs negatives 0, 0, 1: 2 wins, 1 tie
    goal = report["goal_reached"]
    assert goal["positives"] == 0 and goal["negatives"] == 3
    assert all(math.isnan(goal[k]) for k in ("precision", "recall", "f1", "auroc", "f1_all_positive"))


def test_docstring_examples():
    # benchmarks/ is outside pytest's doctest paths: run the script's examples here
    import doctest

    failures, tried = doctest.testmod(sq, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried >= 4 and failures == 0


# ----------------------------------------------------------------------------- the script
needs_minigrid = pytest.mark.skipif(importlib.util.find_spec("minigrid") is None,
                                    reason="needs minigrid: pip install 'vlmrb-torchrl[minigrid]'")


@needs_minigrid
def test_oracle_scores_itself_perfectly_and_writes_json(tmp_path, capsys):
    out = tmp_path / "q.json"
    results = sq.main(["--scorer", "oracle:minigrid", "--env", DOORKEY5, *SHORT, "--json", str(out)])
    overall = results["metrics"][sq.PROGRESS]
    assert overall["positives"] > 0 and overall["negatives"] > 0
    assert overall["f1"] == 1.0 and overall["auroc"] == 1.0
    for name in ("key_picked_up", "door_opened", "goal_reached"):
        assert results["metrics"][name]["positives"] > 0
        assert results["metrics"][name]["f1"] == 1.0
    counts = results["counts"]
    assert counts["clips"] == counts["steps"]  # stride 1: one clip per step
    assert counts["positive_clips"][sq.PROGRESS] == overall["positives"]
    assert set(results["by_policy"]) == {"random", "scripted"}
    assert results["config"]["rendered"] is False  # the oracle reads flags, not frames
    assert capsys.readouterr().out == ""  # --quiet
    saved = json.loads(out.read_text())
    assert saved["metrics"][sq.PROGRESS]["f1"] == 1.0
    assert saved["provenance"]["backend"] == "oracle"


@needs_minigrid
def test_scores_file_holds_each_clip_and_reproduces_the_metrics(tmp_path):
    out = tmp_path / "clips.npz"
    args = ["--scorer", "oracle:minigrid", "--label-noise", "0.2", "--env", DOORKEY5, *SHORT]
    results = sq.main([*args, "--scores", str(out)])
    saved = np.load(out)
    n = results["counts"]["clips"]
    assert saved["scores"].shape == (n,) and saved["episode"].shape == (n,) and saved["policy"].shape == (n,)
    assert set(saved["episode"].tolist()) == {0, 1} and set(saved["policy"].tolist()) == {"scripted", "random"}
    assert float(saved["threshold"]) == results["config"]["threshold"]
    assert int(saved[f"label_{sq.PROGRESS}"].sum()) == results["counts"]["positive_clips"][sq.PROGRESS]
    again = sq.binary_metrics(saved["scores"], saved[f"label_{sq.PROGRESS}"], float(saved["threshold"]))
    assert all(again[k] == results["metrics"][sq.PROGRESS][k] for k in ("tp", "fp", "fn", "tn", "auroc"))
    # the per-policy reports are the same clips split by the saved policy column
    random = saved["policy"] == "random"
    by_random = sq.binary_metrics(saved["scores"][random], saved[f"label_{sq.PROGRESS}"][random], 0.5)
    assert by_random["tp"] == results["by_policy"]["random"][sq.PROGRESS]["tp"]


def test_scores_file_needs_one_run(capsys):
    with pytest.raises(SystemExit):
        sq.main(["--scorer", "oracle:minigrid", "--env", f"{DOORKEY5},MiniGrid-DoorKey-6x6-v0", "--episodes", "1",
                 "--scores", "x.npz"])
    assert "--scores" in capsys.readouterr().err


def test_best_threshold_picks_the_highest_f1_lowest_on_ties():
    scores, labels = [0.9, 0.8, 0.6, 0.3, 0.1], [1, 1, 0, 1, 0]
    t, f1 = sq.best_threshold(scores, labels, thresholds=[0.7, 0.2, 0.5])
    assert (t, f1) == (0.2, pytest.approx(6 / 7))
    # 0.35 and 0.5 both predict 0.9, 0.8 and 0.6 (F1 0.8): the lower one wins, in whatever order given
    assert sq.best_threshold([0.9, 0.8, 0.6, 0.1], [1, 1, 0, 0], thresholds=[0.5, 0.35]) == (0.35, 0.8)
    # the default grid 0.05 ... 0.95: 0.6 is the first to leave the 0.6 clip out
    assert sq.best_threshold([0.9, 0.8, 0.6, 0.1], [1, 1, 0, 0]) == (0.6, 1.0)
    with pytest.raises(ValueError, match="at least one"):
        sq.best_threshold(scores, labels, thresholds=[])


@needs_minigrid
def test_table_printed(capsys):
    sq.main(["--scorer", "oracle:minigrid", "--env", DOORKEY5, *SHORT[:-1]])
    out = capsys.readouterr().out
    assert "| all progress |" in out and "| key picked up |" in out and "clips/s" in out


@needs_minigrid
def test_noisy_oracle_is_imperfect_and_reproducible():
    args = ["--scorer", "oracle:minigrid", "--label-noise", "0.2", "--env", DOORKEY5, *SHORT]
    first = sq.main(args)
    assert first["metrics"][sq.PROGRESS]["f1"] < 1.0
    assert first["metrics"][sq.PROGRESS]["auroc"] < 1.0
    assert first["provenance"]["backend"] == "noisy"
    again = sq.main(args)
    assert again["metrics"] == first["metrics"] and again["counts"] == first["counts"]
    other = sq.main([*args, "--seed", "2000"])
    assert other["counts"] != first["counts"]


@needs_minigrid
@pytest.mark.parametrize("clip_len, frames", [(5, 3), (8, 1), (16, 4)])
def test_oracle_with_subsampled_frames_still_scores_itself_perfectly(clip_len, frames):
    # --frames keeps every real step's event, also on padded tail clips where a kept position
    # falls on padding (the goal is an episode's last step: it was lost there)
    results = sq.main(["--scorer", "oracle:minigrid", "--env", DOORKEY5, "--episodes", "2", "--policy", "mixed",
                       "--max-steps", "40", "--clip-len", str(clip_len), "--frames", str(frames), "--quiet"])
    overall = results["metrics"][sq.PROGRESS]
    assert overall["positives"] > 0 and overall["negatives"] > 0
    assert overall["f1"] == 1.0 and overall["auroc"] == 1.0
    assert results["metrics"]["goal_reached"]["positives"] > 0 and results["metrics"]["goal_reached"]["f1"] == 1.0


def brightness(clips):
    # mean brightness of the last real frame: a pixel scorer that knows nothing about events
    frames = clips["pixels"].float()
    last = clips["mask"].long().sum(1).clamp(min=1) - 1
    return frames[torch.arange(frames.shape[0]), last].mean((1, 2, 3)) / 255


@needs_minigrid
def test_pixel_scorer_renders_frames_and_is_imperfect():
    results = sq.main(["--scorer", f"python:{brightness.__module__}:brightness", "--env", DOORKEY5, *SHORT,
                       "--threshold", "0.2", "--frames", "4"])
    assert results["config"]["rendered"] is True
    assert results["metrics"][sq.PROGRESS]["f1"] < 1.0
    assert results["throughput"]["clips_per_second"] > 0


@needs_minigrid
@pytest.mark.parametrize("env_id", ["MiniGrid-Empty-5x5-v0", "MiniGrid-KeyCorridorS3R1-v0", "MiniGrid-Unlock-v0",
                                    "MiniGrid-RedBlueDoors-6x6-v0"])
def test_other_minigrid_envs(env_id):
    policy = "scripted" if "Empty" in env_id else "subgoal"
    results = sq.main(["--scorer", "oracle:minigrid", "--env", env_id, "--episodes", "2", "--policy", policy,
                       "--max-steps", "40", "--clip-len", "8", "--quiet"])
    overall = results["metrics"][sq.PROGRESS]
    assert overall["clips"] == results["counts"]["steps"] > 0
    assert overall["positives"] > 0 and overall["f1"] == 1.0
    if "Empty" in env_id:  # no key and no door there: those rows are undefined
        assert results["metrics"]["goal_reached"]["positives"] > 0
        assert results["metrics"]["key_picked_up"]["positives"] == 0
        assert math.isnan(results["metrics"]["key_picked_up"]["f1"])


@needs_minigrid
def test_mission_checks_leave_out_implied_doors_in_a_single_room():
    """As the DQN recipe does: an env whose first resets show no door scores its missions without the door
    checks they only imply; an env with doors keeps them; --scorer-kwargs doors overrides."""
    pytest.importorskip("transformers")
    args = ["--scorer", "builtin:minigrid_agent", "--episodes", "1", "--policy", "random", "--max-steps", "8",
            "--quiet"]
    room = sq.main([*args, "--env", "BabyAI-GoToObjS6-v1"])
    assert room["config"]["doors"] is False
    assert all("door" not in prompt for prompt in room["tasks"].values())
    doors = sq.main([*args, "--env", "BabyAI-GoToSeqS5R2-v0"])
    assert doors["config"]["doors"] is True
    told = sq.main([*args, "--env", "BabyAI-GoToObjS6-v1", "--scorer-kwargs", '{"doors": true}'])
    assert told["config"]["doors"] is True and any("door" in prompt for prompt in told["tasks"].values())
    assert sq.main(["--scorer", "oracle:minigrid", "--env", DOORKEY5, *SHORT])["config"]["doors"] is None


@needs_minigrid
def test_by_check_counts_each_clip_above_the_threshold_by_its_deciding_check(capsys):
    """--by-check: every clip above the threshold is counted once, under the check of the prompt set that gave it
    its score; the metrics are the plain run's; a scorer without a prompt set, or with noise, is refused."""
    pytest.importorskip("transformers")
    from vlmrb_torchrl.scorers.builtin import MINIGRID_PROMPT_SET

    args = ["--scorer", "builtin:minigrid", "--env", DOORKEY5, "--episodes", "2", "--policy", "mixed",
            "--max-steps", "40", "--clip-len", "8", "--threshold", "0.3"]
    results = sq.main([*args, "--by-check"])
    assert "| deciding check | false positives | true positives |" in capsys.readouterr().out
    m, rows = results["metrics"][sq.PROGRESS], results["by_check"]
    assert m["tp"] > 0
    assert sum(r["true_positives"] for r in rows) == m["tp"] and sum(r["false_positives"] for r in rows) == m["fp"]
    assert {r["check"] for r in rows} <= {f"{c.aggregation} {c.positive}" for c in MINIGRID_PROMPT_SET}
    plain = sq.main([*args, "--quiet"])["metrics"][sq.PROGRESS]
    assert (plain["tp"], plain["fp"], plain["fn"]) == (m["tp"], m["fp"], m["fn"]) and "by_check" not in plain
    assert "--by-check needs a scorer with a prompt set" in _error(
        capsys, ["--scorer", "oracle:minigrid", "--env", DOORKEY5, *SHORT, "--by-check"])
    assert "drop --label-noise" in _error(capsys, [*args, "--by-check", "--label-noise", "0.1"])


@needs_minigrid
def test_mission_policy_and_several_envs(capsys):
    """The mission policy on tasks of the family, several envs in one run: one summary row per env (and
    per policy of a mixed run); the oracle scores itself perfectly on the mission's sub-goals."""
    results = sq.main(["--scorer", "oracle:minigrid", "--env", "BabyAI-PutNextLocal-v0,BabyAI-GoToLocalS6N2-v0",
                       "--episodes", "2", "--policy", "mixed-mission", "--max-steps", "60", "--clip-len", "8"])
    out = capsys.readouterr().out
    assert "| env | held out | policy |" in out and "| BabyAI-PutNextLocal-v0 |  | mixed-mission |" in out
    rows = results["summary"]
    assert [(r["env"], r["policy"]) for r in rows] == [
        ("BabyAI-PutNextLocal-v0", "mixed-mission"), ("BabyAI-PutNextLocal-v0", "mission"),
        ("BabyAI-PutNextLocal-v0", "random"), ("BabyAI-GoToLocalS6N2-v0", "mixed-mission"),
        ("BabyAI-GoToLocalS6N2-v0", "mission"), ("BabyAI-GoToLocalS6N2-v0", "random")]
    for run in results["runs"]:
        overall = run["metrics"][sq.PROGRESS]
        assert overall["positives"] > 0 and overall["f1"] == 1.0
        assert run["metrics"]["subgoal"]["positives"] > 0
        assert run["config"]["task"] is None  # the oracle is told nothing
    assert results["runs"][0]["counts"]["successes"] >= 1  # the mission episode puts the object in place
    assert set(sq.FAMILY_SETS) == {"family-train", "family-held-out", "family", "family-large"}
    assert not set(sq.FAMILY_SETS["family-train"]) & set(sq.FAMILY_SETS["family-held-out"])


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as info:
        sq.main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


@needs_minigrid
def test_bad_arguments_exit_with_a_clear_message(capsys):
    base = ["--scorer", "oracle:minigrid", "--episodes", "1"]
    assert "unknown MiniGrid or BabyAI env 'MiniGrid-NoSuchEnv-v0'" in _error(capsys, [*base, "--env", "MiniGrid-NoSuchEnv-v0"])
    assert "MiniGrid or BabyAI id" in _error(capsys, [*base, "--env", "CartPole-v1"])
    err = _error(capsys, [*base, "--env", "MiniGrid-UnlockPickup-v0", "--policy", "scripted"])
    assert "scripted policy" in err and "MiniGrid-UnlockPickup-v0" in err
    assert "--episodes must be >= 1" in _error(capsys, ["--scorer", "oracle:minigrid", "--env", DOORKEY5,
                                                        "--episodes", "0"])
    assert "--threshold" in _error(capsys, [*base, "--env", DOORKEY5, "--threshold", "1.5"])
    assert "--frames" in _error(capsys, [*base, "--env", DOORKEY5, "--clip-len", "4", "--frames", "8"])
    assert "--scorer 'nope:x'" in _error(capsys, ["--scorer", "nope:x", "--env", DOORKEY5, "--episodes", "1"])
    assert "--scorer-kwargs" in _error(capsys, [*base, "--env", DOORKEY5, "--scorer-kwargs", "[1]"])
    assert "invalid choice" in _error(capsys, [*base, "--env", DOORKEY5, "--policy", "greedy"])
    assert "no mission string" in _error(capsys, ["--scorer", "oracle:robosuite", "--env", "robosuite/Lift",
                                                  "--episodes", "1", "--task", "mission"])


needs_robosuite = pytest.mark.skipif(importlib.util.find_spec("robosuite") is None,
                                     reason="needs robosuite: pip install 'vlmrb-torchrl[robosuite]'")


@needs_robosuite
def test_robosuite_lift_oracle_scores_itself_perfectly():
    """Lift episodes as the SAC recipe runs them: the scripted LiftPolicy grasps (and the episode ends on
    success), random actions do not; per-type rows for the grasp and the success."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    args = ["--scorer", "oracle:robosuite", "--env", "robosuite/Lift", "--episodes", "2", "--policy", "mixed",
            "--max-steps", "60", "--quiet"]
    results = sq.main(args)
    overall = results["metrics"][sq.PROGRESS]
    assert overall["positives"] > 0 and overall["negatives"] > 0 and overall["f1"] == 1.0 and overall["auroc"] == 1.0
    assert results["metrics"]["grasping"]["positives"] > 0 and results["metrics"]["grasping"]["f1"] == 1.0
    assert results["by_policy"]["random"][sq.PROGRESS]["positives"] == 0  # uniform random actions never grasp
    assert results["config"]["rendered"] is False and results["config"]["actions"] == []
    assert sq.main(args)["metrics"] == results["metrics"]  # seeded: the same episodes
    with pytest.raises(SystemExit):
        sq.main([*args[:-3], "--policy", "subgoal"])
