"""Tests for benchmarks/learning/analyze.py on synthetic metric logs with known answers."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "learning" / "analyze.py"

# The script is not part of the package: load it from its path.
_spec = importlib.util.spec_from_file_location("learning_analyze", SCRIPT)
analyze = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = analyze  # dataclasses look their module up while building
_spec.loader.exec_module(analyze)

COLUMNS = [
    "env_steps", "episodes", "eval_success", "eval_return", "loss", "epsilon", "lambda",
    "fraction_scored", "positive_fraction", "sampled_positive_fraction", "stale_drops",
    "scorer_clips_per_s", "scorer_backlog", "scorer_dropped", "env_steps_per_s", "time_s",
]
STEPS = [10_000 * i for i in range(11)]  # 0, 10k, ..., 100k
T1 = 12.7062  # t_{0.975} with 1 degree of freedom


def write_run(root: Path, arm: str, seed: int, data: dict[str, list], *, study: str = "toy",
              columns: list[str] = COLUMNS, total_frames: int | None = 100_000) -> Path:
    """metrics.csv from per-column lists (missing columns or None cells stay empty)."""
    run_dir = root / study / arm / f"seed{seed}"
    run_dir.mkdir(parents=True)
    n = len(data["env_steps"])
    with open(run_dir / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for i in range(n):
            w.writerow(["" if data.get(c) is None or data[c][i] is None else data[c][i] for c in columns])
    if total_frames is not None:
        (run_dir / "config.json").write_text(json.dumps({"total_frames": total_frames, "seed": seed}))
    return run_dir


def minutes(n: int) -> list[float]:
    return [60.0 * i for i in range(n)]


@pytest.fixture
def study(tmp_path: Path) -> Path:
    # uniform: seed0 is a linear ramp (reaches 0.8 at 80k, AUC 0.5), seed1 jumps to 0.9 at
    # 40k, seed2 never reaches 0.8 (stays at 0.5).
    write_run(tmp_path, "uniform", 0, {"env_steps": STEPS, "eval_success": [s / 100_000 for s in STEPS],
                                       "time_s": minutes(11)})
    write_run(tmp_path, "uniform", 1, {"env_steps": STEPS, "eval_success": [0.0] * 4 + [0.9] * 7,
                                       "time_s": minutes(11)})
    write_run(tmp_path, "uniform", 2, {"env_steps": STEPS, "eval_success": [0.5] * 11,
                                       "time_s": minutes(11)})
    # vlm_oracle: reaches 0.8 at 30k and 50k; final success 1 and 0. seed0 is resumed once
    # (time_s restarts after 300 s): 300 + 270 s. Positive shares differ between halves in
    # seed1 so that only the second half (steps > 50k) counts.
    write_run(tmp_path, "vlm_oracle", 0, {
        "env_steps": STEPS,
        "eval_success": [0.0, 0.2, 0.5, 0.8] + [1.0] * 7,
        "positive_fraction": [None] + [0.2] * 10,
        "sampled_positive_fraction": [None] + [0.5] * 10,
        "time_s": [0, 60, 120, 180, 240, 300, 30, 90, 150, 210, 270],
    })
    write_run(tmp_path, "vlm_oracle", 1, {
        "env_steps": STEPS,
        "eval_success": [0.0, 0.0, 0.0, 0.0, 0.5, 0.8, 0.9, 0.9, 0.9, 0.9, 0.0],
        "positive_fraction": [0.1] * 6 + [0.4] * 5,
        "sampled_positive_fraction": [0.1] * 6 + [0.7] * 5,
        "time_s": minutes(11),
    })
    # vlm_old: an older log without the sampled_positive_fraction column; seed1 is unfinished.
    old = [c for c in COLUMNS if c != "sampled_positive_fraction"]
    write_run(tmp_path, "vlm_old", 0, {"env_steps": STEPS, "eval_success": [0.1 * i for i in range(11)],
                                       "positive_fraction": [0.3] * 11, "time_s": minutes(11)},
              columns=old)
    write_run(tmp_path, "vlm_old", 1, {"env_steps": STEPS[:6], "eval_success": [0.9] * 6,
                                       "positive_fraction": [0.3] * 6, "time_s": minutes(6)},
              columns=old)
    return tmp_path


def test_load_study(study: Path) -> None:
    runs = analyze.load_study(study, "toy")
    assert list(runs) == ["uniform", "vlm_oracle", "vlm_old"]  # known arms first
    assert [r.seed for r in runs["uniform"]] == [0, 1, 2]
    assert runs["uniform"][0].total_frames == 100_000
    old = runs["vlm_old"][0]
    assert "sampled_positive_fraction" not in old.columns
    assert all(math.isnan(v) for v in old.col("sampled_positive_fraction"))


def test_frames_to_target_median_reach_and_censoring(study: Path) -> None:
    s = analyze.summarize(analyze.load_study(study, "toy"), study="toy", target=0.8)
    u = s.arms["uniform"]
    assert u.frames == {0: 80_000, 1: 40_000, 2: None}
    assert (u.reached, u.n_runs) == (2, 3)
    assert u.median_frames == 60_000
    # The seed that never reached counts at its last step: (80k + 40k + 100k) / 3.
    assert u.censored and u.censored_mean_frames == pytest.approx(220_000 / 3)
    v = s.arms["vlm_oracle"]
    assert v.frames == {0: 30_000, 1: 50_000}
    assert v.median_frames == 40_000 and not v.censored and v.censored_mean_frames == 40_000
    # Target is configurable: at 0.5, the flat 0.5 seed reaches it at step 0.
    assert analyze.summarize(analyze.load_study(study, "toy"), target=0.5).arms["uniform"].frames[2] == 0


def test_peak_and_collapses(study: Path) -> None:
    s = analyze.summarize(analyze.load_study(study, "toy"))
    # vlm_oracle seed1 reached 0.8 at 50k and ended at 0.0: a collapse; seed0 ended at 1.0
    assert s.arms["vlm_oracle"].collapsed == 1 and s.arms["uniform"].collapsed == 0
    assert s.arms["vlm_oracle"].peak[0] == pytest.approx(0.95)
    assert s.arms["uniform"].peak[0] == pytest.approx((1.0 + 0.9 + 0.5) / 3)
    assert "| 1/2 |" in analyze.render_table(s)


def test_ratio_vs_baseline(study: Path) -> None:
    runs = analyze.load_study(study, "toy")
    s = analyze.summarize(runs, baseline="uniform")
    assert s.arms["uniform"].vs_baseline == 1.0
    assert s.arms["vlm_oracle"].vs_baseline == pytest.approx(40_000 / 60_000)
    # vlm_old: seed0 reaches 0.8 at 80k, seed1 (0.9 throughout) at 0.
    assert s.arms["vlm_old"].vs_baseline == pytest.approx(40_000 / 60_000)
    # Without the baseline arm, no ratios.
    assert math.isnan(analyze.summarize(runs, baseline="nope").arms["vlm_oracle"].vs_baseline)


def test_welch_p_matches_reference_values() -> None:
    # references: scipy.stats.ttest_ind(..., equal_var=False) and scipy.stats.beta.cdf
    assert analyze.welch_p([30, 20, 30, 35, 30], [20, 25, 25, 25, 25]) == pytest.approx(0.11412664, rel=1e-6)
    assert analyze.welch_p([30, 20, 30, 35, 30], [20] * 5) == pytest.approx(0.02131164, rel=1e-6)
    assert analyze.welch_p([1.0, 2.0, 3.5], [4.0, 6.0, 9.0, 7.5]) == pytest.approx(0.01906419, rel=1e-6)
    assert analyze.welch_p([1.0, 2.0], [2.0, 1.0]) == pytest.approx(1.0)
    assert math.isnan(analyze.welch_p([20, 20], [20, 20])) and math.isnan(analyze.welch_p([1.0], [1.0, 2.0]))
    assert analyze.betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248, rel=1e-12)
    assert analyze.betainc(30.0, 0.5, 1e-3) == pytest.approx(1.0262784370021795e-91, rel=1e-9)
    assert analyze.betainc(0.5, 40.0, 0.999) == pytest.approx(1.0)


def test_mean_ratio_and_p_vs_baseline(study: Path) -> None:
    s = analyze.summarize(analyze.load_study(study, "toy"))
    # censored frames: uniform 80k, 40k, 100k (not reached); vlm_oracle 30k, 50k; vlm_old 80k, 0
    assert s.arms["vlm_oracle"].vs_baseline_mean == pytest.approx(40_000 / (220_000 / 3))
    assert s.arms["vlm_oracle"].p_vs_baseline == pytest.approx(0.20202458, rel=1e-6)
    assert s.arms["vlm_old"].p_vs_baseline == pytest.approx(0.55320985, rel=1e-6)
    assert s.arms["uniform"].vs_baseline_mean == 1.0 and math.isnan(s.arms["uniform"].p_vs_baseline)
    # a baseline that meets the target at step 0 in every seed: no ratio (not a ZeroDivisionError)
    at_start = analyze.summarize(analyze.load_study(study, "toy"), target=0.0)
    assert math.isnan(at_start.arms["vlm_oracle"].vs_baseline_mean)


def test_auc(study: Path) -> None:
    runs = analyze.load_study(study, "toy")
    ramp = runs["uniform"][0]
    assert analyze.auc(ramp, 100_000) == pytest.approx(0.5)
    assert analyze.auc(ramp, 50_000) == pytest.approx(0.25)
    assert analyze.auc(ramp, 55_000) == pytest.approx(0.275)  # horizon between evaluations
    assert math.isnan(analyze.auc(runs["vlm_old"][1], 100_000))  # stopped at 50k
    # Default horizon: the shortest finished run (all finished ones end at 100k).
    s = analyze.summarize(runs)
    assert s.horizon == 100_000
    # uniform seed1: 0 up to 30k, a ramp to 0.9 by 40k, then 0.9: (0.45 * 10k + 0.9 * 60k) / 100k.
    mean, half, n = s.arms["uniform"].auc
    expected = [0.5, 0.585, 0.5]
    assert n == 3 and mean == pytest.approx(sum(expected) / 3)
    sd = math.sqrt(sum((x - mean) ** 2 for x in expected) / 2)
    assert half == pytest.approx(4.3027 * sd / math.sqrt(3))
    # The unfinished vlm_old seed is left out of the AUC, leaving one seed (no interval).
    mean, half, n = s.arms["vlm_old"].auc
    assert n == 1 and mean == pytest.approx(0.5) and math.isnan(half)
    # An explicit horizon includes the short run.
    assert analyze.summarize(runs, horizon=50_000).arms["vlm_old"].auc[2] == 2


def test_auc_without_step_zero(tmp_path: Path) -> None:
    # A constant curve whose first evaluation is at 10k averages to that constant.
    write_run(tmp_path, "uniform", 0, {"env_steps": STEPS[1:], "eval_success": [0.6] * 10})
    run = analyze.load_study(tmp_path, "toy")["uniform"][0]
    assert analyze.auc(run, 100_000) == pytest.approx(0.6)


def test_final_success_ci_and_finished(study: Path) -> None:
    s = analyze.summarize(analyze.load_study(study, "toy"))
    mean, half, n = s.arms["vlm_oracle"].final
    # Final successes 1 and 0: mean 0.5, sd/sqrt(2) = 0.5, so the half-width is t(1 df) / 2.
    assert (mean, n) == (0.5, 2) and half == pytest.approx(T1 * 0.5)
    assert s.arms["uniform"].final[:2] == pytest.approx((0.8, 4.3027 * math.sqrt(0.07) / math.sqrt(3)))
    old = s.arms["vlm_old"]
    assert (old.n_runs, old.n_finished) == (2, 1)
    assert old.final[0] == pytest.approx(1.0) and old.final[2] == 1
    # The success curve keeps the unfinished seed where it has data and reports n.
    c = old.success
    assert list(c.n) == [2] * 6 + [1] * 5
    assert c.mean[0] == pytest.approx(0.45)
    assert c.half[0] == pytest.approx(T1 * math.sqrt(0.405) / math.sqrt(2))


def test_finished_without_config(tmp_path: Path) -> None:
    # Without config.json a run is finished when it got as far as the study's longest run.
    write_run(tmp_path, "uniform", 0, {"env_steps": STEPS, "eval_success": [0.2] * 11}, total_frames=None)
    write_run(tmp_path, "uniform", 1, {"env_steps": STEPS[:5], "eval_success": [0.4] * 5}, total_frames=None)
    s = analyze.summarize(analyze.load_study(tmp_path, "toy"))
    assert s.arms["uniform"].n_finished == 1
    assert s.arms["uniform"].final[:1] == (0.2,)


def test_wall_clock_sums_chunks(study: Path) -> None:
    runs = analyze.load_study(study, "toy")
    assert runs["vlm_oracle"][0].wall_clock_s == 300 + 270
    s = analyze.summarize(runs)
    assert s.arms["vlm_oracle"].wall_clock_min == pytest.approx((9.5 + 10.0) / 2)
    assert s.arms["vlm_old"].wall_clock_min == pytest.approx(10.0)  # finished runs only
    assert analyze.wall_clock([float("nan"), 5, 7, 1, float("nan"), 3]) == 10


def test_resumed_chunk_replaces_repeated_steps(tmp_path: Path) -> None:
    # A chunk resumed from the 20k checkpoint logs 30k again: the later row wins, time adds up.
    write_run(tmp_path, "uniform", 0, {"env_steps": [0, 10_000, 20_000, 30_000, 30_000, 40_000],
                                       "eval_success": [0.0, 0.1, 0.2, 0.9, 0.3, 0.4],
                                       "time_s": [0, 10, 20, 30, 5, 15]})
    run = analyze.load_study(tmp_path, "toy")["uniform"][0]
    assert list(run.steps) == [0, 10_000, 20_000, 30_000, 40_000]
    assert list(run.col("eval_success")) == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert run.wall_clock_s == 45
    assert analyze.frames_to_target(run, 0.8) is None


def test_positive_fractions_and_missing_column(study: Path) -> None:
    s = analyze.summarize(analyze.load_study(study, "toy"))
    v = s.arms["vlm_oracle"]
    assert v.buffer_positive == pytest.approx(0.3)  # (0.2 + 0.4) / 2, second halves only
    assert v.sampled_positive == pytest.approx(0.6)  # (0.5 + 0.7) / 2
    assert v.oversampling == pytest.approx(2.0)
    old = s.arms["vlm_old"]
    assert old.buffer_positive == pytest.approx(0.3)
    assert math.isnan(old.sampled_positive) and math.isnan(old.oversampling)
    assert old.sampled_curve.steps.size == 0
    u = s.arms["uniform"]
    assert math.isnan(u.buffer_positive) and u.buffer_curve.steps.size == 0


def test_render_table(study: Path) -> None:
    s = analyze.summarize(analyze.load_study(study, "toy"), study="toy")
    table = analyze.render_table(s)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert "| arm | seeds | reach 80% | frames to 80% per seed | median frames to 80% |" in table
    assert rows["uniform"].startswith("| uniform | 3 | 2/3 | 80k, 40k, — | 60k | ≥ 73.3k | 1.00× | 1.00× | — |")
    assert rows["vlm_oracle"].startswith("| vlm_oracle | 2 | 2/2 | 30k, 50k | 40k | 40k | 0.67× | 0.55× | 0.20 |")
    assert "| 0.50 ± 6.35 | 0.66 | 1.00 | 0.95 ± 0.64 | 1/2 | 9.8 | 0.30 | 0.60 | 2.00× | — |" in rows["vlm_oracle"]
    # p (MW): the exact Mann-Whitney p of the censored frames (30k, 50k vs 80k, 40k, 100k): ranks {1, 3} of 5,
    # 4 of the 10 ways to pick two ranks are as far from the mean rank sum 6
    assert s.arms["vlm_oracle"].mw_vs_baseline == pytest.approx(0.4)
    assert rows["vlm_oracle"].startswith("| vlm_oracle | 2 | 2/2 | 30k, 50k | 40k | 40k | 0.67× | 0.55× | 0.20 | 0.40 |")
    # p AUC / p final: Welch's test of the per-seed values against the baseline's
    runs = analyze.load_study(study, "toy")
    aucs = {arm: [analyze.auc(r, s.horizon) for r in runs[arm]] for arm in ("uniform", "vlm_oracle")}
    assert s.arms["vlm_oracle"].p_auc_vs_baseline == analyze.welch_p(aucs["vlm_oracle"], aucs["uniform"])
    assert f"| {s.arms['vlm_oracle'].p_auc_vs_baseline:.2f} | 1.00 | 0.50 ± 6.35 |" in rows["vlm_oracle"]
    assert rows["vlm_old"].startswith("| vlm_old | 2 (1 done) | 2/2 |")
    assert rows["vlm_old"].endswith("| 0.30 | — | — | — |")
    # arms selects and orders the rows.
    sub = analyze.render_table(s, ["vlm_oracle", "uniform"])
    assert [line.split(" | ")[0] for line in sub.splitlines()[2:4]] == ["| vlm_oracle", "| uniform"]


def test_fmt() -> None:
    assert analyze.fmt_frames(212_345) == "212k"
    assert analyze.fmt_frames(float("nan")) == "—"
    assert analyze.fmt_ci((0.8312, 0.0712, 5)) == "0.83 ± 0.07"
    assert analyze.fmt_ci((0.8312, float("nan"), 1)) == "0.83"
    assert [analyze._fmt_share(x) for x in (0.6, 0.0043, 0.0, float("nan"))] == ["0.60", "0.004", "0.00", "—"]


def test_plots_and_cli(study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert analyze.main(["--study", "toy", "--results", str(study), "--out", str(out)]) == 0
    for name in ["success.png", "replay.png", "table.md"]:
        assert (out / name).stat().st_size > 0
    assert "| uniform | 3 | 2/3 |" in capsys.readouterr().out
    # A named subset (an ablation) gets its own files; no VLM arm selected, no replay plot.
    assert analyze.main(["--study", "toy", "--results", str(study), "--out", str(out),
                         "--arms", "uniform", "--name", "ablation"]) == 0
    assert (out / "success_ablation.png").stat().st_size > 0
    lines = (out / "table_ablation.md").read_text().splitlines()
    assert [line.split(" | ")[0] for line in lines if line.startswith("| ")] == ["| arm", "| uniform"]
    assert not (out / "replay_ablation.png").exists()
    assert analyze.main(["--study", "toy", "--results", str(study), "--out", str(out),
                         "--arms", "nope"]) == 1


def test_script_runs_from_command_line(study: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--study", "toy", "--results", str(study), "--out", str(out),
         "--target", "0.9", "--horizon", "50000"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "reach 90%" in proc.stdout and "up to 50k frames" in proc.stdout
    assert (out / "success.png").stat().st_size > 0


def test_metric_other_than_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Returns on no fixed scale: frames to a return, AUC and final/peak read eval_return.
    write_run(tmp_path, "uniform", 0, {"env_steps": STEPS, "eval_success": [0.0] * 11,
                                       "eval_return": [float(i) for i in range(11)]})
    write_run(tmp_path, "vlm_td_oracle", 0, {"env_steps": STEPS, "eval_success": [0.0] * 11,
                                             "eval_return": [2.0 * i for i in range(11)]})
    s = analyze.summarize(analyze.load_study(tmp_path, "toy"), study="toy", target=8.0, metric="eval_return")
    assert s.arms["uniform"].frames == {0: 80_000} and s.arms["vlm_td_oracle"].frames == {0: 40_000}
    assert s.arms["vlm_td_oracle"].vs_baseline == pytest.approx(0.5)
    assert s.arms["uniform"].auc[0] == pytest.approx(5.0) and s.arms["vlm_td_oracle"].final[0] == 20.0
    assert s.arms["vlm_td_oracle"].peak[0] == 20.0
    table = analyze.render_table(s)
    assert "| reach 8 | frames to 8 per seed |" in table and "| final return | p final | p final (MW) | peak return |" in table
    assert "time-averaged return" in table
    out = tmp_path / "out"
    assert analyze.main(["--study", "toy", "--results", str(tmp_path), "--out", str(out),
                         "--metric", "eval_return", "--target", "8"]) == 0
    assert (out / "return.png").stat().st_size > 0 and not (out / "success.png").exists()
    assert "| final return |" in (out / "table_return.md").read_text() and not (out / "table.md").exists()
    assert analyze.main(["--study", "toy", "--results", str(tmp_path), "--metric", "eval_retrun"]) == 1
    assert "no run logged a column 'eval_retrun'" in capsys.readouterr().err
