"""Issue 59's analysis: why the paper's sampler slows DoorKey-12x12, read from the interventions.

Reads the per-run files of the ``doorkey12`` study (``<results>/doorkey12/<arm>/seed<N>/``, as
:mod:`analyze` does) and writes, to ``--out`` (default ``studies/results/doorkey12/``):

- ``mechanism.md``: one row per seed of every arm (ASR, frames to 50% and 80%, final success, the
  full-limit ASR where the run evaluated at MiniGrid's own limit, training-episode success and
  length, the replay's over-sampling at 250-300k frames); the over-sampling **dose-response**
  (uniform = ceiling 1, ``vlm_goal_cap4``, ``vlm_goal_cap8``, ``vlm_goal`` = no ceiling) with the
  Jonckheere-Terpstra test of a monotone trend; Spearman's rho between a seed's ASR and its
  over-sampling; and each intervention against the arm it changes (Welch, exact Mann-Whitney);
- ``dose_response.png``: per-seed ASR against the ceiling, and the arms' success curves.

**ASR** (average success rate) is the trapezoid area under a seed's evaluation-success curve from
its first evaluation to the horizon (1M frames), divided by that span: :func:`analyze.auc`, the one
definition every ASR of studies/results.md uses. The full-limit ASR is the same area over the
evaluations at MiniGrid's own step limit (``eval_full_success``, every 100k frames).

Usage::

    python benchmarks/learning/mechanism.py                 # studies/results/doorkey12/mechanism.md
    python benchmarks/learning/mechanism.py --results /tmp/other_checkout/studies/learning/results --out /tmp/m

Needs numpy and matplotlib (``pip install 'vlmrb-torchrl[bench]'``).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze import (MATPLOTLIB_HINT, Run, _midranks, auc, frames_to_target, load_study,  # noqa: E402
                     mann_whitney_p, mean_ci, welch_p)

ROOT = Path(__file__).resolve().parents[2]
HORIZON = 1_000_000
#: The over-sampling dose: the arm at each ceiling (uniform replay is the ceiling 1: no slot above 1/N).
DOSE = (("uniform", 1.0), ("vlm_goal_cap4", 4.0), ("vlm_goal_cap8", 8.0), ("vlm_goal", math.inf))
#: Each intervention and the arm it changes one thing of.
CONTRASTS = (("vlm_oracle", "uniform"), ("vlm_oracle", "vlm_goal"), ("vlm_goal_cap8", "vlm_goal"),
             ("vlm_goal_cap4", "vlm_goal"), ("vlm_goal_cap4", "uniform"), ("vlm_goal_L32", "vlm_goal"),
             ("vlm_goal_L32", "uniform"), ("vlm_goal_rr2", "uniform_rr2"), ("vlm_goal_spread", "uniform"),
             ("vlm_goal_spread", "vlm_goal"), ("vlm_builtin_goal", "vlm_goal"), ("vlm_builtin_goal", "uniform"))
#: The arms of the pre-registered over-sampling correlation (prediction b'): the paper's sampler on goal labels,
#: whatever its ceiling, clip length or replay ratio. Episode credit (``vlm_goal_spread``, chosen after the
#: prediction) lifts whole paths, so its most-favoured slot measures something else: reported beside, not in it.
CORRELATION_ARMS = ("vlm_goal", "vlm_goal_cap4", "vlm_goal_cap8", "vlm_goal_L32", "vlm_goal_rr2")
#: Frames over which a seed's over-sampling is read: where the recorded runs' harm was decided.
OVERSAMPLING_WINDOW = (250_000, 300_000)
#: Windows of the training-episode columns (mean over the rows inside).
TRAIN_WINDOWS = ((200_000, 400_000), (400_000, 600_000))


# --------------------------------------------------------------------------------------------
# Statistics

def _times_qint(poly: list[int], i: int) -> list[int]:
    """``poly`` times ``1 + q + ... + q^(i-1)``."""
    out = [0] * (len(poly) + i - 1)
    for k, c in enumerate(poly):
        if c:
            for j in range(i):
                out[k + j] += c
    return out


def _divided_by_qint(poly: list[int], i: int) -> list[int]:
    """``poly`` divided by ``1 + q + ... + q^(i-1)`` (exactly: ``(1 - q) / (1 - q^i)``)."""
    diff = [c - (poly[k - 1] if k else 0) for k, c in enumerate(poly)] + [-poly[-1]]
    out = [0] * len(diff)
    for k, c in enumerate(diff):
        out[k] = c + (out[k - i] if k >= i else 0)
    while len(out) > 1 and out[-1] == 0:
        out.pop()
    return out


def jt_null_counts(sizes: Sequence[int]) -> list[int]:
    """How many of the ``N! / prod(n_i!)`` orderings of tie-free values into groups of ``sizes`` give each
    Jonckheere-Terpstra count ``0, 1, ..., sum_{i<j} n_i n_j``: the coefficients of the q-multinomial
    ``[N]_q! / prod [n_i]_q!`` (the JT count is the inversion number of the group labels' sequence).

    >>> jt_null_counts([1, 1])  # two values: the count is 0 or 1
    [1, 1]
    >>> jt_null_counts([2, 2])  # Mann-Whitney U for 2 vs 2: 0..4 in 1, 1, 2, 1, 1 of the 6 splits
    [1, 1, 2, 1, 1]
    >>> sum(jt_null_counts([4, 4, 4, 4])) == math.factorial(16) // math.factorial(4) ** 4
    True
    """
    poly = [1]
    for i in range(1, sum(sizes) + 1):
        poly = _times_qint(poly, i)
    for n in sizes:
        for i in range(1, n + 1):
            poly = _divided_by_qint(poly, i)
    return poly


def jonckheere(groups: Sequence[Sequence[float]], *, draws: int = 200_000, seed: int = 0) -> tuple[float, float]:
    """(JT count, one-sided p) for the ordered alternative "values increase from the first group to the
    last": the count of cross-group pairs (earlier group, later group) whose later value is larger
    (ties 1/2). Exact from :func:`jt_null_counts` without ties; with ties, the share of ``draws``
    random regroupings of the pooled values (a seeded permutation test) whose count is at least the
    observed one.

    >>> jonckheere([[1, 2], [3, 4], [5, 6]])  # perfectly increasing: the largest count, p = 1 / 90
    (12.0, 0.011111111111111112)
    >>> round(jonckheere([[6, 5], [4, 3], [2, 1]])[1], 6)  # perfectly decreasing
    1.0
    """
    groups = [np.asarray(g, dtype=float) for g in groups if len(g)]
    pooled = np.concatenate(groups)
    labels = np.concatenate([np.full(len(g), k) for k, g in enumerate(groups)])

    def count(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
        # values [..., N]: pairs (a, b) with label(a) < label(b), b > a (+1/2 on ties)
        later = labels[None, :] > labels[:, None]
        diff = values[..., None, :] - values[..., :, None]
        return ((diff > 0) + 0.5 * (diff == 0)).__mul__(later).sum(axis=(-1, -2))

    observed = float(count(pooled, labels))
    if len(np.unique(pooled)) == pooled.size:
        counts = jt_null_counts([len(g) for g in groups])
        total = sum(counts)
        return observed, sum(counts[int(round(observed)):]) / total
    rng = np.random.default_rng(seed)
    perms = np.argsort(rng.random((draws, pooled.size)), axis=1)
    stats = count(pooled[perms], labels)
    return observed, float(np.mean(stats >= observed - 1e-9))


def spearman(x: Sequence[float], y: Sequence[float], *, draws: int = 200_000, seed: int = 0) -> tuple[float, float]:
    """(Spearman's rho, one-sided p for rho <= observed: a negative association). Mid-ranks; exact
    over all permutations of ``y`` for n <= 8, else a seeded permutation test of ``draws``.

    >>> rho, p = spearman([1, 2, 3, 4], [4, 3, 2, 1])
    >>> rho, round(p, 4)  # the most negative of the 24 orderings
    (-1.0, 0.0417)
    """
    rx, ry = _midranks(np.asarray(x, dtype=float)), _midranks(np.asarray(y, dtype=float))

    def rho_of(ry_perm: np.ndarray) -> np.ndarray:
        a = rx - rx.mean()
        b = ry_perm - ry_perm.mean(axis=-1, keepdims=True)
        return (b @ a) / np.sqrt((a @ a) * (b * b).sum(axis=-1))

    observed = float(rho_of(ry[None, :])[0])
    if len(ry) <= 8:
        perms = np.array(list(itertools.permutations(ry)))
    else:
        rng = np.random.default_rng(seed)
        perms = ry[np.argsort(rng.random((draws, ry.size)), axis=1)]
    return observed, float(np.mean(rho_of(perms) <= observed + 1e-12))


# --------------------------------------------------------------------------------------------
# Per-seed measures

def asr(run: Run, metric: str = "eval_success") -> float:
    return auc(run, HORIZON, metric)


def window_mean(run: Run, column: str, lo: float, hi: float) -> float:
    """Mean of ``column`` over the rows with ``lo < env_steps <= hi`` (nan without any)."""
    keep = (run.steps > lo) & (run.steps <= hi) & np.isfinite(run.col(column))
    return float(run.col(column)[keep].mean()) if keep.any() else math.nan


def episode_length_from_counts(run: Run, lo: float, hi: float) -> float:
    """Frames per finished training episode between the rows at ``lo`` and ``hi``: the mean length of the
    episodes that ended there (up to the episodes still running at the ends), for runs logged before
    ``train_episode_len`` existed."""
    steps, episodes = run.steps, run.col("episodes")
    at = {float(s): e for s, e in zip(steps, episodes)}
    near = lambda t: min(at, key=lambda s: abs(s - t)) if at else None  # noqa: E731
    a, b = near(lo), near(hi)
    if a is None or b is None or b <= a or not (at[b] > at[a]):
        return math.nan
    return (b - a) / (at[b] - at[a])


def seed_row(run: Run) -> dict[str, float]:
    t50, t80 = frames_to_target(run, 0.5), frames_to_target(run, 0.8)
    full = run.col("eval_full_success")
    out = {
        "asr": asr(run),
        "t50": math.nan if t50 is None else t50,
        "t80": math.nan if t80 is None else t80,
        "final": float(run.col("eval_success")[np.isfinite(run.col("eval_success"))][-1]),
        "asr_full": asr(run, "eval_full_success") if np.isfinite(full).sum() >= 2 else math.nan,
        "oversampling": window_mean(run, "max_oversampling_ratio", OVERSAMPLING_WINDOW[0] - 1, OVERSAMPLING_WINDOW[1]),
        "positive": window_mean(run, "positive_fraction", OVERSAMPLING_WINDOW[0] - 1, OVERSAMPLING_WINDOW[1]),
    }
    for lo, hi in TRAIN_WINDOWS:
        tag = f"{lo // 1000}-{hi // 1000}k"
        out[f"train_success {tag}"] = window_mean(run, "train_success", lo, hi)
        logged = window_mean(run, "train_episode_len", lo, hi)
        out[f"episode_len {tag}"] = logged if math.isfinite(logged) else episode_length_from_counts(run, lo, hi)
    return out


# --------------------------------------------------------------------------------------------
# Report

def _f(value: float, digits: int = 2) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _k(value: float) -> str:
    return "never" if not math.isfinite(value) else f"{value / 1000:.0f}k"


def report(study: dict[str, list[Run]]) -> tuple[str, dict[str, dict[int, dict[str, float]]]]:
    rows = {arm: {run.seed: seed_row(run) for run in runs if run.last_step >= HORIZON}
            for arm, runs in study.items()}
    rows = {arm: seeds for arm, seeds in rows.items() if seeds}
    lines = ["# DoorKey-12x12: the mechanism study (issue 59)", "",
             "Generated by `python benchmarks/learning/mechanism.py` from the committed per-run files "
             "(finished runs only: 1M frames). ASR: trapezoid area under the evaluation-success curve over "
             "50k-1M frames / span (capped at 360 steps); full-limit ASR: the same over the evaluations at "
             "MiniGrid's 1,440-step limit (every 100k frames; runs before issue 59 have none). Over-sampling: "
             "the most-favoured slot's draw rate over uniform's (`max_oversampling_ratio`), mean of the 250k and "
             "300k rows; positive: goal clips' share of the buffer there. Training columns: means over the rows "
             "in the window (episode length from the episode counter where the run predates `train_episode_len`).",
             "", "## Per seed", ""]
    train_cols = [k for k in next(iter(next(iter(rows.values())).values())) if k.startswith(("train_", "episode_"))]
    header = ["arm", "seed", "ASR", "t50", "t80", "final", "full-limit ASR", "over-sampling", "positive",
              *train_cols]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm, seeds in rows.items():
        for seed, r in sorted(seeds.items()):
            cells = [arm, str(seed), _f(r["asr"], 3), _k(r["t50"]), _k(r["t80"]), _f(r["final"]), _f(r["asr_full"], 3),
                     _f(r["oversampling"], 1) + ("×" if math.isfinite(r["oversampling"]) else ""),
                     _f(100 * r["positive"], 1) + ("%" if math.isfinite(r["positive"]) else ""),
                     *[_f(r[c], 2 if c.startswith("train_success") else 0) for c in train_cols]]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Per arm", "", "| arm | seeds | ASR | full-limit ASR | final |", "|---|---|---|---|---|"]
    for arm, seeds in rows.items():
        parts = []
        for key in ("asr", "asr_full", "final"):
            m, h, n = mean_ci(r[key] for r in seeds.values())
            parts.append("—" if n == 0 else f"{m:.3f}" + (f" ± {h:.3f}" if math.isfinite(h) else ""))
        lines.append(f"| {arm} | {len(seeds)} | " + " | ".join(parts) + " |")

    dose = [(arm, c, [r["asr"] for r in rows[arm].values()]) for arm, c in DOSE if arm in rows]
    lines += ["", "## Over-sampling dose-response", ""]
    if len(dose) >= 3:
        lines += ["| ceiling | arm | seeds | ASR per seed | mean ASR |", "|---|---|---|---|---|"]
        for arm, c, values in dose:
            lines.append(f"| {'none' if math.isinf(c) else f'{c:g}'} | {arm} | {len(values)} | "
                         + ", ".join(f"{v:.3f}" for v in values) + f" | {np.mean(values):.3f} |")
        jt, p = jonckheere([values for _, _, values in reversed(dose)])
        lines += ["", f"Jonckheere-Terpstra, ASR decreasing as the ceiling rises ({' > '.join(a for a, _, _ in dose)}"
                      f" expected): JT = {jt:g}, one-sided p = {p:.4f}."]
    else:
        lines.append("(fewer than three dose levels finished)")
    xs, ys = [], []
    for arm, seeds in rows.items():
        if arm in CORRELATION_ARMS:
            for r in seeds.values():
                if math.isfinite(r["oversampling"]):
                    xs.append(r["oversampling"])
                    ys.append(r["asr"])
    if len(xs) >= 4:
        rho, p = spearman(xs, ys)
        lines += ["", f"Spearman's rho between a goal-label seed's over-sampling (250-300k) and its ASR, over "
                      f"{len(xs)} seeds: rho = {rho:.3f}, one-sided p (negative) = {p:.4f}."]
    lines += ["", "## Interventions against the arm they change", "",
              "| arm | vs | seeds | mean ASR (arm / vs) | ratio | Welch p | Mann-Whitney p (exact) |",
              "|---|---|---|---|---|---|---|"]
    for arm, base in CONTRASTS:
        if arm in rows and base in rows:
            a = [r["asr"] for r in rows[arm].values()]
            b = [r["asr"] for r in rows[base].values()]
            lines.append(f"| {arm} | {base} | {len(a)} / {len(b)} | {np.mean(a):.3f} / {np.mean(b):.3f} | "
                         f"{np.mean(a) / np.mean(b):.2f}× | {_f(welch_p(a, b), 3)} | {_f(mann_whitney_p(a, b), 3)} |")
    return "\n".join(lines) + "\n", rows


def plot(study: dict[str, list[Run]], rows: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print(MATPLOTLIB_HINT, file=sys.stderr)
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for x, (arm, _c) in enumerate(DOSE):
        if arm in rows:
            values = [r["asr"] for r in rows[arm].values()]
            left.scatter([x] * len(values), values, color="C0")
            left.hlines(np.mean(values), x - 0.25, x + 0.25, color="C3")
    left.set_xticks(range(len(DOSE)), [f"{'none' if math.isinf(c) else f'{c:g}'}\n{a}" for a, c in DOSE], fontsize=8)
    left.set_xlabel("over-sampling ceiling (uniform replay = 1)")
    left.set_ylabel("ASR (capped evaluation, 50k-1M frames)")
    left.set_title("DoorKey-12x12: ASR per seed against the ceiling")
    for k, (arm, runs) in enumerate(study.items()):
        done = [r for r in runs if r.last_step >= HORIZON]
        if not done:
            continue
        steps = done[0].steps
        curves = np.array([np.interp(steps, r.steps, r.col("eval_success")) for r in done])
        right.plot(steps, curves.mean(0), label=f"{arm} ({len(done)})", color=f"C{k % 10}")
    right.set_xlabel("frames")
    right.set_ylabel("evaluation success (360-step cap)")
    right.legend(fontsize=7)
    right.set_title("mean success curves")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "studies" / "learning" / "results")
    parser.add_argument("--study", default="doorkey12")
    parser.add_argument("--out", type=Path, default=ROOT / "studies" / "results" / "doorkey12")
    args = parser.parse_args(argv)
    study = load_study(args.results, args.study)
    text, rows = report(study)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mechanism.md").write_text(text)
    plot(study, rows, args.out / "dose_response.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
