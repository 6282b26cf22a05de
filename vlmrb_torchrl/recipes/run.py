"""The run: seeds and torch threads, the run directory's files (config, metrics, TensorBoard, progress)
and the metric columns. Taking the directory (lock, marker, overwrite) is
:mod:`vlmrb_torchrl.recipes.run_dir`; checkpoints and resume are :mod:`vlmrb_torchrl.recipes.checkpoint`."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlmrb_torchrl.recipes.replay import make_scorer_from_config, needs_frames, scorer_checks, uses_scorer
from vlmrb_torchrl.recipes.run_dir import RUN_FILES, make_run_dir, prepare_run_dir, run_id

__all__ = ["METRIC_COLUMNS", "SAC_METRIC_COLUMNS", "RunStart", "start_run", "seed_everything", "resolve_device", "Run",
           "make_run_dir", "prepare_run_dir", "RUN_FILES"]

METRIC_COLUMNS = [
    "env_steps", "episodes", "eval_success", "eval_return", "eval_episode_len", "eval_full_success", "eval_full_return",
    "eval_full_episode_len", "train_success", "train_episode_len", "loss", "epsilon", "lambda", "lambda_effective",
    "fraction_scored", "positive_fraction", "credited_fraction", "sampled_positive_fraction", "max_oversampling_ratio", "stale_drops", "scorer_clips_per_s",
    "scorer_backlog", "scorer_dropped", "scorer_errors", "scorer_consecutive_errors", "env_steps_per_s", "time_s",
]
#: SAC's metrics: the entropy temperature, policy entropy and the critics' mean value instead of epsilon ...
SAC_METRIC_COLUMNS = [c for c in METRIC_COLUMNS if c != "epsilon" and not c.startswith("eval_full_")]
SAC_METRIC_COLUMNS[SAC_METRIC_COLUMNS.index("loss") + 1:SAC_METRIC_COLUMNS.index("loss") + 1] = [
    "loss_actor", "loss_qvalue", "alpha", "entropy", "q_value"]
#: ... and, after the return, the subgoals satisfied at the end of an evaluation episode (OGBench Scene)
SAC_METRIC_COLUMNS.insert(SAC_METRIC_COLUMNS.index("eval_return") + 1, "eval_subgoals")


#: The training loop's counters that are its own state, not results: ``summary.json`` keeps them apart
#: (``"bookkeeping"``), with the windows of the next metrics row (``train_window_*``).
BOOKKEEPING_KEYS = ("next_eval", "next_full_eval", "next_checkpoint", "drawn_logged")


def is_bookkeeping(key: str) -> bool:
    """Whether the counter ``key`` is the loop's own state (:data:`BOOKKEEPING_KEYS`, ``train_window_*``).

    Examples:
        >>> is_bookkeeping("next_eval"), is_bookkeeping("train_window_episodes"), is_bookkeeping("env_steps")
        (True, True, False)
    """
    return key in BOOKKEEPING_KEYS or key.startswith("train_window_")


# ---------------------------------------------------------------------------------- run setup
def seed_everything(seed: int) -> torch.Generator:
    """Seeds Python, NumPy and torch; returns the replay buffer's generator.

    Examples:
        >>> g = seed_everything(0)
        >>> torch.randint(10, (1,), generator=g).item() == torch.randint(10, (1,)).item()
        True
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> cuda when available, else cpu; any other name as given.

    Examples:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclasses.dataclass
class RunStart:
    """What :func:`start_run` set up. A context manager: leaving it restores torch's thread count.

    Attributes:
        generator: the replay buffer's generator, seeded with the run's seed.
        device: the learner's device.
        scorer: the clip scorer of the VLM replay modes, ``None`` for uniform/PER.
        needs_frames: the scorer reads rendered frames, so the training envs must render them.
        updates_total: gradient updates over the whole run.
        threads_before: torch intra-op threads before the run (restored on exit).
    """

    generator: torch.Generator
    device: torch.device
    scorer: Any
    needs_frames: bool
    updates_total: int
    threads_before: int

    def __enter__(self) -> RunStart:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        torch.set_num_threads(self.threads_before)


