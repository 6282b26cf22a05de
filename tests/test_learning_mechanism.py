"""benchmarks/learning/mechanism.py (issue 59): the trend and rank statistics against brute force, and the
report on synthetic runs with known answers."""

from __future__ import annotations

import csv
import importlib.util
import itertools
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("learning_mechanism", ROOT / "benchmarks" / "learning" / "mechanism.py")
mechanism = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = mechanism
_spec.loader.exec_module(mechanism)


def _jt(groups):
    return sum(float(b > a) + 0.5 * float(b == a) for i, gi in enumerate(groups) for gj in groups[i + 1:]
               for a in gi for b in gj)


@pytest.mark.parametrize("sizes", [[2, 2, 3], [1, 3, 2], [3, 3], [2, 1, 1, 2]])
def test_the_jt_null_distribution_is_the_count_over_every_grouping(sizes):
    values = list(range(sum(sizes)))
    counts = Counter()
    for perm in set(itertools.permutations([k for k, n in enumerate(sizes) for _ in range(n)])):
        groups = [[v for v, label in zip(values, perm) if label == k] for k in range(len(sizes))]
        counts[int(_jt(groups))] += 1
    assert mechanism.jt_null_counts(sizes) == [counts[t] for t in range(max(counts) + 1)]


def test_the_jt_p_value_matches_enumeration_and_the_tied_case_its_permutation_estimate():
    groups = [[0.1, 0.3], [0.2, 0.5, 0.4], [0.6, 0.45]]
    observed, p = mechanism.jonckheere(groups)
    pooled = [v for g in groups for v in g]
    sizes = [len(g) for g in groups]
    stats = []
    for perm in set(itertools.permutations([k for k, n in enumerate(sizes) for _ in range(n)])):
        stats.append(_jt([[v for v, label in zip(pooled, perm) if label == k] for k in range(len(sizes))]))
    assert observed == _jt(groups)
    assert p == pytest.approx(np.mean(np.array(stats) >= observed - 1e-9))
    tied = [[0.1, 0.3], [0.3, 0.5, 0.4], [0.6, 0.3]]  # ties: the seeded permutation test
    observed, p = mechanism.jonckheere(tied, draws=100_000)
    stats = []
    pooled = [v for g in tied for v in g]
    for perm in set(itertools.permutations([k for k, n in enumerate(sizes) for _ in range(n)])):
        stats.append(_jt([[v for v, label in zip(pooled, perm) if label == k] for k in range(len(sizes))]))
    assert p == pytest.approx(np.mean(np.array(stats) >= observed - 1e-9), abs=0.01)  # ~4 standard errors


def test_spearman_is_pearson_on_ranks_with_an_exact_one_sided_p():
    x, y = [3.0, 1.0, 4.0, 1.5, 9.0], [2.0, 7.0, 1.0, 8.0, 0.5]
    rho, p = mechanism.spearman(x, y)
    rx, ry = mechanism._midranks(np.array(x)), mechanism._midranks(np.array(y))
    assert rho == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    all_rho = [np.corrcoef(rx, np.array(perm))[0, 1] for perm in itertools.permutations(ry)]
    assert p == pytest.approx(np.mean(np.array(all_rho) <= rho + 1e-12))


def _write(root: Path, arm: str, seed: int, success: list[float], *, oversampling: float | None = None):
    run_dir = root / "doorkey12" / arm / f"seed{seed}"
    run_dir.mkdir(parents=True)
    steps = [50_000 * (i + 1) for i in range(20)]
    with open(run_dir / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["env_steps", "episodes", "eval_success", "max_oversampling_ratio", "positive_fraction",
                    "train_episode_len", "train_success", "time_s"])
        for i, s in enumerate(steps):
            w.writerow([s, 10 * (i + 1), success[i], "" if oversampling is None else oversampling,
                        "" if oversampling is None else 0.01, 100.0, 0.5, 1.0])


def test_the_report_orders_the_dose_and_reads_each_seed(tmp_path):
    ramp = lambda start: [min(1.0, max(0.0, (i - start) / 4)) for i in range(20)]  # noqa: E731
    for seed in range(3):
        _write(tmp_path, "uniform", seed, ramp(4 + seed * 0.1))
        _write(tmp_path, "vlm_goal_cap4", seed, ramp(5 + seed * 0.1), oversampling=4.0)
        _write(tmp_path, "vlm_goal", seed, ramp(8 + seed * 0.1), oversampling=10.0 + seed)
    study = mechanism.load_study(tmp_path, "doorkey12")
    text, rows = mechanism.report(study)
    assert rows["uniform"][0]["t50"] == 350_000  # success 0.5 at row 6 (i = 6: (6 - 4) / 4)
    assert rows["vlm_goal"][2]["oversampling"] == pytest.approx(12.0)
    assert rows["uniform"][0]["asr"] > rows["vlm_goal_cap4"][0]["asr"] > rows["vlm_goal"][0]["asr"]
    # a perfect decreasing trend over 3 x 3 seeds: the smallest exact p, 1 / (9! / 3!^3)
    assert f"one-sided p = {6 ** 3 / math.factorial(9):.4f}" in text
    assert "| vlm_goal_cap4 | vlm_goal | 3 / 3 |" in text
    assert "over 6 seeds" in text  # the correlation reads the goal-label arms' 6 seeds


def test_the_correlation_leaves_out_episode_credit(tmp_path):
    """vlm_goal_spread was chosen after prediction b': its seeds are compared, not correlated."""
    ramp = lambda start: [min(1.0, max(0.0, (i - start) / 4)) for i in range(20)]  # noqa: E731
    for seed in range(3):
        _write(tmp_path, "uniform", seed, ramp(4 + seed * 0.1))
        _write(tmp_path, "vlm_goal", seed, ramp(8 + seed * 0.1), oversampling=10.0 + seed)
        _write(tmp_path, "vlm_goal_cap8", seed, ramp(6 + seed * 0.1), oversampling=8.0)
        _write(tmp_path, "vlm_goal_spread", seed, ramp(3 + seed * 0.1), oversampling=20.0)
    text, _ = mechanism.report(mechanism.load_study(tmp_path, "doorkey12"))
    assert "over 6 seeds" in text
    assert "| vlm_goal_spread | uniform | 3 / 3 |" in text and "| vlm_goal_spread | vlm_goal | 3 / 3 |" in text
