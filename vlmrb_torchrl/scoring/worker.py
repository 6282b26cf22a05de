"""AsyncScorer: scores clips off the learner's thread and writes the scores back safely."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Literal

import torch
from tensordict import TensorDictBase

from vlmrb_torchrl.scoring.clips import ClipBatch
from vlmrb_torchrl.scoring.backends import scoring_backends

__all__ = ["AsyncScorer"]

_ON_FULL = ("drop_oldest", "block")
_ON_ERROR = ("raise", "skip")
# Seconds an AsyncScorer left open at interpreter exit gets before its child process is terminated.
_EXIT_TIMEOUT = 1.0
# How often a "process" backend's child checks that the learner's process is still its parent.
_PARENT_POLL_S = 0.5

# The scoring transform of a "process" backend's child process (one per child).
_CHILD_TRANSFORM = None


def _init_child(transform, parent: int | None = None) -> None:
    global _CHILD_TRANSFORM
    _CHILD_TRANSFORM = transform
    if parent is not None:
        threading.Thread(target=_exit_with_parent, args=(parent,), name="vlmrb-parent-watch", daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """Ends the child when the learner's process is gone (killed, even with SIGKILL): it is re-parented then."""
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_S)
    os._exit(1)


def _score_in_child(clips: TensorDictBase, frames: TensorDictBase | None) -> torch.Tensor:
    return _CHILD_TRANSFORM.score_clips(clips, frames=frames)


def _close_at_exit(ref: weakref.ref) -> None:
    # Runs before concurrent.futures joins its pools at exit: a hung child would block that join forever.
    worker = ref()
    if worker is not None and not worker._closed:
        try:
            worker.close(drain=False, timeout=_EXIT_TIMEOUT)
        except BaseException:  # noqa: BLE001 - nothing to report to at exit
            pass