def start_run(cfg: Any) -> RunStart:
    """What every recipe does first: seeds, pins the learner's torch threads, resolves the device
    and, in VLM modes, builds the scorer.

    Use it as a context manager (``with start_run(cfg) as start:``) so the thread count is
    restored however the run ends.

    Examples:
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> before = torch.get_num_threads()
        >>> with start_run(DQNConfig(replay="uniform", device="cpu", total_frames=9_000)) as start:
        ...     torch.get_num_threads(), start.scorer, start.updates_total
        (1, None, 1000)
        >>> torch.get_num_threads() == before
        True
    """
    generator = seed_everything(cfg.seed)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(cfg.torch_threads)
    try:
        scorer = _build_scorer(cfg) if uses_scorer(cfg.replay) else None
        return RunStart(generator=generator, device=resolve_device(cfg.device), scorer=scorer,
                        needs_frames=needs_frames(scorer),
                        updates_total=cfg.updates_for(max(0, cfg.total_frames - cfg.learning_starts)),
                        threads_before=threads_before)
    except BaseException:
        torch.set_num_threads(threads_before)
        raise


def _build_scorer(cfg: Any) -> Any:
    """:func:`~vlmrb_torchrl.recipes.replay.make_scorer_from_config`, with a bad spec, an unimportable
    ``python:`` module or an unknown keyword argument raised as a one-line
    :class:`~vlmrb_torchrl.recipes.config.ConfigError` naming the ``scorer=`` value.

    Examples:
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> _build_scorer(DQNConfig(scorer="orcale:minigrid"))
        Traceback (most recent call last):
        ...
        vlmrb_torchrl.recipes.config.ConfigError: scorer='orcale:minigrid': Unknown scorer spec 'orcale:minigrid'. ...
    """
    from vlmrb_torchrl.recipes.config import ConfigError

    try:
        return make_scorer_from_config(cfg)
    except (ValueError, ImportError, TypeError) as err:
        message = str(err)
        for said in (f"make_scorer({cfg.scorer!r}): ", f"make_scorer({cfg.scorer!r}) "):  # the spec is named once
            message = message[len(said):] if message.startswith(said) else message
        raise ConfigError(f"scorer={cfg.scorer!r}: {message}") from err
def describe_checks(spec: str, checks: dict[str, Any], *, frame_view: str | None = None, shown: int = 3) -> str:
    """The one start-up line of a scorer's checks (:func:`~vlmrb_torchrl.recipes.replay.scorer_checks`): where they
    come from and the first ``shown`` of them; all of them are in ``config.json``'s ``scorer_checks``.

    Examples:
        >>> print(describe_checks("builtin:minigrid", {"checks_from": "mission", "task": "pick up the red ball",
        ...                                            "checks": ['progress("the agent holds the red ball" vs "the red ball is on the floor")']}))
        builtin:minigrid: a clip scores the best of 1 check (from the mission 'pick up the red ball'): progress("the agent holds the red ball" vs "the red ball is on the floor")
        >>> print(describe_checks("builtin:atari", {"checks_from": "default", "task": None,
        ...                                         "checks": [f"c{i}" for i in range(20)]}))
        builtin:atari: a clip scores the best of 20 checks (the default set: no task): c0, c1, c2 and 17 more (config.json: scorer_checks)
    """
    source = checks["checks_from"]
    notes = (["no door in the env's first episodes: the door checks a mission only implies are left out"]
             if checks.get("doors") is False else [])
    if frame_view == "agent":
        notes.append("on frames of MiniGrid's agent-centred view (frame_view=agent)")
    if source == "mission per clip":
        line = (f"{spec}: checks derived for each clip from its episode's mission (the mission changes every "
                "episode; the envs write it under 'mission')")
    else:
        where = {"mission": f"from the mission {checks['task']!r}",
                 "generic": f"generic: the mission {checks['task']!r} is outside the MiniGrid/BabyAI grammar",
                 "default": "the default set: no task", "given": "given"}.get(source, source)
        listed = list(checks["checks"])
        line = (f"{spec}: a clip scores the best of {len(listed)} check{'s' * (len(listed) != 1)} ({where}): "
                + ", ".join(listed[:shown])
                + (f" and {len(listed) - shown} more (config.json: scorer_checks)" if len(listed) > shown else ""))
    return "; ".join([line, *notes])


