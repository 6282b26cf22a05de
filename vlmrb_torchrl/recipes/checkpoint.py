"""Checkpoints and resume: writing a verified checkpoint, finding and checking the one to resume,
loading it back, and the counters a resumed run continues from.

A checkpoint is a directory ``checkpoints/step_<env_steps>`` holding ``state.pt`` (the modules'
state dicts, counters, RNG states), ``config.json`` (the run's config), ``replay/`` (the filled
part of the replay buffer, :mod:`~vlmrb_torchrl.recipes.replay_checkpoint`), ``DONE`` and
:data:`MANIFEST` (sizes and SHA-256 of every file), written into a hidden ``.partial`` directory
and renamed into place.

Resuming loads no pickle: ``state.pt`` and ``replay/replay.pt`` are read with
``torch.load(weights_only=True)`` (tensors, numbers, strings, containers), so a checkpoint from
someone else cannot run code. A checkpoint written by an older version (pickled RNG states,
TorchRL's ``rb.dumps`` with its pickled prefetch queue) or without a manifest is refused unless the
run passes ``trust_checkpoint=true``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import shutil
import warnings
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

__all__ = [
    "MANIFEST", "CheckpointError", "RunWarning", "check_checkpoint", "checkpointed_modules", "save_checkpoint",
    "load_checkpoint", "checkpoints_newest_first", "latest_checkpoint", "truncate_metrics", "resume_counters",
    "checkpoint_now", "maybe_checkpoint", "RESUME_MAY_CHANGE", "check_resume_config", "DivergedError",
    "check_finite_state", "first_checkpoint_size", "step_bytes",
]

#: Written last into every checkpoint (then the directory is renamed into place): each file's size and SHA-256.
MANIFEST = "MANIFEST.json"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or used; the message names the file and what to do."""


class RunWarning(UserWarning):
    """Something a run did differently from the normal path: a skipped checkpoint, clips saved unscored, ..."""


class DivergedError(RuntimeError):
    """The learner's loss or weights became NaN or infinite: the run stops, and no checkpoint of them is written."""


_TRUST_HINT = ("resume with trust_checkpoint=true only if you trust where it came from (loading it unpickles "
               "Python objects, which can run code)")


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _manifest(path: Path) -> dict[str, Any]:
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != MANIFEST)
    return {"format": 1, "files": {p.relative_to(path).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
                                   for p in files}}


def check_checkpoint(path: Path, *, trust: bool = False) -> tuple[bool, str]:
    """Whether the checkpoint directory ``path`` can be loaded, and a note: why not, or that it cannot be verified.

    A checkpoint is usable when its ``DONE`` marker exists and every file its ``MANIFEST.json`` lists has the
    recorded size and SHA-256. One without a manifest (written before checkpoints were verified, or with the
    manifest deleted) cannot be verified: refused unless ``trust`` (``trust_checkpoint=true``).

    Examples:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp())
        >>> check_checkpoint(path)
        (False, 'incomplete: no DONE file (its write did not finish)')
        >>> _ = (path / "DONE").write_text("{}")
        >>> check_checkpoint(path)
        (False, 'no MANIFEST.json: its files cannot be verified; resume with trust_checkpoint=true to use it anyway')
        >>> check_checkpoint(path, trust=True)
        (True, 'no MANIFEST.json: its files cannot be verified (used: trust_checkpoint=true)')
        >>> _ = (path / MANIFEST).write_text(json.dumps(_manifest(path)))
        >>> check_checkpoint(path)
        (True, '')
        >>> _ = (path / "DONE").write_text("{} ")
        >>> check_checkpoint(path)
        (False, 'DONE has 3 bytes, 2 were written')
    """
    path = Path(path)
    if not (path / "DONE").exists():
        return False, "incomplete: no DONE file (its write did not finish)"
    if not (path / MANIFEST).exists():
        if trust:
            return True, f"no {MANIFEST}: its files cannot be verified (used: trust_checkpoint=true)"
        return False, (f"no {MANIFEST}: its files cannot be verified; resume with trust_checkpoint=true to use it "
                       "anyway")
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
        if not isinstance(files, dict) or not all(
                isinstance(meta, dict) and isinstance(meta.get("size"), int) and isinstance(meta.get("sha256"), str)
                and ".." not in Path(name).parts for name, meta in files.items()):
            raise ValueError("not a manifest of files, sizes and SHA-256 digests")
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
        return False, f"{MANIFEST} is unreadable ({type(err).__name__}: {str(err)[:200]})"
    for name, meta in files.items():
        file = path / name
        if not file.is_file():
            return False, f"{name} is missing"
        size = file.stat().st_size
        if size != meta["size"]:
            return False, f"{name} has {size} bytes, {meta['size']} were written"
        if _sha256(file) != meta["sha256"]:
            return False, f"{name} changed since it was written (SHA-256 mismatch)"
    return True, ""


