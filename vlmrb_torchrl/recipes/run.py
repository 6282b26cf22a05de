"""The run: seeds and torch threads, the run directory (config, metrics, TensorBoard, progress),
checkpoints and resume."""

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

from vlmrb_torchrl.recipes.replay import make_scorer_from_config, needs_frames, uses_scorer

__all__ = [
    "METRIC_COLUMNS", "SAC_METRIC_COLUMNS", "RunStart", "start_run", "seed_everything", "resolve_device", "Run",
    "save_checkpoint", "load_checkpoint", "latest_checkpoint", "truncate_metrics", "resume_counters",
    "checkpoint_now", "maybe_checkpoint",
]

METRIC_COLUMNS = [
    "env_steps", "episodes", "eval_success", "eval_return", "loss", "epsilon", "lambda",
    "fraction_scored", "positive_fraction", "sampled_positive_fraction", "stale_drops", "scorer_clips_per_s",
    "scorer_backlog", "scorer_dropped", "env_steps_per_s", "time_s",
]
#: SAC's metrics: the entropy temperature and policy entropy instead of epsilon.
SAC_METRIC_COLUMNS = [c for c in METRIC_COLUMNS if c != "epsilon"]
SAC_METRIC_COLUMNS[SAC_METRIC_COLUMNS.index("loss") + 1:SAC_METRIC_COLUMNS.index("loss") + 1] = [
    "loss_actor", "loss_qvalue", "alpha", "entropy"]


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
        scorer = make_scorer_from_config(cfg) if uses_scorer(cfg.replay) else None
        return RunStart(generator=generator, device=resolve_device(cfg.device), scorer=scorer,
                        needs_frames=needs_frames(scorer),
                        updates_total=max(0, cfg.total_frames - cfg.learning_starts) // cfg.train_every,
                        threads_before=threads_before)
    except BaseException:
        torch.set_num_threads(threads_before)
        raise


