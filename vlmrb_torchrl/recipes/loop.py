"""The machinery the recipes' collect -> store -> learn loops share: collector lifetimes, frame and
update counters, metric rows, evaluation, progress and checkpoints."""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
from tensordict import TensorDictBase

from vlmrb_torchrl.recipes.evaluate import maybe_evaluate
from vlmrb_torchrl.recipes.replay import Replay
from vlmrb_torchrl.recipes.checkpoint import DivergedError, maybe_checkpoint
from vlmrb_torchrl.recipes.run import Run
from vlmrb_torchrl.recipes.run_dir import Stopped

__all__ = ["Training", "EpisodeTracker", "fmt"]


def fmt(value) -> str | None:
    """Progress-bar number: 3 significant digits, None for missing/NaN.

    Examples:
        >>> fmt(0.123456), fmt(float("nan")), fmt(None)
        ('0.123', None, None)
    """
    return None if value is None or value != value else f"{value:.3g}"


def _replaceable_handler(current) -> bool:
    """Whether a run may take over a signal whose handler is ``current``: the interpreter's defaults, the
    run's own SIGTERM handler, and the one ``ray.init`` installs (it only exits, and stays after
    ``ray.shutdown``: a run with the Ray scorer backend must still checkpoint on SIGTERM). A handler the
    user installed stays.

    Examples:
        >>> import signal
        >>> _replaceable_handler(signal.SIG_DFL), _replaceable_handler(lambda signum, frame: None)
        (True, False)
    """
    if current is signal.default_int_handler or current == signal.SIG_DFL:
        return True
    module = getattr(current, "__module__", None)
    return module == "vlmrb_torchrl.recipes.run_dir" or (
        module == "ray._private.worker" and getattr(current, "__qualname__", "").endswith("sigterm_handler"))


class EpisodeTracker:
    """The training episodes that end between two metrics rows: how many, how many succeeded, how long they were.

    :meth:`add` reads each collector batch's ``("next", "done")`` and, when the env writes it,
    ``("next", "success")`` (an episode succeeded when any of its steps did), keeping each env
    copy's running episode length across batches; :meth:`reset` forgets the running episodes when
    a new collector starts (its envs start new ones: after every checkpoint, in the uninterrupted
    run too). Sums go to the counters (``train_window_*``, saved in checkpoints, so a resumed run
    logs the same rows); :meth:`row` gives the metrics row's ``train_success`` (the share of those
    episodes that succeeded; absent when the env writes no ``success``) and ``train_episode_len``
    (their mean length in steps), and :meth:`logged` starts the next window.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> tracker, counters = EpisodeTracker(), dict.fromkeys(EpisodeTracker.COUNTERS, 0)
        >>> done = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 1]], dtype=torch.bool).unsqueeze(-1)
        >>> success = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool).unsqueeze(-1)
        >>> tracker.add(TensorDict({"next": {"done": done, "success": success}}, [2, 4]), counters)
        >>> EpisodeTracker.row(counters)  # env 0 ended a 2-step success, env 1 a 4-step failure
        {'train_success': 0.5, 'train_episode_len': 3.0}
        >>> tracker.add(TensorDict({"next": {"done": done.roll(1, 1), "success": success}}, [2, 4]), counters)
        >>> counters["train_window_episode_steps"]  # env 0 ran 2 + 3 steps, env 1 ended after 1
        12
    """

    COUNTERS = ("train_window_episodes", "train_window_successes", "train_window_episode_steps",
                "train_window_has_success")

    def __init__(self) -> None:
        self._steps: torch.Tensor | None = None
        self._success: torch.Tensor | None = None

    def reset(self) -> None:
        self._steps = self._success = None

    def add(self, batch: TensorDictBase, counters: dict[str, Any]) -> None:
        done = batch.get(("next", "done")).reshape(-1, batch.shape[-1]) if batch.ndim else None
        if done is None:
            return
        success = batch.get(("next", "success"), None)
        if success is not None:
            success = success.reshape(done.shape)
            counters["train_window_has_success"] = 1
        envs, steps = done.shape
        if self._steps is None or self._steps.numel() != envs:
            self._steps = torch.zeros(envs, dtype=torch.long)
            self._success = torch.zeros(envs, dtype=torch.bool)
        ends = done.nonzero().tolist()  # (env, step) pairs, in order of env then step
        start = {}  # env -> step its current episode started at (within this batch)
        for env, step in ends:
            first = start.get(env, 0)
            length = step + 1 - first + (int(self._steps[env]) if env not in start else 0)
            succeeded = (env not in start and bool(self._success[env])) or (
                success is not None and bool(success[env, first:step + 1].any()))
            counters["train_window_episodes"] += 1
            counters["train_window_episode_steps"] += length
            counters["train_window_successes"] += int(succeeded)
            start[env] = step + 1
        for env in range(envs):
            first = start.get(env)
            if first is None:  # no episode ended: the running one goes on
                self._steps[env] += steps
                if success is not None:
                    self._success[env] |= bool(success[env].any())
            else:
                self._steps[env] = steps - first
                self._success[env] = success is not None and bool(success[env, first:].any())

    @staticmethod
    def row(counters: dict[str, Any]) -> dict[str, float]:
        episodes = counters.get("train_window_episodes", 0)
        if not episodes:
            return {}
        out = {"train_success": counters["train_window_successes"] / episodes} \
            if counters.get("train_window_has_success") else {}
        out["train_episode_len"] = counters["train_window_episode_steps"] / episodes
        return out

    @staticmethod
    def logged(counters: dict[str, Any]) -> None:
        for key in EpisodeTracker.COUNTERS[:3]:
            counters[key] = 0


