"""Who owns a run directory: the marker that proves a run wrote it, the lock one run holds on it, and
what a run does on SIGTERM.

- :data:`MARKER` (``.vlmrb-run``) is written into every run directory; it holds the run's id, which the run
  also writes into its ``config.json``. ``overwrite=true`` deletes a directory's :data:`RUN_FILES` only when
  the marker is there and its id is the one in ``config.json``: a directory no run wrote (``$HOME``, the
  current directory, a project), or one with a planted or copied marker, is refused, never emptied.
- :data:`LOCK` (``.vlmrb-run.lock``) is locked (``flock``, exclusive) for as long as a run uses the
  directory: a second process resuming or overwriting the same run is refused with the first one's pid.
  The lock goes away with the process, however it ends.
- A run that fails before its first checkpoint leaves nothing behind: the recipe releases the directory with
  ``failed=True`` (:func:`release_run_dir`), which deletes what the run wrote (and the directory, when the run
  made it), so the corrected command runs there without ``overwrite=true``.
- From :func:`make_run_dir` until the recipe releases the directory (:func:`release_run_dir`),
  SIGTERM (what schedulers send on preemption) raises :class:`Stopped` in the main thread, so the
  run unwinds like Ctrl-C: the replay, its scorer (and a scorer's child process) and the run's files
  are closed. Inside the training loop the first SIGTERM or Ctrl-C instead finishes the batch and
  writes a checkpoint (:class:`~vlmrb_torchrl.recipes.loop.Training`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from vlmrb_torchrl.recipes.checkpoint import check_resume_config, latest_checkpoint

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, runs are not locked
    fcntl = None

__all__ = ["MARKER", "LOCK", "RUN_FILES", "Stopped", "prepare_run_dir", "make_run_dir", "release_run_dir", "run_id"]

#: Written into every run directory: what proves ``overwrite=true`` may delete :data:`RUN_FILES` there.
MARKER = ".vlmrb-run"
#: Locked by the process that runs in the directory.
LOCK = ".vlmrb-run.lock"
#: What a run writes into its directory (``overwrite=true`` deletes these, nothing else).
RUN_FILES = ("config.json", "metrics.csv", "summary.json", "checkpoints", "tensorboard", "gallery")

# run directory (resolved) -> (its locked file, the SIGTERM handler to restore)
_HELD: dict[Path, tuple[Any, Any]] = {}
# the run directories make_run_dir took -> whether it made them (what a failed start deletes)
_TAKEN: dict[Path, bool] = {}
_HELD_LOCK = threading.Lock()


class Stopped(KeyboardInterrupt):
    """The run was stopped by a signal (``signum``: SIGINT or SIGTERM); raised where Ctrl-C would be.

    Examples:
        >>> err = Stopped(signal.SIGTERM, "stopped by SIGTERM")
        >>> isinstance(err, KeyboardInterrupt), err.signum == signal.SIGTERM, str(err)
        (True, True, 'stopped by SIGTERM')
    """

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message or f"stopped by {signal.Signals(signum).name}")
        self.signum = int(signum)


def _raise_stopped(signum, frame) -> None:
    raise Stopped(signum)


def _lock(out: Path, output_dir: str) -> Any:
    """Locks ``out/LOCK`` for this process (or returns the lock it already holds)."""
    from vlmrb_torchrl.recipes.config import ConfigError

    key = out.resolve()
    with _HELD_LOCK:
        if key in _HELD:
            return _HELD[key][0]
    file = open(out / LOCK, "a+")
    if fcntl is not None:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            file.seek(0)
            holder = file.read().strip() or "unknown"
            file.close()
            raise ConfigError(f"output_dir={output_dir!r} is in use by another vlmrb run ({holder}): two processes "
                              "writing one run would interleave its metrics and overwrite its checkpoints. Wait for "
                              "it to end, or choose another output_dir.") from None
    file.seek(0)
    file.truncate()
    file.write(f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    file.flush()
    handler = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        handler = signal.signal(signal.SIGTERM, _raise_stopped)
    with _HELD_LOCK:
        _HELD[key] = (file, handler)
    return file


def release_run_dir(path: str | Path, *, failed: bool = False) -> None:
    """Releases the lock this process holds on the run directory ``path`` (and restores SIGTERM's handler);
    nothing when it holds none. The recipes call it last, once everything they opened is closed.

    ``failed=True`` (the run ends with an error): when the run taken by :func:`make_run_dir` has no checkpoint
    yet, what it wrote is deleted (:data:`RUN_FILES`, :data:`MARKER`, :data:`LOCK`; the directory too when
    :func:`make_run_dir` made it), so that the corrected command is not refused as "not empty". A run with a
    checkpoint keeps everything (``resume=`` continues it).

    Examples:
        >>> import tempfile
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> cfg = DQNConfig(output_dir=str(Path(tempfile.mkdtemp()) / "run"))
        >>> prepare_run_dir(cfg, recipe="dqn"); _ = (Path(cfg.output_dir) / "metrics.csv").write_text("")
        >>> release_run_dir(cfg.output_dir, failed=True); Path(cfg.output_dir).exists()
        False
    """
    key = Path(path).resolve()
    with _HELD_LOCK:
        file, handler = _HELD.pop(key, (None, None))
        created = _TAKEN.pop(key, None)
    if failed and created is not None and not any((key / "checkpoints").glob("step_*")):
        for name in (*RUN_FILES, MARKER):  # under the lock still: no other run can be writing them
            target = key / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
    else:
        failed = False
    if file is not None:
        file.close()  # releases the flock
    if failed:
        (key / LOCK).unlink(missing_ok=True)
        if created and not any(key.iterdir()):
            key.rmdir()
    if handler is not None and threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is _raise_stopped:
        signal.signal(signal.SIGTERM, handler)


def _ours(path: Path) -> bool:
    return path.name in (MARKER, LOCK)


def _json_id(path: Path) -> str | None:
    """The ``run_id`` of the JSON object in ``path`` (a marker or a ``config.json``); ``None`` when there is none."""
    try:
        value = json.loads(path.read_text()).get("run_id")
    except (OSError, ValueError, RecursionError, AttributeError):  # missing, not JSON, not an object
        return None
    return value if isinstance(value, str) and len(value) == 32 and value.isalnum() else None


def run_id(path: str | Path) -> str | None:
    """The id of the run that wrote the run directory ``path`` (its :data:`MARKER`'s), ``None`` without one.

    Examples:
        >>> import tempfile
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> cfg = DQNConfig(output_dir=tempfile.mkdtemp())
        >>> prepare_run_dir(cfg, recipe="dqn"); len(run_id(cfg.output_dir))
        32
        >>> release_run_dir(cfg.output_dir)
    """
    return _json_id(Path(path) / MARKER)


def _written_by_its_run(out: Path, found: list[str]) -> str:
    """Why ``out``'s files cannot be proven a run's (``""``: they can): its marker's run id must be the one in
    ``config.json``; without a ``config.json`` (a start that stopped before writing it) only empty run
    directories may be there."""
    marked = run_id(out)
    if marked is None:
        return (f"its {MARKER} marker holds no run id (an empty or planted file, or a marker of a version before "
                "run ids)")
    if (out / "config.json").exists():
        written = _json_id(out / "config.json")
        return "" if written == marked else (f"its {MARKER} marker's run id {marked} is not the one in config.json "
                                             f"({written}): the marker was copied or planted")
    empty = all(name in RUN_FILES and (out / name).is_dir() and not any((out / name).iterdir()) for name in found)
    return "" if empty else f"it has no config.json to match its {MARKER} marker's run id against"


def prepare_run_dir(cfg: Any, *, recipe: str, write: bool = True) -> Path | None:
    """What a recipe does before anything else: finds the checkpoint to resume (``cfg.resume``), checks
    the config against it, and makes sure the run directory can be used; returns the checkpoint (or ``None``).

    Sets ``cfg.output_dir`` when it is ``None``: the resumed checkpoint's run directory, else
    ``runs/<recipe>__<env>__<replay>__seed<seed>__<time>``. A non-empty directory is refused (a
    :class:`~vlmrb_torchrl.recipes.config.ConfigError` naming it) unless the run resumes a checkpoint of that
    directory or ``cfg.overwrite`` is set, which deletes the old run's files (:data:`RUN_FILES`), and only
    in a directory a run wrote (:data:`MARKER`): any other directory is refused, nothing deleted.

    ``write=False`` does the checks only and writes nothing; :func:`make_run_dir` then takes the directory.
    The recipes check first, build the scorer and the envs (a bad ``scorer=`` or ``env=`` fails there, before
    anything is written, so the corrected command is not refused), then write.

    Examples:
        >>> import tempfile
        >>> from vlmrb_torchrl.recipes.config import ConfigError, DQNConfig
        >>> cfg = DQNConfig(output_dir=tempfile.mkdtemp())
        >>> prepare_run_dir(cfg, recipe="dqn") is None, sorted(p.name for p in Path(cfg.output_dir).iterdir())
        (True, ['.vlmrb-run', '.vlmrb-run.lock', 'checkpoints'])
        >>> _ = (Path(cfg.output_dir) / "config.json").write_text(json.dumps({"run_id": run_id(cfg.output_dir)}))
        >>> _ = (Path(cfg.output_dir) / "metrics.csv").write_text("env_steps\\n1000\\n")
        >>> prepare_run_dir(cfg, recipe="dqn")
        Traceback (most recent call last):
        ...
        vlmrb_torchrl.recipes.config.ConfigError: output_dir=... is not empty (...): pass overwrite=true ...
        >>> cfg.overwrite = True
        >>> prepare_run_dir(cfg, recipe="dqn"); sorted(p.name for p in Path(cfg.output_dir).iterdir())
        ['.vlmrb-run', '.vlmrb-run.lock', 'checkpoints']
        >>> release_run_dir(cfg.output_dir)
    """
    from vlmrb_torchrl.recipes.config import ConfigError

    trust = getattr(cfg, "trust_checkpoint", False)
    checkpoint = latest_checkpoint(cfg.resume, trust=trust) if cfg.resume else None
    if checkpoint is not None:
        check_resume_config(cfg, checkpoint)
        if cfg.output_dir is None:
            cfg.output_dir = str(checkpoint.parent.parent)
    elif cfg.output_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        cfg.output_dir = f"runs/{recipe}__{cfg.env.replace('/', '-')}__{cfg.replay}__seed{cfg.seed}__{stamp}"
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir={cfg.output_dir!r} is a file, not a directory.")
    continues = _continues(out, checkpoint)
    if continues and cfg.overwrite:
        raise ConfigError(f"overwrite=true with resume={cfg.resume!r} would delete the checkpoint it resumes "
                          f"({checkpoint}); drop overwrite=true to continue the run, or give another output_dir.")
    if out.is_dir():
        _check_free(out, cfg, continues=continues)
    if write:
        make_run_dir(cfg, checkpoint, recipe=recipe)
    return checkpoint


def _continues(out: Path, checkpoint: Path | None) -> bool:
    """Whether the run directory ``out`` is the one the resumed ``checkpoint`` belongs to."""
    return checkpoint is not None and out.resolve() == checkpoint.parent.parent.resolve()


def _check_room(cfg: Any, out: Path, checkpoint: Path | None, step: Any) -> None:
    """Refuses a run whose replay (``buffer_size`` transitions of ``step``'s bytes) does not fit in the memory
    available, or whose disk has not the room for its next checkpoint (and 16 MB for its logs)."""
    from vlmrb_torchrl.recipes.checkpoint import first_checkpoint_size, step_bytes
    from vlmrb_torchrl.recipes.config import ConfigError, available_memory

    needed, how = first_checkpoint_size(cfg, step, checkpoint)
    per_step = step_bytes(step)
    memory = available_memory()
    if memory is not None and cfg.buffer_size * per_step > memory:
        raise ConfigError(f"buffer_size={cfg.buffer_size} is invalid: expected at most {memory // per_step} here (its "
                          f"transitions of {per_step} bytes take {cfg.buffer_size * per_step / 1e9:.1f} GB, and "
                          f"{memory / 1e9:.1f} GB of memory is available).")
    where = next(p for p in (out, *out.absolute().parents) if p.exists())
    free = shutil.disk_usage(where).free
    if free < needed + (16 << 20):
        raise ConfigError(f"output_dir={cfg.output_dir!r}: {free / 1e6:.0f} MB free on its disk, and the next "
                          f"checkpoint needs about {needed / 1e6:.0f} MB ({how}, what the replay holds then): free "
                          "space, choose another output_dir, or lower buffer_size or checkpoint_every.")


def make_run_dir(cfg: Any, checkpoint: Path | None, *, recipe: str = "run", step: Any = None) -> None:
    """The writes of :func:`prepare_run_dir` (called with ``write=False`` first, which set ``cfg.output_dir``):
    with ``step`` (one env step's TensorDict, an env's ``fake_tensordict()``) checks that the replay fits in
    memory and the disk has room for the next checkpoint
    (:func:`~vlmrb_torchrl.recipes.checkpoint.first_checkpoint_size`), locks the directory (:data:`LOCK`; another
    process running there is refused), checks again under the lock what :func:`prepare_run_dir` checked, deletes
    an overwritten run's files (:data:`RUN_FILES`), writes :data:`MARKER`, creates ``checkpoints/`` and checks
    that it is writable. A refusal leaves the directory as it was. The lock is held until
    :func:`release_run_dir` (the recipe calls it once all it opened is closed) or the process ends.
    """
    from vlmrb_torchrl.recipes.config import ConfigError

    out = Path(cfg.output_dir)
    if step is not None:
        _check_room(cfg, out, checkpoint, step)
    created = not out.exists()
    had_lock = (out / LOCK).exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        _lock(out, cfg.output_dir)
    except OSError as err:
        raise ConfigError(f"output_dir={cfg.output_dir!r}: cannot write checkpoints in {out / 'checkpoints'} "
                          f"({err.strerror or err}); fix its permissions or choose another output_dir.") from None
    try:
        _take(out, cfg, continues=_continues(out, checkpoint), recipe=recipe)
        with _HELD_LOCK:
            _TAKEN[out.resolve()] = created
    except BaseException:
        release_run_dir(out)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        elif not had_lock:
            (out / LOCK).unlink(missing_ok=True)  # leave a directory that was refused as it was
        raise


def _check_free(out: Path, cfg: Any, *, continues: bool, held: bool = False) -> list[str]:
    """Refuses a directory ``out`` that holds files, unless the run continues there or overwrites a run's files;
    returns what it holds. ``held``: this process has just locked ``out`` for the run (:func:`_take`)."""
    from vlmrb_torchrl.recipes.config import ConfigError

    found = sorted(p.name for p in out.iterdir() if not _ours(p))
    if found and not continues:
        live = not held and _in_use(out)
        if not cfg.overwrite and not live and _killed_before_its_first_row(out, found):
            return found  # what a killed start left: nothing to resume or read, taken as overwrite=true takes it
        if not cfg.overwrite:
            stopped = "" if live or _has_checkpoint(out) or not (out / MARKER).is_file() else (
                " (the run that wrote it stopped before its first checkpoint: there is nothing to resume)")
            raise ConfigError(
                f"output_dir={cfg.output_dir!r} is not empty ({', '.join(found[:6])}){stopped}: pass overwrite=true to "
                f"delete that run's files and start again, resume={cfg.output_dir} to continue it, or choose another "
                "output_dir.")
        if not (out / MARKER).is_file():
            raise ConfigError(
                f"output_dir={cfg.output_dir!r} holds files no vlmrb run wrote ({', '.join(found[:6])}; no {MARKER} "
                "marker there): overwrite=true deletes only a run's own files, so nothing was deleted. Choose "
                "another output_dir, or delete the old files yourself (a run directory of a version before markers "
                "existed has none).")
        why = _written_by_its_run(out, found)
        if why:
            raise ConfigError(
                f"output_dir={cfg.output_dir!r}: overwrite=true deletes only a run's own files, and {why}; nothing was "
                f"deleted. Choose another output_dir, or delete the old files yourself.")
    return found


def _in_use(out: Path) -> bool:
    """Whether a live run holds ``out``'s :data:`LOCK` (this process, or another: a lock left by a dead run holds
    nothing)."""
    with _HELD_LOCK:
        if out.resolve() in _HELD:
            return True
    if fcntl is None or not (out / LOCK).is_file():
        return False
    with open(out / LOCK, "a+") as file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)
    return False


def _has_checkpoint(out: Path) -> bool:
    """Whether ``out/checkpoints`` holds a complete checkpoint (one with its ``DONE``)."""
    return any((step / "DONE").is_file() for step in (out / "checkpoints").glob("step_*"))


def _killed_before_its_first_row(out: Path, found: list[str]) -> bool:
    """Whether ``out`` holds only what a run writes at its start, left by a run killed (``kill -9``, the machine
    stopped) before it logged a metrics row or wrote a checkpoint: its own files (:data:`RUN_FILES`, proven by its
    marker), no complete checkpoint, at most the header in ``metrics.csv``. A run that fails in Python deletes
    these itself (:func:`release_run_dir`); a killed one cannot, and the same command must still just work."""
    if not set(found) <= set(RUN_FILES) or not (out / MARKER).is_file() or _written_by_its_run(out, found):
        return False
    if _has_checkpoint(out):
        return False
    metrics = out / "metrics.csv"
    if metrics.is_file():
        with metrics.open("rb") as file:
            return sum(1 for line in file if line.strip()) <= 1  # (TensorBoard logs what metrics.csv does)
    return True


def _take(out: Path, cfg: Any, *, continues: bool, recipe: str) -> None:
    """Checks a locked ``out`` is free to use (empty, the resumed run's, or a run's to overwrite), marks and probes it."""
    from vlmrb_torchrl.recipes.config import ConfigError

    if _check_free(out, cfg, continues=continues, held=True) and not continues:
        for name in RUN_FILES:
            target = out / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
    try:
        if not continues or run_id(out) is None:  # a new run (or one resumed from before run ids): a new id
            (out / MARKER).write_text(json.dumps({
                "recipe": recipe, "run_id": uuid.uuid4().hex, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                "note": "written by vlmrb: overwrite=true may delete the files of the run whose config.json has this "
                        "run_id"}) + "\n")
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out / "checkpoints", prefix=".write_test"):
            pass
    except OSError as err:
        raise ConfigError(f"output_dir={cfg.output_dir!r}: cannot write checkpoints in {out / 'checkpoints'} "
                          f"({err.strerror or err}); fix its permissions or choose another output_dir.") from None