# ---------------------------------------------------------------------------------- run directory
class Run:
    """A run directory: resolved config, ``metrics.csv``, TensorBoard events, progress bar.

    ``log(metrics)`` appends one CSV row (missing columns are left empty) and the same
    scalars to TensorBoard under ``<group>/<name>``. A context manager: leaving it closes the
    files.

    The directory is ``cfg.output_dir``, or ``runs/<recipe>__<env>__<replay>__seed<seed>__<time>``
    (``/`` in the env id becomes ``-``) when that is ``None``; ``cfg.output_dir`` is set to it.

    Examples:
        >>> import tempfile
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> cfg = DQNConfig(output_dir=tempfile.mkdtemp(), tensorboard=False, progress=False)
        >>> with Run(cfg, recipe="dqn", total=100) as run:
        ...     run.log({"env_steps": 100, "loss": 0.5})
        >>> (run.dir / "metrics.csv").read_text().splitlines()[1]
        '100,,,,0.5,,,,,,,,,,,'
    """

    def __init__(self, cfg: Any, *, recipe: str, total: int, resumed_from: int = 0,
                 columns: list[str] | None = None) -> None:
        if cfg.output_dir is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            env = cfg.env.replace("/", "-")
            cfg.output_dir = f"runs/{recipe}__{env}__{cfg.replay}__seed{cfg.seed}__{stamp}"
        self.dir = Path(cfg.output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "checkpoints").mkdir(exist_ok=True)
        (self.dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
        self.csv_path = self.dir / "metrics.csv"
        new_file = not self.csv_path.exists() or resumed_from == 0
        self._csv_file = open(self.csv_path, "w" if new_file else "a", newline="")
        self._csv = csv.DictWriter(self._csv_file, fieldnames=columns or METRIC_COLUMNS, extrasaction="ignore")
        if new_file:
            self._csv.writeheader()
        self._tb = None
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # pragma: no cover - tensorboard is part of the recipe extras
                SummaryWriter = None
            if SummaryWriter is not None:
                self._tb = SummaryWriter(log_dir=str(self.dir / "tensorboard"), purge_step=resumed_from or None)
                self._tb.add_text("config", "\n".join(f"    {k}: {v}" for k, v in dataclasses.asdict(cfg).items()))
        self._pbar = None
        if cfg.progress:
            from tqdm.auto import tqdm

            self._pbar = tqdm(total=total, initial=resumed_from, unit="frames", dynamic_ncols=True,
                              desc=f"{recipe} {cfg.env} {cfg.replay}")

    def log(self, metrics: dict[str, Any]) -> None:
        row = {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in metrics.items() if v is not None}
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
        """Writes ``summary.json`` (final counters, the last logged metrics, gallery files) and returns it."""
        summary = {"run_dir": str(self.dir), **counters, **{k: v for k, v in metrics.items() if k != "env_steps"},
                   "gallery": [str(p) for p in gallery]}
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
        return summary

    def close(self) -> None:
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
    if key in ("lambda", "fraction_scored", "positive_fraction", "sampled_positive_fraction", "stale_drops",
               "drawn", "drawn_positive"):
        return f"replay/{key}"
    if key in ("env_steps_per_s", "time_s", "render_per_step"):
        return f"time/{key}"
    return f"train/{key}"


# ---------------------------------------------------------------------------------- checkpoints
def save_checkpoint(path: Path, *, modules: dict[str, Any], rb: Any, counters: dict[str, Any]) -> None:
    """Model/optimizer states, counters, RNG states and the replay buffer (``rb.dumps``: storage + sampler)."""
    path.mkdir(parents=True, exist_ok=True)
    state = {name: obj.state_dict() for name, obj in modules.items()}
    state["counters"] = counters
    state["rng"] = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    torch.save(state, path / "state.pt")
    rb.dumps(path / "replay")
    (path / "DONE").write_text(json.dumps(counters))  # written last: the checkpoint is complete


def load_checkpoint(path: Path, *, modules: dict[str, Any], rb: Any) -> dict[str, Any]:
    """Loads a :func:`save_checkpoint` directory into ``modules`` and ``rb`` (``rb.loads``), restores
    the RNG states and returns the counters."""
    state = torch.load(path / "state.pt", weights_only=False)
    for name, obj in modules.items():
        obj.load_state_dict(state[name])
    rb.loads(path / "replay")
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    return state["counters"]


def latest_checkpoint(resume: str) -> Path:
    """``resume`` itself when it is a complete checkpoint, else the run directory's latest complete one."""
    path = Path(resume)
    if (path / "DONE").exists():
        return path
    candidates = sorted((p for p in (path / "checkpoints").glob("step_*") if (p / "DONE").exists()),
                        key=lambda p: int(p.name.split("_")[1]))
    if not candidates:
        raise FileNotFoundError(f"resume={resume!r}: no complete checkpoint found (looked for {path}/checkpoints/step_*).")
    return candidates[-1]


def truncate_metrics(path: Path, env_steps: int) -> None:
    """Drops the metric rows logged after the checkpoint a run resumes from."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = lines[:1] + [ln for ln in lines[1:] if int(float(ln.split(",", 1)[0])) <= env_steps]
    path.write_text("".join(kept))


def resume_counters(cfg: Any, checkpoint: Path | None, *, modules: dict[str, Any], rb: Any) -> dict[str, Any]:
    """Fresh counters, or those of ``checkpoint`` after loading its modules and replay (``rb``) into place."""
    counters = {"env_steps": 0, "episodes": 0, "updates": 0, "next_eval": cfg.eval_every,
                "next_checkpoint": cfg.checkpoint_every}
    if checkpoint is not None:
        counters = load_checkpoint(checkpoint, modules=modules, rb=rb)
        if cfg.output_dir is None:  # continue in the run directory the checkpoint belongs to
            cfg.output_dir = str(checkpoint.parent.parent)
        truncate_metrics(Path(cfg.output_dir) / "metrics.csv", counters["env_steps"])
    return counters


def checkpoint_now(run: Run, replay: Any, *, modules: dict[str, Any], counters: dict[str, Any]) -> None:
    """Saves ``checkpoints/step_<env_steps>`` after ``replay.before_checkpoint()`` (in VLM modes: every
    score of the data before it is in)."""
    replay.before_checkpoint()
    save_checkpoint(run.dir / "checkpoints" / f"step_{counters['env_steps']}", modules=modules, rb=replay.buffer,
                    counters=dict(counters))


def maybe_checkpoint(run: Run, replay: Any, *, cfg: Any, counters: dict[str, Any], stop_at: int,
                     modules: dict[str, Any]) -> bool:
    """Checkpoints when one is due (every ``checkpoint_every`` frames) or the run stops here
    (``stop_at``); returns whether it did.

    The loop leaves its collector after every checkpoint and, unless the run stops, re-creates it,
    so that env seeds restart from ``(seed, env_steps)`` exactly as in a run resumed from that
    checkpoint.
    """
    at_stop = counters["env_steps"] >= stop_at
    due = counters["env_steps"] >= counters["next_checkpoint"]
    if not (due or at_stop):
        return False
    if due:
        counters["next_checkpoint"] += cfg.checkpoint_every
    checkpoint_now(run, replay, modules=modules, counters=counters)
    return True