# ---------------------------------------------------------------------------------- run directory
class Run:
    """A run directory: resolved config, ``metrics.csv``, TensorBoard events, progress bar.

    ``log(metrics)`` appends one CSV row (missing columns are left empty) and the same
    scalars to TensorBoard under ``<group>/<name>``. The CSV's columns are ``columns`` plus the
    ``scorer_<name>`` entries of the first row that are not among them (the scorer's own
    ``stats()``, whatever its backend), placed before the timing columns; the header is written
    with that row. A context manager: leaving it closes the files.

    The directory is ``cfg.output_dir``, or ``runs/<recipe>__<env>__<replay>__seed<seed>__<time>``
    (``/`` in the env id becomes ``-``) when that is ``None``; ``cfg.output_dir`` is set to it.

    Examples:
        >>> import tempfile
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> cfg = DQNConfig(output_dir=tempfile.mkdtemp(), tensorboard=False, progress=False)
        >>> with Run(cfg, recipe="dqn", total=100) as run:
        ...     run.log({"env_steps": 100, "loss": 0.5})
        >>> (run.dir / "metrics.csv").read_text().splitlines()[1]
        '100,,,,,,,,,,0.5,,,,,,,,,,,,,,,,'
    """

    def __init__(self, cfg: Any, *, recipe: str, total: int, resumed_from: int = 0,
                 columns: list[str] | None = None, scorer: Any = None) -> None:
        if cfg.output_dir is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            env = cfg.env.replace("/", "-")
            cfg.output_dir = f"runs/{recipe}__{env}__{cfg.replay}__seed{cfg.seed}__{stamp}"
        self.dir = Path(cfg.output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "checkpoints").mkdir(exist_ok=True)
        config = dataclasses.asdict(cfg)
        marked = run_id(self.dir)
        if marked is not None:  # the marker's: what proves to overwrite=true that this run wrote the files
            config["run_id"] = marked
        checks = scorer_checks(scorer)
        if checks is not None:  # what the scorer scores: its checks, derived from the task (builtin:minigrid)
            config["scorer_checks"] = checks
            print(describe_checks(cfg.scorer, checks, frame_view=getattr(cfg, "frame_view", None)), flush=True)
        (self.dir / "config.json").write_text(json.dumps(config, indent=2))
        self.csv_path = self.dir / "metrics.csv"
        new_file = not self.csv_path.exists() or resumed_from == 0
        self._columns = list(columns or METRIC_COLUMNS)
        header = None
        if not new_file:  # a resumed run keeps its file's columns (it may predate newer ones)
            with open(self.csv_path, newline="") as f:
                header = next(csv.reader(f), None)
        self._csv_file = open(self.csv_path, "w" if new_file or not header else "a", newline="")
        self._csv = None if new_file or not header else csv.DictWriter(self._csv_file, fieldnames=header,
                                                                        extrasaction="ignore")
        self._tb = None
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # pragma: no cover - tensorboard is part of the recipe extras
                SummaryWriter = None
            if SummaryWriter is not None:
                # purge what was logged after the checkpoint, not the row logged at it (kept in metrics.csv too)
                self._tb = SummaryWriter(log_dir=str(self.dir / "tensorboard"),
                                         purge_step=resumed_from + 1 if resumed_from else None)
                self._tb.add_text("config", "\n".join(f"    {k}: {v}" for k, v in config.items()))
        self._pbar = None
        if cfg.progress:
            from tqdm.auto import tqdm

            self._pbar = tqdm(total=total, initial=resumed_from, unit="frames", dynamic_ncols=True,
                              desc=f"{recipe} {cfg.env} {cfg.replay}")

    def _start_csv(self, first_row: dict[str, Any]) -> None:
        extra = [k for k in first_row if k.startswith("scorer_") and k not in self._columns]
        at = self._columns.index("env_steps_per_s") if "env_steps_per_s" in self._columns else len(self._columns)
        fieldnames = self._columns[:at] + extra + self._columns[at:]
        self._csv = csv.DictWriter(self._csv_file, fieldnames=fieldnames, extrasaction="ignore")
        self._csv.writeheader()

    def log(self, metrics: dict[str, Any]) -> None:
        row = {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in metrics.items() if v is not None}
        if self._csv is None:
            self._start_csv(metrics)
        self._csv.writerow(row)
        self._csv_file.flush()
        if self._tb is not None:
            step = int(metrics["env_steps"])
            for key, value in metrics.items():
                if key != "env_steps" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(_tb_tag(key), value, step)

    def progress(self, frames: int, **postfix: Any) -> None:
        if self._pbar is not None:
            self._pbar.update(frames)
            self._pbar.set_postfix({k: v for k, v in postfix.items() if v is not None}, refresh=False)

    def write_summary(self, counters: dict[str, Any], metrics: dict[str, Any], gallery: list[Path]) -> dict[str, Any]:
        """Writes ``summary.json`` and returns it: the run's results at the top level (the run directory, the final
        counters, the last logged metrics row, the gallery files), the training loop's own state under
        ``"bookkeeping"`` (:func:`is_bookkeeping`: when the next evaluation and checkpoint are due, the running
        windows of the next metrics row). docs/recipes.md lists the keys.

        Examples:
            >>> import tempfile
            >>> from vlmrb_torchrl.recipes.config import DQNConfig
            >>> cfg = DQNConfig(output_dir=tempfile.mkdtemp(), tensorboard=False, progress=False)
            >>> with Run(cfg, recipe="dqn", total=100) as run:
            ...     summary = run.write_summary({"env_steps": 100, "updates": 25, "next_eval": 200},
            ...                                 {"env_steps": 100, "eval_success": 1.0}, [])
            >>> sorted(summary), summary["bookkeeping"]
            (['bookkeeping', 'env_steps', 'eval_success', 'gallery', 'run_dir', 'updates'], {'next_eval': 200})
        """
        results = {"run_dir": str(self.dir), **{k: v for k, v in counters.items() if not is_bookkeeping(k)},
                   **{k: v for k, v in metrics.items() if k != "env_steps"}, "gallery": [str(p) for p in gallery]}
        summary = {**results, "bookkeeping": {k: v for k, v in counters.items() if is_bookkeeping(k)}}
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
        return summary

    def close(self) -> None:
        """Closes the files (the recipe releases the run directory once everything is closed:
        :func:`~vlmrb_torchrl.recipes.run_dir.release_run_dir`)."""
        if self._csv is None and not self._csv_file.closed:  # nothing logged: the header alone
            self._start_csv({})
        self._csv_file.close()
        if self._tb is not None:
            self._tb.close()
        if self._pbar is not None:
            self._pbar.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _tb_tag(key: str) -> str:
    if key.startswith("eval_"):
        return f"eval/{key[5:]}"
    if key.startswith("scorer_"):
        return f"scorer/{key[7:]}"
    if key in ("lambda", "fraction_scored", "positive_fraction", "credited_fraction", "sampled_positive_fraction",
               "stale_drops", "drawn", "drawn_positive"):
        return f"replay/{key}"
    if key in ("env_steps_per_s", "time_s", "render_per_step"):
        return f"time/{key}"
    return f"train/{key}"