class Training:
    """Drives a recipe's loop; the recipe writes the loop body (store, gradient steps, its metrics).

    .. code-block:: python

        with Training(cfg, ...) as training:
            for batch in training.batches():            # counts frames and episodes
                replay.store(batch, batch)
                for sample in training.samples(batch):  # cfg.updates_for(frames) once learning started
                    ...                                 # one gradient step on `sample`
                training.end_batch({"loss": loss_value}, show=["loss"])

    :meth:`batches` creates the collector for the frames left and, after every checkpoint, leaves
    it and creates a new one seeded from ``(seed, env_steps)`` — exactly what a run resumed from
    that checkpoint does — until ``stop_at`` (or ``total_frames``) frames are collected.
    :meth:`samples` draws the learner's batches, hands their TD errors back to the replay after
    each gradient step and, once all are done, syncs the collector's policy weights.
    :meth:`end_batch` logs the metrics row when an evaluation is due (every ``eval_every`` frames
    and at the end), advances the progress bar and checkpoints when one is due.

    Ctrl-C (SIGINT) and SIGTERM (a scheduler's preemption), when the loop runs in the main thread:
    the first one ends the run at the end of the current batch with a checkpoint — the same
    checkpoint ``stop_at`` would write there, so ``resume=`` continues exactly — and :meth:`batches`
    then raises :class:`~vlmrb_torchrl.recipes.run_dir.Stopped` (a ``KeyboardInterrupt`` carrying
    the signal). A second one interrupts at once: a checkpoint being written is kept when its wait
    for the scorer was what got interrupted, otherwise the previous checkpoint is the one to resume.

    A NaN or infinite loss (any ``loss*`` column of :meth:`end_batch`, or the TD errors handed back
    to a prioritized replay) stops the run with :class:`~vlmrb_torchrl.recipes.checkpoint.DivergedError`
    before anything of it is checkpointed.

    Args:
        cfg: the recipe config (``total_frames``, ``stop_at``, ``learning_starts``,
            ``updates_for(frames)``, ``eval_*``, ``checkpoint_every``, ``seed``).

    Keyword Args:
        run (Run): the run directory.
        replay (Replay): the replay buffer.
        counters (dict): ``env_steps``, ``episodes``, ``updates``, ``next_eval``,
            ``next_checkpoint`` (fresh or from a checkpoint), updated in place.
        modules (dict): what a checkpoint saves (``name -> object with state_dict()``).
        make_collector (Callable[[int], Collector]): the collector for the frames after ``env_steps``.
        device: where learner batches go.
        eval_policy: the evaluation policy.
        eval_env_fn (Callable): the evaluation env constructor.
        eval_max_steps (int): evaluation episodes' step limit.

    Attributes:
        metrics_last (dict): the last logged row ({} before the first evaluation).
    """

    def __init__(self, cfg: Any, *, run: Run, replay: Replay, counters: dict[str, Any], modules: dict[str, Any],
                 make_collector: Callable[[int], Any], device: Any, eval_policy: Any, eval_env_fn: Callable[[], Any],
                 eval_max_steps: int = 100_000, full_eval_env_fn: Callable[[], Any] | None = None) -> None:
        self.cfg = cfg
        self.run = run
        self.replay = replay
        self.counters = counters
        self.modules = modules
        self.device = device
        self.eval_policy = eval_policy
        self.eval_env_fn = eval_env_fn
        self.eval_max_steps = eval_max_steps
        self.full_eval_env_fn = full_eval_env_fn
        self._episodes = EpisodeTracker()
        for key in EpisodeTracker.COUNTERS:  # a checkpoint of an older version has none
            counters.setdefault(key, 0)
        self.stop_at = min(cfg.total_frames, cfg.stop_at or cfg.total_frames)
        self.metrics_last: dict[str, Any] = {}
        self.collector = None
        self._make_collector = make_collector
        self._frames = 0
        self._ended = True
        self._checkpointed = False
        self._updates_before = counters["updates"]
        self._start = time.perf_counter()
        self._steps_at_start = counters["env_steps"]
        self.stop_requested = False
        self.stop_signal = signal.SIGINT
        self.last_checkpoint: Path | None = None
        self._previous_handlers: dict[int, Any] = {}

    def batches(self) -> Iterator[TensorDictBase]:
        """Collector batches ``[envs, time]`` until the run stops; counts their frames and episodes.

        Call :meth:`end_batch` at the end of each batch.
        """
        counters = self.counters
        self._start = time.perf_counter()
        self._steps_at_start = counters["env_steps"]
        self._install_sigint()
        try:
            while counters["env_steps"] < self.stop_at:
                self.collector = self._make_collector(counters["env_steps"])
                self._episodes.reset()  # a new collector starts new episodes
                try:
                    for batch in self.collector:
                        self._frames = batch.numel()
                        counters["env_steps"] += self._frames
                        counters["episodes"] += int(batch["next", "done"].sum())
                        self._episodes.add(batch, counters)
                        self._ended = self._checkpointed = False
                        self._updates_before = counters["updates"]
                        yield batch
                        if not self._ended:
                            raise RuntimeError("Training.batches(): call end_batch(...) at the end of each batch.")
                        if self._checkpointed:  # leave this collector (and, unless the run stops, make a new one)
                            break
                finally:
                    self._shutdown_collector()
                if self.stop_requested:
                    raise Stopped(self.stop_signal, f"stopped by {signal.Signals(self.stop_signal).name} at "
                                                    f"{counters['env_steps']} frames")
        finally:
            self._restore_sigint()

    # ------------------------------------------------------------------ Ctrl-C
    def _on_signal(self, signum, frame) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if self.stop_requested:  # the second one: stop now
            raise Stopped(signum)
        self.stop_requested, self.stop_signal = True, signum
        print(f"\n{name}: stopping after this batch, with a checkpoint ({name} again to stop at once).",
              file=sys.stderr, flush=True)

    def _install_sigint(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            if _replaceable_handler(signal.getsignal(signum)):
                self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

    def _restore_sigint(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous_handlers.items():
                signal.signal(signum, handler)
            self._previous_handlers = {}

    def samples(self, batch: TensorDictBase) -> Iterator[TensorDictBase]:
        """The learner batches for the frames of ``batch``: ``cfg.updates_for(len(batch))`` of them
        once ``learning_starts`` frames are collected, none before.

        ``counters["updates"]`` already counts the update being made when a sample arrives; after
        the loop body, the sample's TD errors go back to the replay (PER priorities, the
        ``vlm_td`` boost).
        """
        if self.counters["env_steps"] < self.cfg.learning_starts:
            return
        for _ in range(self.cfg.updates_for(batch.numel())):
            sample = self.replay.sample().to(self.device)
            self.counters["updates"] += 1
            yield sample
            try:
                self.replay.update_priority(sample)
            except ValueError as err:  # the sampler refuses NaN priorities: say why they are NaN
                td = sample.get("td_error", None)
                if td is not None and not bool(torch.isfinite(td).all()):
                    raise DivergedError(self._diverged("the TD errors")) from err
                raise
        self.collector.update_policy_weights_()

    def end_batch(self, train_metrics: dict[str, float], *, show: Sequence[str] = ()) -> dict[str, Any]:
        """Ends a batch: metrics row (logged with an evaluation when one is due), progress bar, checkpoint.

        Args:
            train_metrics (dict): the recipe's own columns (losses, epsilon, ...).

        Keyword Args:
            show (Sequence[str]): keys of ``train_metrics`` shown in the progress bar.

        Returns:
            the row (with evaluation results when one ran).
        """
        counters = self.counters
        learned = counters["updates"] > self._updates_before  # (before the first update, losses are NaN placeholders)
        bad = [k for k, v in train_metrics.items() if learned and k.startswith("loss") and isinstance(v, float)
               and not math.isfinite(v)]
        if bad:
            raise DivergedError(self._diverged(" and ".join(bad)))
        steps_per_s = (counters["env_steps"] - self._steps_at_start) / (time.perf_counter() - self._start)
        row = {"env_steps": counters["env_steps"], "episodes": counters["episodes"],
               **EpisodeTracker.row(counters), **train_metrics,
               "env_steps_per_s": steps_per_s, "time_s": time.perf_counter() - self._start,
               **self.replay.stats(counters)}
        if maybe_evaluate(self.run, row, cfg=self.cfg, counters=counters, policy=self.eval_policy,
                          make_env=self.eval_env_fn, max_steps=self.eval_max_steps,
                          make_full_env=self.full_eval_env_fn):
            self.replay.logged(row, counters)
            EpisodeTracker.logged(counters)
            self.metrics_last = row
        self.run.progress(self._frames, success=fmt(self.metrics_last.get("eval_success")),
                          **{key: fmt(train_metrics[key]) for key in show}, scored=fmt(row.get("fraction_scored")))
        stop_at = counters["env_steps"] if self.stop_requested else self.stop_at
        path = maybe_checkpoint(self.run, self.replay, cfg=self.cfg, counters=counters, stop_at=stop_at,
                                modules=self.modules)
        self._checkpointed = path is not None
        self.last_checkpoint = path or self.last_checkpoint
        self._ended = True
        return row

    def _diverged(self, what: str) -> str:
        saved = self.last_checkpoint if self.last_checkpoint is not None else "none in this session"
        return (f"{what} became NaN or infinite at {self.counters['env_steps']} frames (update "
                f"{self.counters['updates']}): the learner diverged (lr={getattr(self.cfg, 'lr', '?')}; try a smaller "
                f"lr, check rewards and observations). Nothing of it was checkpointed; the last checkpoint: {saved}.")

    def _shutdown_collector(self) -> None:
        if self.collector is not None:
            collector, self.collector = self.collector, None
            collector.shutdown()

    def close(self) -> None:
        """Shuts the collector down if a loop left it running (an error in the loop body)."""
        self._restore_sigint()
        self._shutdown_collector()

    def __enter__(self) -> Training:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            if self.last_checkpoint is None and self._steps_at_start == 0:  # the recipe deletes the run directory
                print(f"\ninterrupted at {self.counters['env_steps']} frames, before the first checkpoint: nothing "
                      "was kept.", file=sys.stderr, flush=True)
                return
            saved = self.last_checkpoint if self.last_checkpoint is not None else "none in this session"
            print(f"\ninterrupted at {self.counters['env_steps']} frames; last checkpoint: {saved}. "
                  f"Continue with resume={self.run.dir}", file=sys.stderr, flush=True)