def checkpointed_modules(modules: dict[str, Any], scorer: Any = None) -> dict[str, Any]:
    """``modules`` plus the scorer under ``"scorer"`` when it learns while it scores (``scorer.stateful``,
    e.g. a :class:`~vlmrb_torchrl.scorers.DistilledScorer`'s student): saved with every checkpoint and
    restored on resume like the learner's networks. Other scorers are frozen and not saved.

    Examples:
        >>> from torch import nn
        >>> from vlmrb_torchrl.scorers import CallableScorer
        >>> sorted(checkpointed_modules({"loss": nn.Linear(1, 1)}, CallableScorer(lambda clips: clips["obs"])))
        ['loss']
    """
    if scorer is not None and getattr(scorer, "stateful", False):
        return {**modules, "scorer": scorer}
    return dict(modules)


def check_finite_state(state: Any, where: str) -> None:
    """Raises :class:`DivergedError` naming the first NaN or infinite floating-point tensor in ``state``
    (nested dicts and lists, e.g. a module's or an optimizer's ``state_dict()``).

    Examples:
        >>> check_finite_state({"w": torch.ones(2), "opt": {"state": {0: {"v": torch.zeros(1)}}}}, "loss")
        >>> check_finite_state({"layer": {"bias": torch.tensor([0.0, float("nan")])}}, "loss")
        Traceback (most recent call last):
        ...
        vlmrb_torchrl.recipes.checkpoint.DivergedError: loss: layer.bias holds NaN or infinite values ...
    """
    def visit(value: Any, name: str) -> None:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise DivergedError(f"{where}: {name} holds NaN or infinite values (the learner diverged: lower lr, "
                                    "check rewards and observations); they are not checkpointed.")
        elif isinstance(value, dict):
            for key, item in value.items():
                visit(item, f"{name}.{key}" if name else str(key))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                visit(item, f"{name}[{i}]")

    visit(state, "")


