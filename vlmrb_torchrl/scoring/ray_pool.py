"""Scale-out on Ray: a pool of scorer actors (``make_async_scorer(..., backend="ray")``).

Ray is an optional extra (``pip install 'vlmrb-torchrl[ray]'``): this module imports it only when
a pool is built, so importing it (and the rest of the package) never does.

:class:`RayAsyncScorer` is what ``make_async_scorer(transform, sampler, backend="ray", ...)`` builds:
the thread backend's bounded queue, ``on_full`` back-pressure and generation-checked write-back,
with the scoring itself done by ``num_workers`` Ray actors, each holding its own scorer and several
batches in flight at once. The VLM-RB buffer that Ray actors share is
:mod:`vlmrb_torchrl.replay.ray_buffer`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import torch
from tensordict import TensorDictBase

from vlmrb_torchrl.scoring.clips import ClipBatch
from vlmrb_torchrl.scoring.worker import AsyncScorer

__all__ = ["RayAsyncScorer"]

_INSTALL = "pip install 'vlmrb-torchrl[ray]'"
# How long the dispatcher waits on Ray before looking at the queue again: bounds the extra
# latency of a clip submitted while every worker is busy, and how fast close() is noticed.
_POLL_S = 0.02
# How often a restarting actor is probed (its calls fail fast meanwhile).
_RESTART_BACKOFF_S = 0.5


def _import_ray():
    try:
        import ray
    except ImportError as err:
        raise ImportError(f"the Ray scorer pool and remote buffer need Ray: {_INSTALL}") from err
    return ray


class _ScorerWorker:
    """One Ray actor of the pool: a copy of the scoring transform and its scorer.

    With ``scorer_factory`` the scorer is built here, in the actor (on the actor's GPU when it
    has one), instead of being pickled from the driver with its weights.
    """

    def __init__(self, transform, scorer_factory: str | Callable[[], Any] | None) -> None:
        if scorer_factory is not None:
            if isinstance(scorer_factory, str):
                from vlmrb_torchrl.scorers import make_scorer

                scorer = make_scorer(scorer_factory)
            else:
                scorer = scorer_factory()
            transform.__dict__["scorer"] = scorer  # the transform keeps its scorer out of the module tree
        self.transform = transform

    def ready(self) -> int:
        return os.getpid()

    def score(self, clips: TensorDictBase, frames: TensorDictBase | None) -> tuple[torch.Tensor, float, int]:
        t0 = time.perf_counter()
        scores = self.transform.score_clips(clips, frames=frames)
        # the driver may have no GPU: a scorer's CUDA scores travel as CPU tensors
        return scores.cpu(), time.perf_counter() - t0, os.getpid()


_REMOTE_WORKER = None


def _remote_worker_class():
    global _REMOTE_WORKER
    if _REMOTE_WORKER is None:
        _REMOTE_WORKER = _import_ray().remote(_ScorerWorker)
    return _REMOTE_WORKER


@dataclass
class _Worker:
    actor: Any
    pids: set = field(default_factory=set)  # one per incarnation seen: restarts = len(pids) - 1
    batches: int = 0  # batches in flight
    in_flight: int = 0  # clips in flight
    scored: int = 0
    busy_s: float = 0.0  # scoring time measured inside the actor
    dropped: int = 0
    alive: bool = True
    paused: bool = False  # not started yet, or lost a batch: no new ones until a ready() probe answers
    probe: Any = None  # the outstanding ready() call
    probe_at: float = 0.0  # when to probe a restarting actor again
    probe_deaths: int = 0  # probes in a row that found the actor dead

    @property
    def restarts(self) -> int:
        return max(0, len(self.pids) - 1)


@dataclass
class _Flight:
    worker: int
    batch: ClipBatch
    taken: list = field(default_factory=list)  # (clips, submit time) pieces, for latencies
    attempt: int = 0


class RayAsyncScorer(AsyncScorer):
    """:class:`~vlmrb_torchrl.AsyncScorer` whose scoring runs on a pool of Ray actors.

    Built directly or by ``make_async_scorer(transform, sampler, backend="ray", ...)``. The queue is
    the thread backend's: ``submit`` returns at once, at most ``max_pending`` clips wait and
    ``on_full`` says what happens beyond; ``drain``, ``backlog`` and the context manager behave
    the same. A dispatcher thread hands batches of up to ``batch_size`` clips to ``num_workers``
    actors, keeping up to ``batches_per_worker`` batches queued on each (so a worker never waits
    for the round trip), and writes each batch's scores with
    ``sampler.update_scores(index, scores, generation, reduce=...)`` in the driver, so stale
    scores are dropped exactly as with the thread backend, in whatever order batches finish.

    Each actor builds its own scorer: from ``scorer_factory`` (a spec string for
    :func:`~vlmrb_torchrl.scorers.make_scorer` or a picklable zero-argument callable) inside the
    actor, so a GPU model loads on the actor's GPU (``worker_options={"num_gpus": 1}``); without
    it the driver's transform, scorer included, is pickled to each actor.

    An actor that dies (a crash, ``ray.kill``, a lost node) is restarted by Ray up to
    ``worker_options["max_restarts"]`` times (default 1). The clips it had in flight are sent
    once more (to whichever worker is free); if they fail again they are dropped and counted in
    ``stats()["dropped"]``. They keep their original generations, so a retried score can never
    land on a recycled slot. When every actor is dead for good, the pool fails like a scorer
    error: the next ``submit``/``drain``/``close`` raises. A scorer exception is raised the same
    way.

    ``close()`` stops the dispatcher, kills the actors and, if this pool started Ray, shuts it
    down (the lease is TorchRL's, shared with ``RayReplayBuffer``). Clips still queued or in
    flight when it stops (``close(drain=False)``, or a ``drain`` timeout) are counted as dropped.

    Args:
        transform (VLMScoreTransform): what turns ``[B, L]`` clips into ``[B]`` scores.
        sampler: where the scores go: a :class:`~vlmrb_torchrl.VLMPrioritizedSampler`, or a
            :class:`~vlmrb_torchrl.replay.ray_buffer.RemoteSampler` for a buffer served by Ray.

    Keyword Args:
        backend (str): ``"ray"``.
        num_workers (int): actors in the pool. Defaults to 1.
        worker_options (dict, optional): Ray actor options (``num_gpus``, ``num_cpus``,
            ``resources``, ``max_restarts``, ...). A request the cluster can never meet is
            refused here rather than left pending forever.
        scorer_factory (str or callable, optional): builds each actor's scorer in the actor.
        batches_per_worker (int): batches queued on one actor at a time. Defaults to 2.
        ray_address (str, optional): the cluster to use when Ray is not initialised yet:
            ``None`` or ``""`` starts a local one (shut down by :meth:`close`), ``"auto"`` joins
            the running one, or a ``host:port`` / ``ray://`` address. An initialised Ray is used as is.
        max_pending, batch_size, on_full, on_error, max_consecutive_errors: as for the thread
            backend (``on_error="skip"`` skips a batch whose scorer raised in an actor; a dead
            actor is handled as above, not counted as a scorer error).

    Examples:
        >>> import tempfile, torch
        >>> import ray  # doctest: +SKIP
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl import ClipSpec, ClipStream, VLMPrioritizedSampler, VLMScoreTransform
        >>> from vlmrb_torchrl.scorers import CallableScorer
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
        ...              _temp_dir=tempfile.mkdtemp(prefix="ray"))  # doctest: +SKIP
        >>> scorer = CallableScorer(lambda clips: clips["obs"].amax(1) / 10, in_keys=["obs"])
        >>> sampler = VLMPrioritizedSampler(10)
        >>> sampler.mark_update(torch.arange(10))
        >>> stream = ClipStream(ClipSpec(clip_len=3), frame_key=None, extra_keys=["obs"])
        >>> batch = TensorDict({"obs": torch.arange(10.0), ("collector", "traj_ids"): torch.zeros(10, dtype=torch.long),
        ...                     ("next", "done"): torch.arange(10) == 9}, batch_size=[10])
        >>> with RayAsyncScorer(VLMScoreTransform(scorer, clip_len=3, in_keys=()), sampler,
        ...                     num_workers=2) as pool:  # doctest: +SKIP
        ...     pool.submit(stream.push(batch, torch.arange(10), sampler.generations(torch.arange(10))))
        ...     pool.drain(timeout=60)
        True
        >>> [round(float(s), 1) for s in sampler.scores(torch.arange(10))]  # doctest: +SKIP
        [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9, 0.9]
        >>> ray.shutdown()  # doctest: +SKIP
    """

    BACKENDS = ("ray",)

    def __init__(
        self,
        transform,
        sampler,
        *,
        backend: Literal["ray"] = "ray",
        num_workers: int = 1,
        worker_options: dict[str, Any] | None = None,
        scorer_factory: str | Callable[[], Any] | None = None,
        batches_per_worker: int = 2,
        ray_address: str | None = None,
        max_pending: int = 4096,
        batch_size: int = 32,
        on_full: Literal["drop_oldest", "block"] = "drop_oldest",
        on_error: Literal["raise", "skip"] = "raise",
        max_consecutive_errors: int | None = 10,
    ) -> None:
        if backend not in self.BACKENDS:
            raise ValueError(f"RayAsyncScorer is the backend='ray' pool; got backend={backend!r}.")
        # everything is checked before Ray starts (or a cluster is joined)
        self._check_arguments(transform, sampler, max_pending=max_pending, batch_size=batch_size, on_full=on_full,
                              on_error=on_error, max_consecutive_errors=max_consecutive_errors)
        for name, value in (("num_workers", num_workers), ("batches_per_worker", batches_per_worker)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {name}={value!r}.")
        if worker_options is not None and not isinstance(worker_options, dict):
            raise TypeError(f"worker_options must be a dict of Ray actor options, got {type(worker_options).__name__}.")
        if scorer_factory is not None and not (isinstance(scorer_factory, str) or callable(scorer_factory)):
            raise TypeError("scorer_factory must be a scorer spec string or a picklable zero-argument callable; "
                            f"got {type(scorer_factory).__name__}.")
        options = {"max_restarts": 1, **(worker_options or {})}
        if options.get("max_task_retries", 0) != 0:
            raise ValueError("worker_options must not set max_task_retries: the pool itself sends a dead worker's "
                             "clips once more and then drops them, counted (Ray's retries would be invisible).")
        options["max_task_retries"] = 0
        max_restarts = options["max_restarts"]
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < -1:
            raise ValueError(f"worker_options['max_restarts'] must be an int >= -1 (-1: forever), got {max_restarts!r}.")

        ray = _import_ray()
        from torchrl._comm.ray_runtime import _RayRuntimeLease  # shared with TorchRL's RayReplayBuffer

        self._lease = _RayRuntimeLease.acquire({"address": ray_address or None, "include_dashboard": False})
        self._workers: list[_Worker] = []
        try:
            _check_feasible(ray, options, num_workers)
            payload = transform
            if scorer_factory is not None:  # don't ship the driver's weights: each actor builds its own
                payload = copy.copy(transform)
                payload.__dict__["scorer"] = None
            remote = _remote_worker_class().options(**options)
            self._workers = [_Worker(remote.remote(payload, scorer_factory)) for _ in range(num_workers)]
            self.num_workers = num_workers
            self.batches_per_worker = batches_per_worker
            self.max_restarts = max_restarts
            self._busy_mark = 0.0
            self.scorer_factory = scorer_factory
            self.worker_options = worker_options
            self.ray_address = ray_address
            super().__init__(transform, sampler, backend="ray", max_pending=max_pending, batch_size=batch_size,
                             on_full=on_full, on_error=on_error, max_consecutive_errors=max_consecutive_errors)
        except BaseException:
            self._kill_workers()
            raise

    def __getstate__(self) -> dict[str, Any]:
        # a copy is a new pool with these settings (actors, like threads, do not travel)
        return {**super().__getstate__(), "num_workers": self.num_workers, "worker_options": self.worker_options,
                "scorer_factory": self.scorer_factory, "batches_per_worker": self.batches_per_worker,
                "ray_address": self.ray_address}

    # ------------------------------------------------------------------ caller side
    def close(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Stops the dispatcher (after scoring what is queued, unless ``drain=False``; at most
        ``timeout`` seconds), kills the actors and releases Ray."""
        try:
            super().close(drain=drain, timeout=timeout)
        finally:
            self._kill_workers()

    def stats(self) -> dict[str, float | int]:
        """The thread backend's statistics (``clips_per_s`` is the pool's throughput while it has
        work, ``busy_fraction`` the share of wall time it has some), plus ``workers`` (alive),
        ``restarts`` and, per worker ``i``, ``worker{i}/clips_per_s`` (measured inside the actor),
        ``worker{i}/in_flight`` (clips), ``worker{i}/restarts`` and ``worker{i}/dropped``
        (clips of that worker lost twice to a dead actor)."""
        stats = super().stats()
        with self._cond:
            stats["workers"] = sum(w.alive for w in self._workers)
            stats["restarts"] = sum(w.restarts for w in self._workers)
            for i, w in enumerate(self._workers):
                stats[f"worker{i}/clips_per_s"] = w.scored / w.busy_s if w.busy_s > 0 else 0.0
                stats[f"worker{i}/in_flight"] = w.in_flight
                stats[f"worker{i}/restarts"] = w.restarts
                stats[f"worker{i}/dropped"] = w.dropped
        return stats

    def _kill_workers(self) -> None:
        lease, self._lease = getattr(self, "_lease", None), None
        if self._workers:
            ray = _import_ray()
            for w in self._workers:
                with contextlib.suppress(Exception):  # already dead, or Ray already shut down
                    ray.kill(w.actor, no_restart=True)
                # what it held is counted in dropped by close(): stats() shows nothing in flight
                w.alive, w.batches, w.in_flight = False, 0, 0
        if lease is not None:
            lease.release()

    # ------------------------------------------------------------------ dispatcher side
    def _free_worker(self) -> int | None:
        free = [i for i, w in enumerate(self._workers)
                if w.alive and not w.paused and w.batches < self.batches_per_worker]
        return min(free, key=lambda i: self._workers[i].batches) if free else None

    def _dispatch(self, retry: deque[_Flight], flights: dict) -> list[_Flight] | None:
        """Under the lock: the batches to send now (retries first); ``None`` once closed."""
        if self._closed:  # abandoned: what is queued or in flight is counted as dropped
            self._dropped += self._pending_clips + self._in_flight
            self._pending.clear()
            self._pending_clips = self._in_flight = 0
            self._cond.notify_all()
            return None
        work = []
        while (i := self._free_worker()) is not None and (retry or self._pending):
            if retry:
                flight = retry.popleft()
            else:
                in_flight = self._in_flight
                taken = self._take()  # returns at once: there is something pending
                self._in_flight = in_flight + sum(len(b) for b, _ in taken)  # _take counts one batch in flight
                flight = _Flight(i, ClipBatch.cat([b for b, _ in taken]), [(len(b), t) for b, t in taken])
            flight.worker = i
            self._workers[i].batches += 1
            self._workers[i].in_flight += len(flight.batch)
            work.append(flight)
        if work and not flights:
            self._busy_mark = time.perf_counter()
        return work

    def _run(self) -> None:
        ray = _import_ray()
        flights: dict[Any, _Flight] = {}
        probes: dict[Any, int] = {}
        retry: deque[_Flight] = deque()
        try:
            # learn each actor's first pid (restarts are pid changes); no batch goes to an actor before
            # it answers: one Ray cannot place (resources held elsewhere, per-node packing) would
            # otherwise hold its batches forever
            for i, w in enumerate(self._workers):
                w.probe, w.paused = w.actor.ready.remote(), True
                probes[w.probe] = i
            while True:
                with self._cond:
                    work = self._dispatch(retry, flights)
                    if work is None:
                        return
                    now = time.perf_counter()
                    for i, w in enumerate(self._workers):
                        if w.alive and w.paused and w.probe is None and now >= w.probe_at:
                            w.probe = w.actor.ready.remote()
                            probes[w.probe] = i
                    if not work and not flights and not probes:
                        if retry or self._pending:  # every live worker waits to be probed again
                            self._cond.wait(timeout=_RESTART_BACKOFF_S / 5)
                        else:
                            self._cond.wait_for(lambda: self._pending or self._closed, timeout=0.5)
                        continue
                for flight in work:
                    w = self._workers[flight.worker]
                    flights[w.actor.score.remote(flight.batch.clips, flight.batch.frames)] = flight
                if not flights and not probes:
                    continue
                ready, _ = ray.wait([*flights, *probes], num_returns=1, timeout=_POLL_S)
                for ref in ready:
                    if ref in probes:
                        self._probed(ray, ref, probes.pop(ref))
                    elif not self._finish(ray, ref, flights.pop(ref), retry):
                        return
        except BaseException as err:  # noqa: BLE001 - handed to the caller (unless close() abandoned the pool)
            self._fail(err)

    def _probed(self, ray, ref, i: int) -> None:
        """A ready() probe answered: the actor is back (maybe as a new incarnation), restarting, or dead."""
        w = self._workers[i]
        try:
            pid = ray.get(ref)
        except (ray.exceptions.ActorUnavailableError, *_killed_with_its_task(ray)):  # restarting: ask again later
            with self._cond:
                w.probe, w.probe_at = None, time.perf_counter() + _RESTART_BACKOFF_S
            return
        except ray.exceptions.RayActorError as err:
            # dead for good (out of max_restarts) -- or killed while it answered this very probe, which
            # Ray reports the same way even when it restarts the actor: retired at the second death in a row
            with self._cond:
                w.probe_deaths += 1
                w.probe, w.probe_at = None, time.perf_counter() + _RESTART_BACKOFF_S
                w.alive = w.probe_deaths < 2
            self._check_alive(err)
            return
        with self._cond:
            w.pids.add(pid)
            w.probe, w.paused, w.probe_deaths = None, False, 0

    def _check_alive(self, err: BaseException) -> None:
        if not any(w.alive for w in self._workers):
            raise RuntimeError(
                f"every Ray scorer worker died (num_workers={self.num_workers}, each restarted at most "
                f"max_restarts={self.max_restarts} times); raise worker_options['max_restarts'] or look "
                "at the actors' logs (ray logs) for why they die; the last death is chained below.") from err

    def _finish(self, ray, ref, flight: _Flight, retry: deque[_Flight]) -> bool:
        """Writes a finished batch's scores (or handles its failure); ``False`` when the pool stops."""
        n = len(flight.batch)
        w = self._workers[flight.worker]
        try:
            scores, busy, pid = ray.get(ref)
        except ray.exceptions.RayTaskError as err:  # the scorer raised in the actor: on_error decides
            with self._cond:
                w.batches -= 1
                w.in_flight -= n
                self._account_busy()
            return self._scorer_failed(err, n)
        except (ray.exceptions.RayActorError, *_killed_with_its_task(ray)) as err:  # the actor died or restarts
            with self._cond:
                w.batches -= 1
                w.in_flight -= n
                w.paused = True  # until a probe says it is back
                self._account_busy()
                if flight.attempt == 0:
                    flight.attempt = 1
                    retry.append(flight)  # still counted in _in_flight
                else:
                    w.dropped += n
                    self._dropped += n
                    self._in_flight -= n
                    self._cond.notify_all()
            self._check_alive(err)
            return True
        if self._abandoned:  # close() gave up waiting: the run moved on without these scores
            return False
        self.sampler.update_scores(flight.batch.index, flight.batch.scores_for_targets(scores),
                                   flight.batch.generation, reduce=flight.batch.reduce)
        if self.on_scored is not None:
            self.on_scored(flight.batch, scores)
        done = time.perf_counter()
        with self._cond:
            w.pids.add(pid)  # a restarted actor may score before its probe answers
            w.batches -= 1
            w.in_flight -= n
            w.scored += n
            w.busy_s += busy
            self._account_busy()
            self._scored += n
            self._batches += 1
            self._latency_sum += sum((done - t) * k for k, t in flight.taken)
            self._consecutive_errors = 0
            self._in_flight -= n
            self._cond.notify_all()
        return True

    def _account_busy(self) -> None:
        # _score_time is the union of the intervals with work in flight: the pool's busy time
        now = time.perf_counter()
        self._score_time += now - self._busy_mark
        self._busy_mark = now


