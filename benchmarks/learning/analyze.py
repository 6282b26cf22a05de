"""Learning-efficiency analysis: success curves, frames to a target, AUC and replay statistics.

Reads the per-run metric logs of a learning study (DQN on MiniGrid DoorKey, one run per
replay "arm" and seed)::

    <results>/<study>/<arm>/seed<N>/metrics.csv   (one row per evaluation)
    <results>/<study>/<arm>/seed<N>/config.json   (optional; only ``total_frames`` is read)

and computes, per arm, over its seeds:

- the **success curve**: at each evaluated ``env_steps``, the mean ``eval_success`` over the
  seeds that have that step, with a 95% t-interval (mean ± t₀.₉₇₅,ₙ₋₁ · sd/√n) and n;
- **frames to target** (``--target``, 0.8 by default): per seed, the first ``env_steps`` with
  ``eval_success >= target``; the arm reports how many seeds reached it (k/n), the median over
  the seeds that did, and a censored mean that counts a seed that never reached it at its
  last ``env_steps`` (then a lower bound, written ``≥ …``);
- **AUC**: the trapezoid area under a seed's success curve from its first evaluation up to a
  common horizon, divided by that span, i.e. the time-averaged success in [0, 1]. The
  horizon is ``--horizon`` or the smallest last ``env_steps`` of the study's finished runs;
  runs that stop short of it are left out. With an evaluation at step 0 the span is the
  horizon itself; without one, every arm shares the same first evaluation so the
  normalisation does not favour any arm;
- **final success**: ``eval_success`` at the last evaluation of each finished run (last
  ``env_steps`` >= ``config.json``'s ``total_frames``, or, without a config, equal to the
  largest last ``env_steps`` in the study), mean ± 95% CI;
- **wall-clock** minutes per finished run. Runs may be resumed in chunks and ``time_s``
  restarts with each chunk, so a run's time is the sum, over chunks, of the last ``time_s``
  before each restart (a restart shows as a decrease);
- for VLM arms, the mean ``positive_fraction`` (share of scored buffer slots scored positive)
  and ``sampled_positive_fraction`` (share of sampled transitions that were positive) over
  the second half of each run, and their ratio, the over-sampling factor;
- ``--metric`` picks the evaluation column all of the above read (default ``eval_success``;
  e.g. ``eval_return`` with ``--target 20`` for a task no arm solves within the budget);
- for arms run with an over-sampling ceiling (``max_oversampling``), the mean effective mixture
  weight ``lambda_effective`` over the second half of each run;
- relative to a baseline arm (``--baseline``, ``uniform`` by default), the ratio of median
  frames to target (arm / baseline; below 1 is faster) and Welch's t-test p-values of the
  per-seed frames to target, AUC and final value against the baseline's.

Writes to ``--out`` (default ``studies/results/<study>/``) ``success.png`` (curves with shaded
95% bands), ``replay.png`` (buffer vs sampled positive share, VLM arms only) and ``table.md``
(also printed); another ``--metric`` names its curves and table after itself (``return.png``,
``table_return.md`` for ``eval_return``). ``--name X`` suffixes the files (``success_X.png``,
``replay_X.png``, ``table_X.md``) so a subset of arms (``--arms``, which also sets the order) can be plotted
separately, e.g. an ablation::

    python benchmarks/learning/analyze.py --study doorkey6
    python benchmarks/learning/analyze.py --study doorkey6 --arms uniform,vlm_oracle,vlm_oracle_lmax025 --name ablation

Needs only numpy and matplotlib (``pip install 'vlmrb-torchrl[bench]'``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

# Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30 (scipy is not a dependency).
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)

# Arms the study knows are listed in this order (baseline first, then by how much the VLM is
# trusted); any other arm (ablations) follows alphabetically.
KNOWN_ARMS = (
    "uniform", "per", "vlm_oracle", "vlm_noise10", "vlm_noise20", "vlm_noise30",
    "vlm_random", "vlm_td_oracle", "vlm_goal", "vlm_goal_cap4", "vlm_builtin_goal",
)

SUCCESS = "eval_success"
MATPLOTLIB_HINT = "matplotlib is needed for the plots: pip install 'vlmrb-torchrl[bench]'"

ROOT = Path(__file__).resolve().parents[2]


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (1.96 beyond 30).

    >>> t975(1), t975(4), t975(100)
    (12.7062, 2.7764, 1.96)
    """
    if df < 1:
        return math.nan
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_ci(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, 95% t-interval half-width, n) of the finite values; half-width is nan for n < 2.

    >>> mean, half, n = mean_ci([0.0, 1.0])  # sd/sqrt(n) = 0.5, t(1 df) = 12.7062
    >>> mean, round(half, 4), n
    (0.5, 6.3531, 2)
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = int(x.size)
    if n == 0:
        return math.nan, math.nan, 0
    if n == 1:
        return float(x[0]), math.nan, 1
    half = t975(n - 1) * float(np.std(x, ddof=1)) / math.sqrt(n)
    return float(x.mean()), half, n


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    # Lentz's method for the continued fraction of the incomplete beta function (Numerical Recipes 6.4)
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for aa in (m * (b - m) * x / ((qam + 2 * m) * (a + 2 * m)),
                   -(a + m) * (qab + m) * x / ((a + 2 * m) * (qap + 2 * m))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b).

    >>> round(betainc(2.0, 3.0, 0.4), 6)  # = 1 - (1-x)^4 - 4x(1-x)^3 for a=2, b=3
    0.5248
    """
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Welch's t-test of equal means (nan when undefined: fewer than two
    values on a side, or no spread on either).

    >>> round(welch_p([30, 20, 30, 35, 30], [20, 25, 25, 25, 25]), 4)  # scipy: 0.1141
    0.1141
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2:
        return math.nan
    vx, vy = float(np.var(x, ddof=1)) / x.size, float(np.var(y, ddof=1)) / y.size
    if vx + vy == 0.0:
        return math.nan
    t = (float(x.mean()) - float(y.mean())) / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def mann_whitney_p(a: Sequence[float], b: Sequence[float], *, max_exact: int = 200_000) -> float:
    """Two-sided p-value of the Mann-Whitney U test (Wilcoxon rank-sum): do values of ``a`` tend to be
    larger or smaller than those of ``b``? nan when a side is empty or every value is tied.

    Ranks are mid-ranks (ties share their mean rank). With at most ``max_exact`` ways to split the
    pooled values into the two groups, the p-value is exact: the share of all splits whose rank sum is
    at least as far from its mean as the observed one (the permutation distribution of the tied ranks,
    what a rank test means with seeds this few). Otherwise the normal approximation with the tie
    correction and a continuity correction (scipy's ``method="asymptotic"``).

    >>> mann_whitney_p([1, 2, 3], [4, 5, 6])  # scipy.stats.mannwhitneyu(..., method="exact"): 0.1
    0.1
    >>> round(mann_whitney_p([1.0, 2.5, 2.2, 5.0], [2.0, 3.0, 6.0, 7.0, 8.0]), 4)  # scipy exact: 0.1905
    0.1905
    >>> round(mann_whitney_p([1.0, 2.0, 2.0, 5.0], [2.0, 3.0, 6.0, 7.0, 8.0]), 4)  # a tie across the groups
    0.1111
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        return math.nan
    pooled = np.concatenate([x, y])
    ranks = _midranks(pooled)
    if np.all(ranks == ranks[0]):
        return math.nan
    observed = float(ranks[:n1].sum())
    mean = n1 * (n1 + n2 + 1) / 2.0
    if math.comb(n1 + n2, n1) <= max_exact:
        from itertools import combinations

        sums = np.array([ranks[list(idx)].sum() for idx in combinations(range(n1 + n2), n1)])
        far = np.abs(sums - mean) >= abs(observed - mean) - 1e-9
        return float(far.mean())
    _, counts = np.unique(pooled, return_counts=True)
    n = n1 + n2
    var = n1 * n2 / 12.0 * ((n + 1) - float((counts**3 - counts).sum()) / (n * (n - 1)))
    z = max(abs(observed - mean) - 0.5, 0.0) / math.sqrt(var)
    return float(math.erfc(z / math.sqrt(2.0)))


def _midranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(values.size, dtype=float)
    sorted_values = values[order]
    start = 0
    while start < values.size:
        end = start
        while end + 1 < values.size and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


# --------------------------------------------------------------------------------------------
# Loading


@dataclass
class Run:
    """One seed of one arm: its evaluation rows, sorted by ``env_steps`` (one row per step)."""

    arm: str
    seed: int
    path: Path
    columns: dict[str, np.ndarray]
    wall_clock_s: float
    total_frames: int | None = None

    @property
    def steps(self) -> np.ndarray:
        return self.columns["env_steps"]

    @property
    def last_step(self) -> float:
        return float(self.steps[-1])

    def col(self, name: str) -> np.ndarray:
        """A column as floats, all nan when this CSV lacks it (older logs)."""
        if name in self.columns:
            return self.columns[name]
        return np.full(len(self.steps), math.nan)


def _to_float(cell: str | None) -> float:
    try:
        return float(cell) if cell not in (None, "") else math.nan
    except ValueError:
        return math.nan


def wall_clock(time_s: Sequence[float]) -> float:
    """Total seconds of a run logged in chunks whose clocks each restart near zero.

    >>> wall_clock([10, 20, 30, 5, 15, 2, 4])
    49.0
    """
    total, prev = 0.0, math.nan
    for t in time_s:
        if not math.isfinite(t):
            continue
        if math.isfinite(prev) and t < prev:
            total += prev
        prev = t
    return total + (prev if math.isfinite(prev) else 0.0)


def read_run(run_dir: Path, arm: str, seed: int) -> Run | None:
    """Parse ``run_dir/metrics.csv``; None when it has no evaluation rows yet."""
    with open(run_dir / "metrics.csv", newline="") as f:
        reader = csv.DictReader(f)
        names = [n.strip() for n in (reader.fieldnames or [])]
        raw = [{k.strip(): _to_float(v) for k, v in row.items() if k is not None} for row in reader]
    raw = [r for r in raw if math.isfinite(r.get("env_steps", math.nan))]
    if not raw:
        return None
    # Time is summed over the file order (every chunk's compute was spent), before rows are
    # deduplicated below.
    seconds = wall_clock([r.get("time_s", math.nan) for r in raw])
    # A resumed chunk restarts from its checkpoint and may log some env_steps again: the later
    # row belongs to the trajectory that continued, so it replaces the earlier one.
    by_step = {r["env_steps"]: r for r in raw}
    rows = [by_step[s] for s in sorted(by_step)]
    columns = {n: np.array([r.get(n, math.nan) for r in rows], dtype=float) for n in names}
    total_frames = None
    config = run_dir / "config.json"
    if config.exists():
        try:
            value = json.loads(config.read_text()).get("total_frames")
            total_frames = int(value) if value is not None else None
        except (ValueError, TypeError, AttributeError):
            total_frames = None
    return Run(arm, seed, run_dir, columns, seconds, total_frames)


def order_arms(arms: Iterable[str]) -> list[str]:
    """Known arms in the study's order, then the rest alphabetically."""
    arms = set(arms)
    known = [a for a in KNOWN_ARMS if a in arms]
    return known + sorted(arms - set(known))


def load_study(root: str | Path, study: str) -> dict[str, list[Run]]:
    """``{arm: [Run, ...]}`` for every ``<root>/<study>/<arm>/seed<N>/metrics.csv`` with rows."""
    study_dir = Path(root) / study
    if not study_dir.is_dir():
        raise FileNotFoundError(f"no study folder {study_dir}")
    found: dict[str, list[Run]] = {}
    for arm_dir in study_dir.iterdir():
        if not arm_dir.is_dir():
            continue
        runs = []
        for seed_dir in arm_dir.iterdir():
            m = re.fullmatch(r"seed(\d+)", seed_dir.name)
            if not m or not (seed_dir / "metrics.csv").exists():
                continue
            run = read_run(seed_dir, arm_dir.name, int(m.group(1)))
            if run is None:
                print(f"note: {seed_dir} has no evaluation rows yet, skipped", file=sys.stderr)
            else:
                runs.append(run)
        if runs:
            found[arm_dir.name] = sorted(runs, key=lambda r: r.seed)
    return {arm: found[arm] for arm in order_arms(found)}


# --------------------------------------------------------------------------------------------
# Metrics


def frames_to_target(run: Run, target: float, metric: str = SUCCESS) -> int | None:
    """First ``env_steps`` whose ``metric >= target``; None if the run never got there."""
    hit = np.flatnonzero(run.col(metric) >= target)  # nan compares False
    return int(run.steps[hit[0]]) if hit.size else None


def auc(run: Run, horizon: float, metric: str = SUCCESS) -> float:
    """Time-averaged ``metric`` from the first evaluation to ``horizon`` (trapezoid); for
    success, in [0, 1].

    nan when the run stops before the horizon (it would be judged on a shorter window).
    """
    ok = np.isfinite(run.col(metric))
    s, y = run.steps[ok], run.col(metric)[ok]
    if s.size == 0 or s[-1] < horizon or horizon <= s[0]:
        return math.nan
    keep = s <= horizon
    s_in, y_in = s[keep], y[keep]
    if s_in[-1] < horizon:  # the horizon falls between two evaluations: interpolate there
        s_in = np.append(s_in, horizon)
        y_in = np.append(y_in, np.interp(horizon, s, y))
    area = float(np.sum((y_in[1:] + y_in[:-1]) / 2 * np.diff(s_in)))
    return area / (horizon - s_in[0])


def final_success(run: Run, metric: str = SUCCESS) -> float:
    """``metric`` (eval success by default) at the run's last evaluation that logged one."""
    y = run.col(metric)
    y = y[np.isfinite(y)]
    return float(y[-1]) if y.size else math.nan


def second_half_mean(run: Run, column: str) -> float:
    """Mean of ``column`` over rows past half the run (the share settles after the warm-up)."""
    values = run.col(column)[run.steps > run.last_step / 2]
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else math.nan


@dataclass
class Curve:
    """Mean over seeds at each evaluated step; ``half`` is the 95% half-width (nan for n < 2)."""

    steps: np.ndarray
    mean: np.ndarray
    half: np.ndarray
    n: np.ndarray


def curve(runs: Sequence[Run], column: str) -> Curve:
    """Per-step mean ± CI of ``column`` over the runs that logged that step."""
    by_step: dict[float, list[float]] = {}
    for run in runs:
        for s, v in zip(run.steps, run.col(column)):
            if math.isfinite(v):
                by_step.setdefault(float(s), []).append(float(v))
    steps = sorted(by_step)
    stats = [mean_ci(by_step[s]) for s in steps]
    return Curve(
        np.array(steps, dtype=float),
        np.array([m for m, _, _ in stats], dtype=float),
        np.array([h for _, h, _ in stats], dtype=float),
        np.array([n for _, _, n in stats], dtype=int),
    )


@dataclass
class ArmSummary:
    arm: str
    n_runs: int
    n_finished: int
    frames: dict[int, int | None]  # seed -> frames to target (None: not reached)
    reached: int
    median_frames: float  # over seeds that reached the target; nan if none did
    censored_mean_frames: float  # not-reached seeds count at their last env_steps
    censored: bool  # some seed did not reach: the mean above is a lower bound
    auc: tuple[float, float, int]  # (mean, half-width, n)
    final: tuple[float, float, int]
    peak: tuple[float, float, int]  # best eval success of each run
    collapsed: int  # finished runs that reached the target but ended below half of it
    wall_clock_min: float  # mean over finished runs
    buffer_positive: float
    sampled_positive: float
    oversampling: float  # sampled / buffer positive share
    vs_baseline: float = math.nan  # median frames, arm / baseline
    vs_baseline_mean: float = math.nan  # censored mean frames, arm / baseline
    p_vs_baseline: float = math.nan  # Welch t-test of the per-seed (censored) frames against the baseline's
    p_auc_vs_baseline: float = math.nan  # Welch t-test of the per-seed AUC against the baseline's
    p_final_vs_baseline: float = math.nan  # Welch t-test of the per-seed final values against the baseline's
    mw_vs_baseline: float = math.nan  # Mann-Whitney U test of the per-seed (censored) frames
    mw_auc_vs_baseline: float = math.nan  # Mann-Whitney U test of the per-seed AUC
    mw_final_vs_baseline: float = math.nan  # Mann-Whitney U test of the per-seed final values
    lambda_effective: float = math.nan  # second-half mean of lambda under the over-sampling ceiling
    success: Curve = field(default=None, repr=False)  # type: ignore[assignment]
    buffer_curve: Curve = field(default=None, repr=False)  # type: ignore[assignment]
    sampled_curve: Curve = field(default=None, repr=False)  # type: ignore[assignment]


@dataclass
class StudySummary:
    study: str
    target: float
    horizon: float
    baseline: str
    arms: dict[str, ArmSummary]
    metric: str = SUCCESS


def _nanmax(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else math.nan


def _nanmean(values: Iterable[float]) -> float:
    x = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    return float(x.mean()) if x.size else math.nan


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def is_finished(run: Run, study_last_step: float) -> bool:
    """A run that got to its budget (config) or, without one, as far as the study's longest."""
    if run.total_frames is not None:
        return run.last_step >= run.total_frames
    return run.last_step >= study_last_step


def summarize(
    runs_by_arm: dict[str, list[Run]],
    *,
    study: str = "",
    target: float = 0.8,
    horizon: float | None = None,
    baseline: str = "uniform",
    metric: str = SUCCESS,
) -> StudySummary:
    """Per-arm metrics (see the module docstring). Pass every arm of the study, not a subset:
    "finished" and the default horizon are judged against the whole study. ``metric`` is the
    evaluation column that the curves, target, AUC, final and peak values read."""
    all_runs = [r for runs in runs_by_arm.values() for r in runs]
    if not all_runs:
        raise ValueError("no runs to summarize")
    study_last = max(r.last_step for r in all_runs)
    finished = {id(r) for r in all_runs if is_finished(r, study_last)}
    if horizon is None:
        complete = [r.last_step for r in all_runs if id(r) in finished]
        # Unreachable without a config (the longest run is finished by definition); with
        # configs and nothing finished yet, the shortest run keeps every run in the AUC.
        horizon = min(complete) if complete else min(r.last_step for r in all_runs)

    arms: dict[str, ArmSummary] = {}
    censored_by_arm: dict[str, list[float]] = {}
    auc_by_arm: dict[str, list[float]] = {}
    final_by_arm: dict[str, list[float]] = {}
    for arm, runs in runs_by_arm.items():
        per_run = [frames_to_target(r, target, metric) for r in runs]
        hits = [f for f in per_run if f is not None]
        censored_frames = [f if f is not None else r.last_step for r, f in zip(runs, per_run)]
        censored_by_arm[arm] = censored_frames
        done = [r for r in runs if id(r) in finished]
        auc_by_arm[arm] = [auc(r, horizon, metric) for r in runs]
        final_by_arm[arm] = [final_success(r, metric) for r in done]
        buffer_pos = _nanmean(second_half_mean(r, "positive_fraction") for r in runs)
        sampled_pos = _nanmean(second_half_mean(r, "sampled_positive_fraction") for r in runs)
        arms[arm] = ArmSummary(
            arm=arm,
            n_runs=len(runs),
            n_finished=len(done),
            frames={r.seed: f for r, f in zip(runs, per_run)},
            reached=len(hits),
            median_frames=float(np.median(hits)) if hits else math.nan,
            censored_mean_frames=float(np.mean(censored_frames)),
            censored=len(hits) < len(runs),
            auc=mean_ci(auc_by_arm[arm]),
            final=mean_ci(final_by_arm[arm]),
            peak=mean_ci(_nanmax(r.col(metric)) for r in runs),
            collapsed=sum(1 for r in done if frames_to_target(r, target, metric) is not None
                          and final_success(r, metric) < target / 2),
            wall_clock_min=_nanmean(r.wall_clock_s / 60 for r in done),
            buffer_positive=buffer_pos,
            sampled_positive=sampled_pos,
            oversampling=sampled_pos / buffer_pos if buffer_pos > 0 else math.nan,
            lambda_effective=_nanmean(second_half_mean(r, "lambda_effective") for r in runs),
            success=curve(runs, metric),
            buffer_curve=curve(runs, "positive_fraction"),
            sampled_curve=curve(runs, "sampled_positive_fraction"),
        )
    base = arms.get(baseline)
    if base is not None and base.median_frames > 0:
        for s in arms.values():
            s.vs_baseline = s.median_frames / base.median_frames  # nan propagates
    if base is not None:
        for arm, s in arms.items():
            if base.censored_mean_frames > 0:  # a baseline at 0 frames (target met at the start) has no ratio
                s.vs_baseline_mean = s.censored_mean_frames / base.censored_mean_frames
            if arm != baseline:
                s.p_vs_baseline = welch_p(censored_by_arm[arm], censored_by_arm[baseline])
                s.p_auc_vs_baseline = welch_p(_finite(auc_by_arm[arm]), _finite(auc_by_arm[baseline]))
                s.p_final_vs_baseline = welch_p(_finite(final_by_arm[arm]), _finite(final_by_arm[baseline]))
                s.mw_vs_baseline = mann_whitney_p(censored_by_arm[arm], censored_by_arm[baseline])
                s.mw_auc_vs_baseline = mann_whitney_p(_finite(auc_by_arm[arm]), _finite(auc_by_arm[baseline]))
                s.mw_final_vs_baseline = mann_whitney_p(_finite(final_by_arm[arm]), _finite(final_by_arm[baseline]))
    return StudySummary(study, target, float(horizon), baseline, arms, metric)


# --------------------------------------------------------------------------------------------
# Rendering

DASH = "—"


def fmt_frames(x: float) -> str:
    """Compact frame counts.

    >>> fmt_frames(120000), fmt_frames(12500), fmt_frames(1250000), fmt_frames(640)
    ('120k', '12.5k', '1.25M', '640')
    """
    if not math.isfinite(x):
        return DASH
    if abs(x) >= 999_500:
        return f"{x / 1e6:.3g}M"
    if abs(x) >= 1000:
        return f"{x / 1e3:.3g}k"
    return f"{x:.0f}"


def fmt_ci(stat: tuple[float, float, int], digits: int = 2) -> str:
    mean, half, n = stat
    if n == 0 or not math.isfinite(mean):
        return DASH
    if not math.isfinite(half):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def _fmt(x: float, spec: str, suffix: str = "") -> str:
    return f"{x:{spec}}{suffix}" if math.isfinite(x) else DASH


def _fmt_share(x: float) -> str:
    """A share in [0, 1] to 2 decimals; rare ones (< 1%) to 3, so they do not read as 0.

    >>> _fmt_share(0.6), _fmt_share(0.0043), _fmt_share(0.0)
    ('0.60', '0.004', '0.00')
    """
    return _fmt(x, ".3f" if 0 < x < 0.01 else ".2f")


def render_table(summary: StudySummary, arms: Sequence[str] | None = None) -> str:
    """Markdown table of the summary (``arms`` selects and orders rows), with a legend."""
    pct, what = _fmt_level(summary, summary.target), _metric_label(summary)
    header = [
        "arm", "seeds", f"reach {pct}", f"frames to {pct} per seed", f"median frames to {pct}", "censored mean frames",
        "vs baseline", "vs baseline (mean)", "p (Welch)", "p (MW)", "AUC", "p AUC", "p AUC (MW)", f"final {what}",
        "p final", "p final (MW)", f"peak {what}",
        "collapsed", "wall-clock (min)", "buffer positive", "sampled positive", "over-sampling", "λ effective",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for arm in arms if arms is not None else list(summary.arms):
        s = summary.arms[arm]
        seeds = str(s.n_runs) if s.n_finished == s.n_runs else f"{s.n_runs} ({s.n_finished} done)"
        censored = fmt_frames(s.censored_mean_frames)
        per_seed = ", ".join(fmt_frames(f) if f is not None else "—" for _, f in sorted(s.frames.items()))
        row = [
            arm, seeds, f"{s.reached}/{s.n_runs}", per_seed, fmt_frames(s.median_frames),
            f"≥ {censored}" if s.censored else censored,
            _fmt(s.vs_baseline, ".2f", "×"), _fmt(s.vs_baseline_mean, ".2f", "×"), _fmt(s.p_vs_baseline, ".2f"),
            _fmt(s.mw_vs_baseline, ".2f"), fmt_ci(s.auc), _fmt(s.p_auc_vs_baseline, ".2f"),
            _fmt(s.mw_auc_vs_baseline, ".2f"), fmt_ci(s.final), _fmt(s.p_final_vs_baseline, ".2f"),
            _fmt(s.mw_final_vs_baseline, ".2f"),
            fmt_ci(s.peak), f"{s.collapsed}/{s.n_finished}",
            _fmt(s.wall_clock_min, ".1f"), _fmt_share(s.buffer_positive),
            _fmt_share(s.sampled_positive), _fmt(s.oversampling, ".2f", "×"), _fmt(s.lambda_effective, ".3f"),
        ]
        lines.append("| " + " | ".join(row) + " |")
    notes = (
        f"Study `{summary.study}`. Median frames to {pct} eval {what} over the seeds that "
        f"reached it; the censored mean counts the others at their last step (≥: a lower "
        f"bound). Per seed: seeds in order, — where the target was not reached. vs baseline: median "
        f"(and censored mean) frames relative to `{summary.baseline}` (< 1 is faster); p: Welch's "
        f"t-test of the per-seed censored frames against `{summary.baseline}`'s (the evaluation grid "
        f"makes them coarse); p AUC, p final: the same test of the per-seed AUC and final values; (MW): the "
        f"Mann-Whitney U test of the same per-seed values (exact permutation p-value over mid-ranks). "
        f"AUC: time-averaged {what} up to {fmt_frames(summary.horizon)} frames (with success, the paper's "
        f"average success rate, ASR). Final {what} "
        f"and wall-clock over finished runs; peak: each run's best evaluation; collapsed: finished "
        f"runs that reached {pct} and ended below {_fmt_level(summary, summary.target / 2)}. ± is a 95% t-interval over seeds. Positive shares "
        f"are means over the second half of each run; over-sampling = sampled / buffer; λ effective: the "
        f"mixture weight under the over-sampling ceiling (max_oversampling), second-half mean."
    )
    return "\n".join(lines) + "\n\n" + notes + "\n"


def _metric_label(summary: StudySummary) -> str:
    """"success" for the success rate, else the column's name without its ``eval_`` prefix."""
    return "success" if summary.metric == SUCCESS else summary.metric.removeprefix("eval_")


def _fmt_level(summary: StudySummary, value: float) -> str:
    """A level of the metric: a percentage for the success rate, else plain (``40``)."""
    return f"{value:.0%}" if summary.metric == SUCCESS else f"{value:g}"


def _pyplot():
    try:
        import matplotlib
    except ImportError as e:  # an optional dependency: say which extra provides it
        raise ImportError(MATPLOTLIB_HINT) from e
    matplotlib.use("Agg")  # files only; no display on the machines that run the study
    import matplotlib.pyplot as plt

    return plt


def _colors(arms: Sequence[str]) -> dict[str, str]:
    # One colour per arm, shared by both plots, so an arm is recognisable across figures.
    palette = [f"C{i}" for i in range(10)]
    return {arm: palette[i % len(palette)] for i, arm in enumerate(arms)}


def _kilo_axis(ax) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_frames(x) if x else "0"))


def plot_success(summary: StudySummary, path: str | Path, arms: Sequence[str] | None = None) -> Path:
    """Mean eval success (or ``summary.metric``) vs env steps per arm with shaded 95% bands;
    returns the path."""
    plt = _pyplot()
    arms = list(arms) if arms is not None else list(summary.arms)
    colors = _colors(arms)
    is_rate = summary.metric == SUCCESS
    fig, ax = plt.subplots(figsize=(8, 5))
    for arm in arms:
        s = summary.arms[arm]
        c = s.success
        # A single seed has no interval: draw no band rather than a zero-width one.
        half = np.nan_to_num(c.half, nan=0.0)
        ax.plot(c.steps, c.mean, color=colors[arm], label=f"{arm} (n={s.n_runs})")
        low, high = c.mean - half, c.mean + half
        if is_rate:  # a rate's interval past [0, 1] is an artefact of the t-interval
            low, high = np.clip(low, 0, 1), np.clip(high, 0, 1)
        ax.fill_between(c.steps, low, high, color=colors[arm], alpha=0.2, linewidth=0)
    ax.axhline(summary.target, color="grey", linestyle=":", linewidth=1)
    counts = sorted({summary.arms[a].n_runs for a in arms})
    seeds = f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} seeds per arm"
    what = _metric_label(summary)
    ax.set(title=f"{summary.study}: eval {what} ({seeds}, mean ± 95% CI)", xlabel="env steps",
           ylabel="eval success rate" if is_rate else f"eval {what}")
    if is_rate:
        ax.set_ylim(-0.02, 1.02)
    _kilo_axis(ax)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")  # success curves rise to the right
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_replay(summary: StudySummary, path: str | Path, arms: Sequence[str] | None = None) -> Path | None:
    """Positive share of the buffer (solid) and of sampled batches (dashed) per VLM arm.

    Returns None, writing nothing, when no selected arm logged a positive share.
    """
    arms = list(arms) if arms is not None else list(summary.arms)
    colors = _colors(arms)
    vlm = [a for a in arms if summary.arms[a].buffer_curve.steps.size
           or summary.arms[a].sampled_curve.steps.size]
    if not vlm:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for arm in vlm:
        s = summary.arms[arm]
        ax.plot(s.buffer_curve.steps, s.buffer_curve.mean, color=colors[arm], label=f"{arm} buffer")
        if s.sampled_curve.steps.size:
            ax.plot(s.sampled_curve.steps, s.sampled_curve.mean, color=colors[arm], linestyle="--",
                    label=f"{arm} sampled")
    ax.set(title=f"{summary.study}: positive share, buffer (solid) vs sampled (dashed)",
           xlabel="env steps", ylabel="positive share", ylim=(-0.02, 1.02))
    _kilo_axis(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------
# CLI


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", required=True, help="study folder, e.g. doorkey6")
    p.add_argument("--results", default=str(ROOT / "studies" / "learning" / "results"), help="results root")
    p.add_argument("--out", default=None, help="output folder (default studies/results/<study>)")
    p.add_argument("--arms", default=None, help="comma-separated arms to show, in this order")
    p.add_argument("--baseline", default="uniform", help="arm the frame ratios are relative to")
    p.add_argument("--metric", default=SUCCESS,
                   help="evaluation column for curves, target, AUC, final and peak (e.g. eval_return)")
    p.add_argument("--target", type=float, default=0.8, help="value of --metric for frames-to-target")
    p.add_argument("--horizon", type=float, default=None,
                   help="AUC horizon in env steps (default: shortest finished run)")
    p.add_argument("--name", default=None, help="suffix for the output files, e.g. ablation")
    args = p.parse_args(argv)

    runs = load_study(args.results, args.study)
    if not runs:
        print(f"no runs under {Path(args.results) / args.study}", file=sys.stderr)
        return 1
    arms = [a.strip() for a in args.arms.split(",") if a.strip()] if args.arms else list(runs)
    missing = [a for a in arms if a not in runs]
    if missing:
        print(f"arms without runs: {', '.join(missing)} (have: {', '.join(runs)})", file=sys.stderr)
        return 1
    if not any(args.metric in r.columns for rs in runs.values() for r in rs):
        print(f"no run logged a column {args.metric!r}", file=sys.stderr)
        return 1
    # Every arm goes into the summary (not just the shown ones) so the baseline, "finished"
    # and the default horizon do not depend on which arms a plot shows.
    summary = summarize(runs, study=args.study, target=args.target, horizon=args.horizon,
                        baseline=args.baseline, metric=args.metric)
    if args.baseline not in runs:
        print(f"note: baseline arm {args.baseline!r} has no runs; no ratios", file=sys.stderr)

    out = Path(args.out) if args.out else ROOT / "studies" / "results" / args.study
    out.mkdir(parents=True, exist_ok=True)
    suffix = f"_{args.name}" if args.name else ""
    # Another metric's table and curves sit next to the success ones: return.png, table_return.md.
    curves = _metric_label(summary)
    table_path = out / (f"table{suffix}.md" if args.metric == SUCCESS else f"table_{curves}{suffix}.md")
    table = render_table(summary, arms)
    table_path.write_text(table)
    print(table)
    try:
        written = [plot_success(summary, out / f"{curves}{suffix}.png", arms),
                   plot_replay(summary, out / f"replay{suffix}.png", arms)]
    except ImportError as e:
        print(e, file=sys.stderr)
        return 1
    for path in [table_path, *written]:
        if path is not None:
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