def _rng_state() -> dict[str, Any]:
    """The global RNG states as tensors, numbers and strings (what ``torch.load(weights_only=True)`` reads)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {"torch": torch.get_rng_state(),
            "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
            "python": [version, list(internal), gauss_next]}


def _set_rng_state(rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    numpy_state = rng["numpy"]
    if isinstance(numpy_state, dict):
        np.random.set_state((numpy_state["name"], numpy_state["keys"].numpy().astype(np.uint32), numpy_state["pos"],
                             numpy_state["has_gauss"], numpy_state["cached_gaussian"]))
    else:  # a checkpoint of an older version (loaded with trust_checkpoint=true)
        np.random.set_state(numpy_state)
    version, internal, gauss_next = rng["python"]
    random.setstate((version, tuple(internal), gauss_next))


def save_checkpoint(path: Path, *, modules: dict[str, Any], rb: Any, counters: dict[str, Any],
                    config: dict[str, Any] | None = None) -> None:
    """Model/optimizer states, counters, RNG states, the run's ``config`` and the replay buffer
    (:func:`~vlmrb_torchrl.recipes.replay_checkpoint.save_replay`: its filled slots, compact).

    The checkpoint is written into ``.<name>.partial`` next to ``path``, with ``DONE`` and then
    :data:`MANIFEST` (sizes and SHA-256 of every file) last, and renamed to ``path``: a crash or a full
    disk mid-write never leaves a directory that looks complete. Any failure to write (a full disk, a
    read-only directory, an error of the storage's own writer) removes the partial write and raises
    :class:`CheckpointError` naming the checkpoint and the cause. NaN or infinite weights are never
    written: :class:`DivergedError` instead.
    """
    from vlmrb_torchrl.recipes.replay_checkpoint import save_replay

    path = Path(path)
    tmp = path.parent / f".{path.name}.partial"
    state = {name: obj.state_dict() for name, obj in modules.items()}
    for name, value in state.items():
        check_finite_state(value, f"checkpoint {path}: {name!r}")
    try:
        if tmp.exists():  # a write killed earlier
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        state["counters"] = counters
        state["rng"] = _rng_state()
        torch.save(state, tmp / "state.pt")
        if config is not None:
            (tmp / "config.json").write_text(json.dumps(config, indent=2))
        save_replay(rb, tmp / "replay")
        (tmp / "DONE").write_text(json.dumps(counters))
        _write_json_atomic(tmp / MANIFEST, _manifest(tmp))  # last: sizes and checksums of all the above
        if path.exists():  # the same step written again: replace it
            old = path.parent / f".{path.name}.old"
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, Exception):  # a full disk is an OSError, or a RuntimeError from a memmap resize, ...
            cause = (str(err).strip().splitlines() or [""])[0][:300]
            raise CheckpointError(f"could not write checkpoint {path}: {type(err).__name__}: {cause}. Nothing of it "
                                  f"was kept; earlier checkpoints in {path.parent} are untouched (free space or fix "
                                  "permissions, then resume= the run directory).") from err
        raise  # KeyboardInterrupt, SystemExit


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.rename(path)


def _check_loaded_replay(rb: Any, path: Path) -> None:
    """Refuses a loaded replay buffer whose sampler state is not finite or does not match the storage."""
    n = len(rb)
    sampler = rb.sampler
    where = path / "replay" / "sampler"
    if callable(getattr(sampler, "stats", None)) and callable(getattr(sampler, "scores", None)):  # VLM-RB's sampler
        stats = sampler.stats()
        if stats["num_filled"] != n:
            raise CheckpointError(f"{where}: the sampler records {stats['num_filled']} filled slots but the "
                                  f"storage ({path / 'replay' / 'storage'}) holds {n} transitions.")
        if n:
            scores = sampler.scores(torch.arange(n))
            if torch.isinf(scores).any() or (stats["fraction_scored"] > 0 and not math.isfinite(stats["mean_score"])):
                raise CheckpointError(f"{where}: non-finite VLM scores.")
            probs = sampler.probabilities(n)
            if not bool(torch.isfinite(probs).all()) or bool((probs < 0).any()) or abs(float(probs.sum()) - 1) > 1e-3:
                raise CheckpointError(f"{where}: the sampling probabilities are not finite (NaN or infinite "
                                      "scores or TD priorities).")
    else:
        tree = getattr(sampler, "_sum_tree", None)  # TorchRL's PrioritizedSampler
        if tree is not None and n:
            total = float(tree.query(0, n))
            if not math.isfinite(total) or total <= 0:
                raise CheckpointError(f"{where}: the priorities are not finite (sum {total}).")


def load_checkpoint(path: Path, *, modules: dict[str, Any], rb: Any, trust: bool = False) -> dict[str, Any]:
    """Loads a :func:`save_checkpoint` directory into ``modules`` and ``rb``, restores the RNG states and
    returns the counters.

    Nothing is unpickled: ``state.pt`` and the replay are read with ``torch.load(weights_only=True)``. A
    checkpoint that needs more (one written by an older version) is refused with :class:`CheckpointError`
    unless ``trust`` (``trust_checkpoint=true``), which loads it as before: ``torch.load(weights_only=False)``
    and TorchRL's ``rb.loads``. An unreadable file raises :class:`CheckpointError` naming it; so does a
    sampler state that is not finite or does not match the storage.
    """
    from vlmrb_torchrl.recipes.replay_checkpoint import load_replay

    path = Path(path)
    try:
        state = torch.load(path / "state.pt", weights_only=not trust, map_location="cpu")
        counters, rng = state["counters"], state["rng"]
    except Exception as err:
        if not trust and "weights_only" in str(err):
            raise CheckpointError(f"{path / 'state.pt'} holds pickled Python objects (a checkpoint of an older "
                                  f"version, or not written by vlmrb): {_TRUST_HINT}.") from err
        raise CheckpointError(f"{path / 'state.pt'} cannot be read: {type(err).__name__}: {err}") from err
    new_replay = (path / "replay" / "replay.json").exists()
    if not new_replay and not trust:
        raise CheckpointError(f"{path / 'replay'} was written by TorchRL's rb.dumps (an older version), whose "
                              f"prefetch.pkl is a pickle: {_TRUST_HINT}.")
    for file in sorted((path / "replay").rglob("*.json")):  # name the file a truncated JSON is in
        try:
            json.loads(file.read_text())
        except (OSError, ValueError, RecursionError) as err:
            raise CheckpointError(f"{file} cannot be read: {type(err).__name__}: {str(err)[:200]}") from err
    for name, obj in modules.items():
        if name not in state and getattr(obj, "checkpoint_optional", False):
            continue  # saved with checkpoints only since a later version: it starts afresh
        try:
            obj.load_state_dict(state[name])
        except Exception as err:
            raise CheckpointError(f"{path / 'state.pt'}: {name!r} does not fit this run's {name} "
                                  f"({type(err).__name__}: {err}).") from err
    try:
        load_replay(rb, path / "replay") if new_replay else rb.loads(path / "replay")
    except Exception as err:
        if not trust and "weights_only" in str(err):
            raise CheckpointError(f"{path / 'replay' / 'replay.pt'} holds pickled Python objects: "
                                  f"{_TRUST_HINT}.") from err
        raise CheckpointError(f"{path / 'replay'} cannot be loaded: {type(err).__name__}: {err}") from err
    _check_loaded_replay(rb, path)
    _set_rng_state(rng)
    return counters


def first_checkpoint_size(cfg: Any, step: Any, checkpoint: Path | None = None) -> tuple[int, str]:
    """``(bytes, how)``: about what the run's next checkpoint writes, at least — the transitions the replay holds
    then (``min(buffer_size, frames)``, ``frames`` the run's frames at that checkpoint: ``checkpoint_every`` after
    ``checkpoint``'s, or the run's end if sooner) times the bytes of ``step``, one env step's TensorDict (an env's
    ``fake_tensordict()``: every entry, ``next`` included). What :func:`~vlmrb_torchrl.recipes.run_dir.make_run_dir`
    checks the disk for before the run starts, so a full disk is found then, not after the training is done.

    Examples:
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.recipes.config import DQNConfig
        >>> step = TensorDict(observation=torch.zeros(148, dtype=torch.int16), next={"observation": torch.zeros(
        ...     148, dtype=torch.int16)})
        >>> first_checkpoint_size(DQNConfig(checkpoint_every=50_000, buffer_size=100_000), step)
        (29600000, '50000 transitions of 592 bytes')
    """
    done = _step(checkpoint) if checkpoint is not None else 0
    frames = min(done + cfg.checkpoint_every, cfg.total_frames, cfg.stop_at or cfg.total_frames)
    rows = min(cfg.buffer_size, max(frames, 0))
    per_step = step_bytes(step)
    return rows * per_step, f"{rows} transitions of {per_step} bytes"


def step_bytes(step: Any) -> int:
    """The bytes of every tensor of ``step`` (a TensorDict, nested entries included): what one stored transition
    weighs, at most (a checkpoint stores it in its smallest lossless dtypes).

    Examples:
        >>> from tensordict import TensorDict
        >>> step_bytes(TensorDict(observation=torch.zeros(148, dtype=torch.int16), next={"reward": torch.zeros(1)}))
        300
    """
    return sum(value.numel() * value.element_size() for value in step.values(True, True)
               if isinstance(value, torch.Tensor))


def _step(path: Path) -> int:
    try:
        return int(path.name.split("_", 1)[1])
    except (IndexError, ValueError):
        return -1


def checkpoints_newest_first(resume: str | Path) -> list[Path]:
    """``resume`` itself when it is a checkpoint, else its run's ``checkpoints/step_<N>`` directories, newest first."""
    path = Path(resume)
    if (path / "DONE").exists() or (path / "state.pt").exists():
        return [path]
    return sorted((p for p in (path / "checkpoints").glob("step_*") if p.is_dir() and _step(p) >= 0),
                  key=_step, reverse=True)