def _killed_with_its_task(ray) -> tuple[type[BaseException], ...]:
    """Errors of a call whose actor was killed under it that are not ``RayActorError``s: the process
    killed by Ray's memory monitor (``OutOfMemoryError``, the most common way a VLM actor dies) or its
    node lost (``NodeDiedError``). Ray restarts such an actor like any other (``max_restarts``)."""
    return tuple(getattr(ray.exceptions, name) for name in ("OutOfMemoryError", "NodeDiedError")
                 if hasattr(ray.exceptions, name))


def _check_feasible(ray, options: dict[str, Any], num_workers: int) -> None:
    """Refuses actor resources the cluster does not have in total (such actors would wait forever)."""
    total = ray.cluster_resources()
    wanted = {"GPU": options.get("num_gpus") or 0, "CPU": options.get("num_cpus") or 0,
              **(options.get("resources") or {})}
    for name, each in wanted.items():
        if each and num_workers * each > total.get(name, 0):
            key = {"GPU": "num_gpus", "CPU": "num_cpus"}.get(name, f"resources[{name!r}]")
            raise ValueError(
                f"worker_options {key}={each} for num_workers={num_workers} asks for {num_workers * each:g} {name} "
                f"but the Ray cluster has {total.get(name, 0):g}: lower num_workers or {key}, or add nodes "
                "(ray start --address=<head>).")
