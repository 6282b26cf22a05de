"""AsyncScorer: scores clips off the learner's thread and writes the scores back safely."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from typing import Literal

import torch
from tensordict import TensorDictBase

from vlmrb_torchrl.clips import ClipBatch

__all__ = ["AsyncScorer"]

_BACKENDS = ("thread", "process", "ray")
_ON_FULL = ("drop_oldest", "block")

# The scoring transform of a "process" backend's child process (one per child).
_CHILD_TRANSFORM = None


def _init_child(transform) -> None:
    global _CHILD_TRANSFORM
    _CHILD_TRANSFORM = transform


def _score_in_child(clips: TensorDictBase, frames: TensorDictBase | None) -> torch.Tensor:
    return _CHILD_TRANSFORM.score_clips(clips, frames=frames)


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
    ``close()`` (or leaving a ``with`` block) stops the thread and the child process.

    Args:
        transform (VLMScoreTransform): what turns ``[B, L]`` clips into ``[B]`` scores.
        sampler (VLMPrioritizedSampler): where the scores go.

    Keyword Args:
        backend (str): ``"thread"`` (default) or ``"process"`` (the transform is pickled to
            a spawned child process; use it when the scorer holds the GIL, e.g. heavy Python
            pre-processing).
            ``"ray"`` returns a :class:`~vlmrb_torchrl.ray_scoring.RayAsyncScorer`: a pool of
            Ray actors (``num_workers=``, ``worker_options=``, ...; see there).
        max_pending (int): clips allowed to wait. Defaults to 4096.
        batch_size (int): clips per scorer call. Defaults to 32.
        on_full (str): ``"drop_oldest"`` (default) or ``"block"``.

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

    def __new__(cls, *args, backend: str = "thread", **kwargs):
        if backend == "ray" and cls is AsyncScorer:  # the Ray pool lives in its own module: ray is an optional extra
            from vlmrb_torchrl.ray_scoring import RayAsyncScorer

            cls = RayAsyncScorer
        return super().__new__(cls)

    def __init__(
        self,
        transform,
        sampler,
        *,
        backend: Literal["thread", "process", "ray"] = "thread",
        max_pending: int = 4096,
        batch_size: int = 32,
        on_full: Literal["drop_oldest", "block"] = "drop_oldest",
    ) -> None:
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got backend={backend!r}.")
        if on_full not in _ON_FULL:
            raise ValueError(f"on_full must be one of {_ON_FULL}, got on_full={on_full!r}.")
        for name, value in (("max_pending", max_pending), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {name}={value!r}.")
        if not callable(getattr(transform, "score_clips", None)):
            raise TypeError(f"transform must have score_clips(clips) (a VLMScoreTransform); got {type(transform).__name__}.")
        if not callable(getattr(sampler, "update_scores", None)):
            raise TypeError(f"sampler must have update_scores (a VLMPrioritizedSampler); got {type(sampler).__name__}.")
        self.transform = transform
        self.sampler = sampler
        self.backend = backend
        self.max_pending = max_pending
        self.batch_size = batch_size
        self.on_full = on_full

        self._pending: deque[tuple[ClipBatch, float]] = deque()
        self._pending_clips = 0
        self._in_flight = 0
        self._cond = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None
        self._submitted = self._scored = self._dropped = self._batches = 0
        self._score_time = 0.0
        self._latency_sum = 0.0
        self._started = time.perf_counter()

        self._executor = None
        if backend == "process":
            self._executor = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_child, initargs=(transform,),
            )
        self._thread = threading.Thread(target=self._run, name="vlmrb-async-scorer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ caller side
    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"AsyncScorer's worker failed: {self._error!r}") from self._error

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
                    lambda: self._error is not None or self._pending_clips == 0
                    or self._pending_clips + n <= self.max_pending
                )
                self._raise_if_failed()
            self._pending.append((clips, time.perf_counter()))
            self._pending_clips += n
            self._submitted += n
            while self._pending_clips > self.max_pending:
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
        """Stops the worker (after scoring what is queued, unless ``drain=False``)."""
        try:
            if drain and self._error is None and not self._closed:
                self.drain(timeout)
        finally:
            with self._cond:
                self._closed = True
                if not drain:
                    self._dropped += self._pending_clips
                    self._pending.clear()
                    self._pending_clips = 0
                self._cond.notify_all()
            self._thread.join()
            if self._executor is not None:
                self._executor.shutdown(wait=True, cancel_futures=True)
                self._executor = None
        self._raise_if_failed()

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
        time per clip) and ``busy_fraction`` (share of wall time spent scoring)."""
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

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            try:
                batch = ClipBatch.cat([b for b, _ in taken])
                t0 = time.perf_counter()
                if self._executor is None:
                    scores = self.transform.score_clips(batch.clips, frames=batch.frames)
                else:
                    scores = self._executor.submit(_score_in_child, batch.clips, batch.frames).result()
                elapsed = time.perf_counter() - t0
                self.sampler.update_scores(batch.index, batch.scores_for_targets(scores),
                                           batch.generation, reduce=batch.reduce)
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                with self._cond:
                    self._error = err
                    self._in_flight = 0
                    self._pending.clear()
                    self._pending_clips = 0
                    self._cond.notify_all()
                return
            done = time.perf_counter()
            with self._cond:
                self._scored += len(batch)
                self._batches += 1
                self._score_time += elapsed
                self._latency_sum += sum((done - t) * len(b) for b, t in taken)
                self._in_flight = 0
                self._cond.notify_all()