def latest_checkpoint(resume: str, *, trust: bool = False) -> Path:
    """``resume`` itself when it is a checkpoint, else the run directory's newest intact checkpoint.

    Checkpoints are checked with :func:`check_checkpoint` (``trust``: one without a manifest is used);
    those skipped are named, with the reason, in a :class:`RunWarning`. Raises
    :class:`~vlmrb_torchrl.recipes.config.ConfigError` when ``resume`` does not exist and
    :class:`CheckpointError` when no checkpoint is usable.
    """
    from vlmrb_torchrl.recipes.config import ConfigError

    path = Path(resume)
    if not path.exists():
        raise ConfigError(f"resume={str(resume)!r}: no such file or directory.")
    candidates = checkpoints_newest_first(path)
    explicit = candidates == [path]
    skipped = []
    for candidate in candidates:
        ok, note = check_checkpoint(candidate, trust=trust)
        if ok:
            if skipped:
                warnings.warn(_skipped_message(skipped) + f"; resuming from {candidate}.", RunWarning, stacklevel=2)
            if note:
                warnings.warn(f"checkpoint {candidate}: {note}.", RunWarning, stacklevel=2)
            return candidate
        if explicit:
            raise CheckpointError(f"resume={str(resume)!r}: checkpoint {candidate} cannot be used: {note}. Resume "
                                  "from its run directory to use the newest intact checkpoint instead.")
        skipped.append((candidate, note))
    if skipped:
        raise CheckpointError(f"resume={str(resume)!r}: no intact checkpoint; " + _skipped_message(skipped) + ".")
    raise CheckpointError(f"resume={str(resume)!r}: no checkpoint found (looked for {path}/checkpoints/step_*).")