class AsyncScorer:
    """Scores clips in the background and writes scores to a sampler under generation checks.

    ``submit`` queues the :class:`~vlmrb_torchrl.ClipBatch` a
    :class:`~vlmrb_torchrl.ClipStream` emits and returns at once. A worker thread takes up
    to ``batch_size`` clips at a time (batching clips across trajectories and pushes), scores
    them with ``transform.score_clips`` — in the thread itself, or in a child process with
    ``backend="process"`` — and writes each target's score back with
    ``sampler.update_scores(index, score, generation, reduce=...)``, so a score that arrives
    after its slot was recycled is dropped by the sampler, never applied to the wrong data.

    At most ``max_pending`` clips wait. When more arrive, ``on_full="drop_oldest"`` discards
    the oldest waiting clips (their transitions keep the default priority; counted in
    ``stats()["dropped"]``) and ``on_full="block"`` makes ``submit`` wait (back-pressure).

    An exception in the worker stops it and is re-raised (as the ``__cause__`` of a
    ``RuntimeError``) by the next ``submit``, ``drain`` or ``close``; it is never swallowed.
    With ``on_error="skip"`` a failed scorer call (an ``Exception`` raised by
    ``score_clips``, e.g. a flaky remote VLM) is skipped instead: its clips keep the default
    priority, it is counted (``stats()["errors"]``, ``"error_clips"``,
    ``"consecutive_errors"``) and reported in a ``RuntimeWarning`` naming the exception (the
    first failure and every ``error_warn_every``-th after); ``max_consecutive_errors``
    failures in a row stop the worker as above. Failures to write scores back are bugs and
    always stop it.

    ``close()`` (or leaving a ``with`` block) stops the thread and the child process;
    ``close(timeout=...)`` waits at most that long in all: a scorer call that does not return
    in time is abandoned (``"thread"``: left in its daemon thread, which ends with the
    process; ``"process"``: the child is terminated), with a warning. A ``"process"`` worker
    still open at interpreter exit is closed the same way, so a hung child never blocks exit,
    and the child ends itself within a second when the learner's process dies (even by SIGKILL).
    A pickled (or deep-copied) worker comes back as a new, empty worker with the same
    settings: what was queued or counted stays with the original.

    Args:
        transform (VLMScoreTransform): what turns ``[B, L]`` clips into ``[B]`` scores.
        sampler (VLMPrioritizedSampler): where the scores go.

    Keyword Args:
        backend (str): ``"thread"`` (default) or ``"process"`` (the transform is pickled to
            a spawned child process; use it when the scorer holds the GIL, e.g. heavy Python
            pre-processing). A pool of Ray actors is
            :class:`~vlmrb_torchrl.scoring.ray_pool.RayAsyncScorer`, a subclass;
            :func:`~vlmrb_torchrl.scoring.backends.make_async_scorer` builds the class of any
            backend name (``"thread"``, ``"process"``, ``"ray"``, registered ones).
        max_pending (int): clips allowed to wait. Defaults to 4096.
        batch_size (int): clips per scorer call. Defaults to 32.
        on_full (str): ``"drop_oldest"`` (default) or ``"block"``.
        on_error (str): ``"raise"`` (default: the first scorer failure stops the worker) or
            ``"skip"`` (a failed call's clips stay unscored; see above).
        max_consecutive_errors (int, optional): with ``on_error="skip"``, the failures in a
            row that stop the worker. Defaults to 10; ``None``: never.

    Attributes:
        error_warn_every (int): with ``on_error="skip"``, one warning per this many failures
            (after the first). Defaults to 10.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from vlmrb_torchrl import AsyncScorer, ClipSpec, ClipStream, VLMPrioritizedSampler, VLMScoreTransform
        >>> from vlmrb_torchrl.scorers import CallableScorer
        >>> scorer = CallableScorer(lambda clips: clips["obs"].amax(1) / 10, in_keys=["obs"])
        >>> sampler = VLMPrioritizedSampler(100)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler)
        >>> stream = ClipStream(ClipSpec(clip_len=3), frame_key=None, extra_keys=["obs"])
        >>> batch = TensorDict({"obs": torch.arange(10.0), ("collector", "traj_ids"): torch.zeros(10, dtype=torch.long),
        ...                     ("next", "done"): torch.arange(10) == 9}, batch_size=[10])
        >>> index = rb.extend(batch)
        >>> with AsyncScorer(VLMScoreTransform(scorer, clip_len=3, in_keys=()), sampler) as worker:
        ...     worker.submit(stream.push(batch, index, sampler.generations(index)))
        ...     worker.drain()
        True
        >>> sampler.stats()["fraction_scored"], [round(float(s), 1) for s in sampler.scores(torch.arange(10))]
        (1.0, [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9, 0.9])
    """

    #: the backend names this class runs (a subclass runs its own)
    BACKENDS: tuple[str, ...] = ("thread", "process")
    #: ``on_scored(clip_batch, scores)``, called in the worker after each batch's scores were written to the
    #: sampler (every backend), e.g. to keep the best and worst clips of a run (the recipes' gallery). An
    #: exception in it stops the worker like a scorer's. Not copied with the worker. Defaults to ``None``.
    on_scored: Callable[[ClipBatch, torch.Tensor], None] | None = None

    def __init__(
        self,
        transform,
        sampler,
        *,
        backend: Literal["thread", "process"] = "thread",
        max_pending: int = 4096,
        batch_size: int = 32,
        on_full: Literal["drop_oldest", "block"] = "drop_oldest",
        on_error: Literal["raise", "skip"] = "raise",
        max_consecutive_errors: int | None = 10,
    ) -> None:
        if backend not in self.BACKENDS:
            hint = (f"; backend={backend!r} is built by make_async_scorer(transform, sampler, backend={backend!r}) "
                    "(vlmrb_torchrl.scoring.backends)" if backend in scoring_backends() else "")
            raise ValueError(f"{type(self).__name__} runs backend {' or '.join(map(repr, self.BACKENDS))}, got "
                             f"backend={backend!r}{hint}.")
        self._check_arguments(transform, sampler, max_pending=max_pending, batch_size=batch_size, on_full=on_full,
                              on_error=on_error, max_consecutive_errors=max_consecutive_errors)
        self.transform = transform
        self.sampler = sampler
        self.backend = backend
        self.max_pending = max_pending
        self.batch_size = batch_size
        self.on_full = on_full
        self.on_error = on_error
        self.max_consecutive_errors = max_consecutive_errors
        self.error_warn_every = 10

        self._pending: deque[tuple[ClipBatch, float]] = deque()
        self._pending_clips = 0
        self._in_flight = 0
        self._cond = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None
        self._error_note = ""
        self._abandoned = False  # close() gave up on a scorer call: its outcome no longer matters
        self._submitted = self._scored = self._dropped = self._batches = 0
        self._errors = self._error_clips = self._consecutive_errors = 0
        self._score_time = 0.0
        self._latency_sum = 0.0
        self._started = time.perf_counter()

        self._executor = None
        self._restarts = 0
        if backend == "process":
            self._executor = self._new_child()
            try:  # threading's exit hooks run before concurrent.futures joins its pools
                threading._register_atexit(_close_at_exit, weakref.ref(self))
            except (AttributeError, RuntimeError):  # pragma: no cover - no hook API, or exiting already
                pass
        self._thread = threading.Thread(target=self._run, name="vlmrb-async-scorer", daemon=True)
        self._thread.start()

    def _new_child(self) -> ProcessPoolExecutor:
        """The ``"process"`` backend's pool of one spawned child, which builds the transform's scorer when it
        starts (at its first call)."""
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_child, initargs=(self.transform, os.getpid()))

    def _restart_child(self, dead: ProcessPoolExecutor) -> bool:
        """Replaces the dead child's pool with a new one (its scorer built anew at its first call); ``False``
        when the worker is closing or another call already replaced it."""
        with self._cond:
            if self._closed or self._abandoned or self._executor is not dead:
                return False
            self._executor = self._new_child()
            self._restarts += 1
        dead.shutdown(wait=False, cancel_futures=True)
        return True

    @staticmethod
    def _check_arguments(transform, sampler, *, max_pending, batch_size, on_full, on_error,
                         max_consecutive_errors) -> None:
        """The queue's and the write-back's arguments (every backend, before it starts anything)."""
        if on_full not in _ON_FULL:
            raise ValueError(f"on_full must be one of {_ON_FULL}, got on_full={on_full!r}.")
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {_ON_ERROR}, got on_error={on_error!r}.")
        limits = (("max_pending", max_pending), ("batch_size", batch_size))
        if max_consecutive_errors is not None:
            limits += (("max_consecutive_errors", max_consecutive_errors),)
        for name, value in limits:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {name}={value!r}.")
        if not callable(getattr(transform, "score_clips", None)):
            raise TypeError(f"transform must have score_clips(clips) (a VLMScoreTransform); got {type(transform).__name__}.")
        if not callable(getattr(sampler, "update_scores", None)):
            raise TypeError(f"sampler must have update_scores (a VLMPrioritizedSampler); got {type(sampler).__name__}.")

    def __getstate__(self) -> dict[str, Any]:
        # threads, locks and the child process do not travel: the copy is a new worker with these settings
        return {"transform": self.transform, "sampler": self.sampler, "backend": self.backend,
                "max_pending": self.max_pending, "batch_size": self.batch_size, "on_full": self.on_full,
                "on_error": self.on_error, "max_consecutive_errors": self.max_consecutive_errors,
                "error_warn_every": self.error_warn_every}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        warn_every = state.pop("error_warn_every", 10)
        self.__init__(state.pop("transform"), state.pop("sampler"), **state)
        self.error_warn_every = warn_every

    # ------------------------------------------------------------------ caller side
    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"AsyncScorer's worker failed: {self._error_note}{self._error!r}") from self._error

    def submit(self, clips: ClipBatch | None) -> None:
        """Queues clips for scoring; ``None`` or an empty batch is ignored."""
        self._raise_if_failed()
        if clips is None:
            return
        if not isinstance(clips, ClipBatch):
            raise TypeError(f"submit takes a ClipBatch (from ClipStream.push); got {type(clips).__name__}.")
        if len(clips) == 0:
            return
        n = len(clips)
        with self._cond:
            if self._closed:
                raise RuntimeError("AsyncScorer is closed.")
            if self.on_full == "block":
                # a batch larger than max_pending is accepted once the queue is empty
                self._cond.wait_for(
                    lambda: self._error is not None or self._closed or self._pending_clips == 0
                    or self._pending_clips + n <= self.max_pending
                )
                self._raise_if_failed()
                if self._closed:  # closed while this call waited: close() has counted what it will score
                    raise RuntimeError("AsyncScorer was closed while submit() waited for room in the queue.")
            self._pending.append((clips, time.perf_counter()))
            self._pending_clips += n
            self._submitted += n
            # drop_oldest keeps the queue at max_pending; block never drops (an oversized batch stays whole)
            while self.on_full == "drop_oldest" and self._pending_clips > self.max_pending:
                oldest, t0 = self._pending.popleft()
                excess = self._pending_clips - self.max_pending
                if len(oldest) > excess:  # keep the newest part of the oldest batch
                    _, kept = oldest.split(excess)
                    self._pending.appendleft((kept, t0))
                    dropped = excess
                else:
                    dropped = len(oldest)
                self._pending_clips -= dropped
                self._dropped += dropped
            self._cond.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Waits until every queued clip is scored and written; ``False`` on timeout."""
        with self._cond:
            done = self._cond.wait_for(
                lambda: self._error is not None or (self._pending_clips == 0 and self._in_flight == 0),
                timeout,
            )
        self._raise_if_failed()
        return done

    def close(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Stops the worker, after scoring what is queued unless ``drain=False``.

        Args:
            drain (bool): score the queued clips first. Clips not scored (``drain=False``, or
                the time ran out) are counted in ``stats()["dropped"]``.
            timeout (float, optional): the most seconds ``close`` takes, scoring and stopping
                together. A scorer call still under way then is abandoned with a
                ``RuntimeWarning``: the ``"thread"`` backend leaves it in its daemon thread
                (a Python call cannot be interrupted; the thread ends with the process), the
                ``"process"`` backend terminates the child. ``None``: no limit.
        """
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        stopped = True
        try:
            if drain and self._error is None and not self._closed:
                self.drain(timeout)
        finally:
            with self._cond:
                self._closed = True
                self._dropped += self._pending_clips  # not scored: drain=False, or the drain timed out
                self._pending.clear()
                self._pending_clips = 0
                self._cond.notify_all()
            if self._thread is not threading.current_thread():
                self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
                stopped = not self._thread.is_alive()
            if not stopped and not self._abandoned:  # (a second close of an abandoned worker says nothing new)
                self._abandon(timeout)
            if self._executor is not None:
                self._executor.shutdown(wait=stopped, cancel_futures=True)
                self._executor = None
        self._raise_if_failed()

    def _abandon(self, timeout: float | None) -> None:
        """Gives up on the scorer call under way (``close`` timed out)."""
        with self._cond:
            self._abandoned = True
            self._dropped += self._in_flight
            self._in_flight = 0
            self._cond.notify_all()
        if self._executor is not None:
            # private, but the only handle on the child; a terminated child breaks the pending call,
            # which ends the worker thread and lets concurrent.futures' own exit join return
            children = list((getattr(self._executor, "_processes", None) or {}).values())
            for child in children:
                child.terminate()
            for child in children:
                child.join(5)
            what = "its child process was terminated"
        else:
            what = "its daemon thread is left behind (it ends with the process)"
        warnings.warn(f"AsyncScorer.close(timeout={timeout}): a scorer call did not return in time; {what}.",
                      RuntimeWarning, stacklevel=3)

    def __enter__(self) -> AsyncScorer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the body's exception with the worker's
            try:
                self.close(drain=False)
            except RuntimeError:
                pass

    @property
    def backlog(self) -> int:
        """Clips waiting or being scored."""
        with self._cond:
            return self._pending_clips + self._in_flight

    def stats(self) -> dict[str, float | int]:
        """``submitted``, ``scored``, ``dropped``, ``backlog`` (clips), ``batches``,
        ``clips_per_s`` (scorer throughput while busy), ``latency_s`` (mean submit-to-write-back
        time per clip), ``busy_fraction`` (share of wall time spent scoring), and with
        ``on_error="skip"`` ``errors`` (failed scorer calls skipped), ``error_clips`` (their
        clips, left unscored), ``consecutive_errors`` (failures since the last success) and
        ``child_restarts`` (``"process"`` children started again after one died)."""
        with self._cond:
            wall = time.perf_counter() - self._started
            return {
                "submitted": self._submitted,
                "scored": self._scored,
                "dropped": self._dropped,
                "backlog": self._pending_clips + self._in_flight,
                "batches": self._batches,
                "clips_per_s": self._scored / self._score_time if self._score_time > 0 else 0.0,
                "latency_s": self._latency_sum / self._scored if self._scored else 0.0,
                "busy_fraction": self._score_time / wall if wall > 0 else 0.0,
                "errors": self._errors,
                "error_clips": self._error_clips,
                "consecutive_errors": self._consecutive_errors,
                "child_restarts": self._restarts,
            }

    # ------------------------------------------------------------------ worker side
    def _take(self) -> list[tuple[ClipBatch, float]] | None:
        """Pops up to ``batch_size`` clips; ``None`` when closed and nothing is left."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending or self._closed)
            if not self._pending:
                return None
            taken, n = [], 0
            while self._pending and n < self.batch_size:
                batch, t0 = self._pending.popleft()
                room = self.batch_size - n
                if len(batch) > room:
                    batch, rest = batch.split(room)
                    self._pending.appendleft((rest, t0))
                taken.append((batch, t0))
                n += len(batch)
            self._pending_clips -= n
            self._in_flight = n
            return taken

    def _score(self, batch: ClipBatch) -> torch.Tensor:
        """One scorer call on the backend: ``[B]`` scores for ``batch.clips``.

        A ``"process"`` child that died (killed, out of memory) fails the call; with ``on_error="skip"`` a new
        child is started for the next one, so a dead child costs one failed call of the error budget
        (``max_consecutive_errors``), not the rest of the run's scores."""
        executor = self._executor
        if executor is None:
            return self.transform.score_clips(batch.clips, frames=batch.frames)
        try:
            return executor.submit(_score_in_child, batch.clips, batch.frames).result()
        except BrokenProcessPool as err:
            restarted = self.on_error == "skip" and self._restart_child(executor)
            raise RuntimeError(
                "the scorer's child process died (killed, or out of memory) before it returned this call's scores; "
                + ("a new child was started for the next calls" if restarted else
                   "on_error='skip' (on_scorer_error=skip) would start a new one within max_consecutive_errors")
            ) from err

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            try:
                batch = ClipBatch.cat([b for b, _ in taken])
                t0 = time.perf_counter()
                try:
                    scores = self._score(batch)
                except Exception as err:  # noqa: BLE001 - the on_error policy decides
                    if self._scorer_failed(err, len(batch)):
                        continue
                    return
                elapsed = time.perf_counter() - t0
                if self._abandoned:  # close() gave up on this call: the run moved on without it
                    return
                self.sampler.update_scores(batch.index, batch.scores_for_targets(scores),
                                           batch.generation, reduce=batch.reduce)
                if self.on_scored is not None:
                    self.on_scored(batch, scores)
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                self._fail(err)
                return
            done = time.perf_counter()
            with self._cond:
                self._scored += len(batch)
                self._batches += 1
                self._score_time += elapsed
                self._latency_sum += sum((done - t) * len(b) for b, t in taken)
                self._consecutive_errors = 0
                self._in_flight = 0
                self._cond.notify_all()

    def _fail(self, err: BaseException, note: str = "") -> None:
        """Stops the worker: ``err`` is re-raised in the caller (unless ``close`` abandoned the call)."""
        with self._cond:
            if not self._abandoned:
                self._error, self._error_note = err, note
            self._in_flight = 0
            self._pending.clear()
            self._pending_clips = 0
            self._cond.notify_all()

    def _scorer_failed(self, err: Exception, clips: int) -> bool:
        """Applies ``on_error`` to a failed scorer call of ``clips`` clips (every backend calls it).

        Returns ``True`` when the failure is skipped (the clips keep the default priority and the
        worker goes on), ``False`` when the worker stops (``err`` is then re-raised in the caller).
        """
        if self.on_error == "raise" or self._abandoned:
            self._fail(err)
            return False
        with self._cond:
            self._errors += 1
            self._error_clips += clips
            self._consecutive_errors += 1
            errors, in_a_row = self._errors, self._consecutive_errors
            self._in_flight -= clips  # the thread backend's one batch; one of several on the Ray pool
            self._cond.notify_all()
        limit = self.max_consecutive_errors
        if limit is not None and in_a_row >= limit:
            self._fail(err, f"{in_a_row} scorer calls failed in a row (on_error='skip', "
                            f"max_consecutive_errors={limit}); the last: ")
            return False
        if errors == 1 or errors % self.error_warn_every == 0:
            warnings.warn(f"AsyncScorer: scorer call failed ({errors} so far, {in_a_row} in a row; on_error='skip': "
                          f"its {clips} clips keep the default priority): {err!r}", RuntimeWarning, stacklevel=2)
        return True