def _skipped_message(skipped: list[tuple[Path, str]]) -> str:
    return "skipped " + "; ".join(f"{p} ({note})" for p, note in skipped)


def truncate_metrics(path: Path, env_steps: int) -> None:
    """Drops the metric rows logged after the checkpoint a run resumes from."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    # a last line without its newline was cut mid-write (the process killed): the next row would join it
    kept = lines[:1] + [ln for ln in lines[1:] if ln.endswith("\n") and _row_step(ln) <= env_steps]
    path.write_text("".join(kept))


def _row_step(line: str) -> float:
    try:
        return float(line.split(",", 1)[0])
    except ValueError:  # not a row (a damaged line)
        return math.inf


def resume_counters(cfg: Any, checkpoint: Path | None, *, modules: dict[str, Any], rb: Any) -> dict[str, Any]:
    """Fresh counters, or those of ``checkpoint`` after loading its modules and replay (``rb``) into place.

    Counters always hold ``scorer_drain_timeouts`` (checkpoints whose scorer drain timed out),
    ``scorer_unscored_at_checkpoint`` (clips still queued when the last checkpoint was written: saved
    unscored) and ``scorer_unscored_lost`` (such clips of the checkpoint a run resumed from, never scored:
    the scorer's queue is not part of a checkpoint).
    """
    counters = {"env_steps": 0, "episodes": 0, "updates": 0, "next_eval": cfg.eval_every,
                "next_checkpoint": cfg.checkpoint_every}
    if checkpoint is not None:
        counters = load_checkpoint(checkpoint, modules=modules, rb=rb, trust=getattr(cfg, "trust_checkpoint", False))
        if cfg.output_dir is None:  # continue in the run directory the checkpoint belongs to
            cfg.output_dir = str(checkpoint.parent.parent)
        truncate_metrics(Path(cfg.output_dir) / "metrics.csv", counters["env_steps"])
    for key in _UNSCORED_COUNTERS:
        counters.setdefault(key, 0)
    if counters["scorer_unscored_at_checkpoint"]:
        counters["scorer_unscored_lost"] += counters["scorer_unscored_at_checkpoint"]
        warnings.warn(f"{checkpoint}: {counters['scorer_unscored_at_checkpoint']} clips were still queued for "
                      "scoring when it was written; their transitions keep the unscored priority (the queue is "
                      "not part of a checkpoint).", RunWarning, stacklevel=2)
    return counters


class RunDir(Protocol):
    """What a checkpoint needs of its run: the run directory (:class:`~vlmrb_torchrl.recipes.run.Run` is one; a
    protocol, so that this module does not import the run's, which imports it)."""

    dir: Path


_UNSCORED_COUNTERS = ("scorer_drain_timeouts", "scorer_unscored_at_checkpoint", "scorer_unscored_lost")


def checkpoint_now(run: RunDir, replay: Any, *, modules: dict[str, Any], counters: dict[str, Any],
                   cfg: Any = None) -> Path:
    """Saves ``checkpoints/step_<env_steps>`` (with ``cfg``, the run's config) after
    ``replay.before_checkpoint()`` (in VLM modes: every score of the data before it is in, waiting at
    most the replay's drain timeout) and returns its path.

    Clips the scorer has not scored by then are saved unscored: counted in
    ``counters["scorer_unscored_at_checkpoint"]`` (``scorer_drain_timeouts`` counts such checkpoints)
    and reported in a :class:`RunWarning`. A ``KeyboardInterrupt`` while waiting stops the wait: the
    checkpoint is written as it is, then the interrupt goes on.
    """
    interrupted = False
    try:
        left = replay.before_checkpoint()
    except KeyboardInterrupt:
        interrupted, left = True, replay.backlog()
    counters.setdefault("scorer_drain_timeouts", 0)
    counters["scorer_unscored_at_checkpoint"] = left
    path = run.dir / "checkpoints" / f"step_{counters['env_steps']}"
    if left:
        counters["scorer_drain_timeouts"] += 1
        timeout = getattr(replay, "drain_timeout", None)
        why = "interrupted" if interrupted else f"not done within scorer_drain_timeout={timeout} s"
        warnings.warn(f"{path}: the scorer was {why}; {left} queued clips are saved unscored (their transitions "
                      "keep the unscored priority; a run resumed from this checkpoint never scores them).",
                      RunWarning, stacklevel=2)
    save_checkpoint(path, modules=modules, rb=replay.buffer, counters=dict(counters),
                    config=None if cfg is None else _config_dict(cfg))
    if interrupted:
        raise KeyboardInterrupt
    return path


def maybe_checkpoint(run: RunDir, replay: Any, *, cfg: Any, counters: dict[str, Any], stop_at: int,
                     modules: dict[str, Any]) -> Path | None:
    """Checkpoints when one is due (every ``checkpoint_every`` frames) or the run stops here
    (``stop_at``); returns the checkpoint's path, ``None`` when none was due.

    The loop leaves its collector after every checkpoint and, unless the run stops, re-creates it,
    so that env seeds restart from ``(seed, env_steps)`` exactly as in a run resumed from that
    checkpoint.
    """
    at_stop = counters["env_steps"] >= stop_at
    due = counters["env_steps"] >= counters["next_checkpoint"]
    if not (due or at_stop):
        return None
    if due:
        counters["next_checkpoint"] += cfg.checkpoint_every
    return checkpoint_now(run, replay, modules=modules, counters=counters, cfg=cfg)


# ---------------------------------------------------------------------------------- run directory checks
#: Keys that may differ between a run and the run it resumes: how long it runs, where and how it logs,
#: evaluates and checkpoints, the device and threads. Every other key must match the checkpoint's run.
RESUME_MAY_CHANGE = ("total_frames", "stop_at", "resume", "output_dir", "overwrite", "trust_checkpoint", "device",
                     "torch_threads",
                     "async_scoring", "scorer_drain_timeout", "on_scorer_error", "max_consecutive_scorer_errors",
                     "scorer_backend", "scorer_workers", "scorer_gpus", "ray_address", "frames_from_state",
                     "eval_every", "eval_episodes", "eval_envs", "eval_eps", "eval_full_every",
                     "checkpoint_every", "gallery_clips", "gallery_steps", "tensorboard", "progress")


def _config_dict(cfg: Any) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def check_resume_config(cfg: Any, checkpoint: Path) -> None:
    """Refuses to resume ``checkpoint`` with a config that differs from the one it was written with in a key
    outside :data:`RESUME_MAY_CHANGE`; the error lists each such key (saved vs given).

    The saved config is the checkpoint's own ``config.json`` (covered by its manifest, so a hand-edited
    run ``config.json`` — which the command line reads back on resume — shows up as a difference); a
    checkpoint of an older version has none, and its run's ``config.json`` is used. Keys the saved
    config does not have (added since) are not compared; keys renamed since are compared under their new
    names (:data:`~vlmrb_torchrl.recipes.config.RENAMED_KEYS`).
    """
    from vlmrb_torchrl.recipes.config import ConfigError, upgrade_keys

    run_config = checkpoint.parent.parent / "config.json"
    saved_path = checkpoint / "config.json" if (checkpoint / "config.json").exists() else run_config
    try:
        saved = json.loads(saved_path.read_text())
        if not isinstance(saved, dict):
            raise ValueError(f"a JSON {type(saved).__name__}, not an object of key: value pairs")
        saved = upgrade_keys(saved, quiet=True)  # a run of an older version: its key names
    except (OSError, ValueError, RecursionError) as err:
        warnings.warn(f"{saved_path} cannot be read ({type(err).__name__}: {str(err)[:200]}): the config cannot be "
                      f"checked against the run {checkpoint} belongs to.", RunWarning, stacklevel=2)
        return
    given = _config_dict(cfg)
    conflicts = [f"{key}: {saved[key]!r} (checkpoint) vs {value!r} (now)" for key, value in given.items()
                 if key not in RESUME_MAY_CHANGE and key in saved and saved[key] != value]
    if conflicts:
        edited = ""
        if saved_path != run_config and run_config.exists():
            try:
                run_saved = json.loads(run_config.read_text())
            except (OSError, ValueError, RecursionError):
                run_saved = {}
            run_saved = upgrade_keys(run_saved, quiet=True) if isinstance(run_saved, dict) else {}
            if any(run_saved.get(k) != saved[k] for k in saved if k not in RESUME_MAY_CHANGE and k in run_saved):
                edited = f" ({run_config} no longer matches the checkpoint's config: edited since the run wrote it?)"
        raise ConfigError(f"resume={cfg.resume!r}: the config differs from the one {checkpoint} was written with "
                          f"({saved_path}) in " + "; ".join(conflicts) + f"{edited}. On resume only these keys may "
                          f"change: {', '.join(RESUME_MAY_CHANGE)}. Start a new run (another output_dir) to change "
                          "the others.")
