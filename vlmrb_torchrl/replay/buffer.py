"""make_vlm_replay_buffer: storage + sampler + clip stream + asynchronous scorer in one call."""

from __future__ import annotations

from multiprocessing.context import get_spawning_popen
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key
from torchrl.data import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer
from torchrl.data.replay_buffers.storages import Storage

from vlmrb_torchrl._signature import init_signature
from vlmrb_torchrl.scoring.clip_scoring import make_clip_scoring
from vlmrb_torchrl.scoring.clips import ClipSpec, ClipStream
from vlmrb_torchrl.scoring.render import StateRenderer
from vlmrb_torchrl.replay.sampler import VLMPrioritizedSampler
from vlmrb_torchrl.scoring.transform import VLMScoreTransform
from vlmrb_torchrl.scoring.backends import make_async_scorer
from vlmrb_torchrl.scoring.worker import AsyncScorer

__all__ = ["VLMReplayBuffer", "make_vlm_replay_buffer"]


@init_signature
class VLMReplayBuffer(TensorDictReplayBuffer):
    """A :class:`~torchrl.data.TensorDictReplayBuffer` whose ``extend`` and ``add`` also feed VLM scoring.

    Built by :func:`make_vlm_replay_buffer`. ``extend(batch)`` stores a collector batch
    (flattened for a 1-D storage; as TorchRL lays it out for a storage with ``ndim > 1``,
    e.g. ``LazyTensorStorage(N, ndim=2)`` for ``[envs, T]`` batches), without the frames
    unless ``store_frames=True``, records the slots' generations, cuts complete clips from
    the frames with its :class:`ClipStream` and submits them to its :class:`AsyncScorer`;
    scores land in the sampler when ready. ``add(transition)`` does the same for one step (what
    ``Collector(..., replay_buffer=rb, extend_buffer=False)`` calls). Everything else —
    ``sample``, ``update_tensordict_priority``, ``state_dict``, ``dumps`` — is TorchRL's.

    The buffer pickles (``copy.deepcopy`` too) like TorchRL's: the copy gets its own scorer
    worker with the same settings, its queue empty (clips queued in the original are scored
    there only). Sending it to a spawned process is refused by the sampler, as
    :class:`~torchrl.data.PrioritizedSampler` refuses it — unless the buffer was built for
    that (``make_vlm_replay_buffer(..., shared=True, sync=False)``), TorchRL's multi-process
    pattern of ``TensorDictPrioritizedReplayBuffer(shared=True, sync=False)``: the buffer's own
    sampler is then a ``RandomSampler`` every process may hold, and the VLM sampler, the clip
    stream and the scorer (:attr:`prioritized_sampler`, ...) stay in the process that built it,
    the owner. A process it is sent to (a worker of ``MultiSyncCollector`` or ``MultiAsyncCollector``
    built with ``replay_buffer=rb``, any spawned writer) only writes the shared storage, frames
    included, with ``extend`` or ``add`` (no priorities there); the owner reads the rows written
    since it last looked at each ``sample()`` (or :meth:`catch_up`): marks their slots written,
    cuts their clips and queues them for scoring, then samples with the VLM sampler. Clips are cut
    from the stored rows, in the order they were written (``clips_from=`` is not available there).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl import ClipSpec, VLMReplayBuffer, make_vlm_replay_buffer
        >>> def episode(length, event_at):  # one collector trajectory with a privileged progress flag
        ...     step = torch.arange(length)
        ...     return TensorDict({"observation": torch.randn(length, 3),
        ...                        ("collector", "traj_ids"): torch.zeros(length, dtype=torch.long),
        ...                        ("next", "done"): step == length - 1,
        ...                        ("next", "progress_event"): step == event_at}, batch_size=[length])
        >>> with make_vlm_replay_buffer(1_000, "oracle:minigrid", clip_spec=ClipSpec(clip_len=4),
        ...                            batch_size=16) as rb:
        ...     isinstance(rb, VLMReplayBuffer)
        ...     index = rb.extend(episode(12, event_at=8))  # stored; its clips are queued for scoring
        ...     _ = rb.add(episode(1, event_at=-1)[0])       # one transition (what a collector's add calls)
        True
        >>> rb.sampler.scores(index).tolist()  # leaving the block scored every clip: 5..8 contain the event
        [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
        >>> len(rb), rb.sample().batch_size, "observation" in rb.sample().keys()
        (13, torch.Size([16]), True)
    """

    def __init__(
        self,
        *,
        clip_stream: ClipStream,
        scoring_transform: VLMScoreTransform,
        async_scorer: AsyncScorer,
        frame_keys: list[NestedKey],
        store_frames: bool,
        prioritized_sampler: VLMPrioritizedSampler | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.clip_stream = clip_stream
        self.scoring_transform = scoring_transform
        self.async_scorer = async_scorer
        self._frame_keys = frame_keys
        self._store_frames = store_frames
        # sync=False (given a prioritized sampler): kwargs' sampler is a RandomSampler any process may hold
        self._sync = prioritized_sampler is None
        self._prioritized_sampler = prioritized_sampler
        self._written_seen = 0  # sync=False: writes whose rows the owner has cut clips from
        if prioritized_sampler is not None:  # the generator given (set by TorchRL on rb.sampler) draws its samples
            prioritized_sampler._rng = getattr(self, "_rng", None)

    @property
    def scorer(self):
        return self.scoring_transform.scorer

    @property
    def prioritized_sampler(self) -> VLMPrioritizedSampler:
        """The :class:`VLMPrioritizedSampler` (``rb.sampler`` itself unless the buffer is ``sync=False``)."""
        if self._sync:
            return self._sampler
        if self._prioritized_sampler is None:
            raise RuntimeError("this VLMReplayBuffer (sync=False) was sent to another process, which writes the "
                               "shared storage only: sample, score and update priorities in the process that built it.")
        return self._prioritized_sampler

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        if not self._sync and get_spawning_popen() is not None:
            # a writer process: storage and writer only; sampling and scoring stay with the owner
            # (and no generator: a writer never samples, and a generator's state as TorchRL pickles it cannot
            # be sent to a spawned process: "unable to resize file", as for TensorDictReplayBuffer(shared=True))
            for name in ("_prioritized_sampler", "clip_stream", "scoring_transform", "async_scorer", "_rng"):
                state[name] = None
        return state

    def set_rng(self, generator: torch.Generator | None) -> None:
        super().set_rng(generator)
        if getattr(self, "_prioritized_sampler", None) is not None:  # sync=False: the owner's sampler draws
            self._prioritized_sampler._rng = generator

    def empty(self, empty_write_count: bool = True) -> None:
        """Empties the buffer as TorchRL does and drops the clip stream's pending steps (their rows are gone: a
        trajectory that goes on starts new clips). For a ``sync=False`` buffer in its owner, the VLM sampler is
        emptied too (as ``TensorDictPrioritizedReplayBuffer(sync=False).empty`` does) and the rows written before
        are not taken in. A multi-process collector calls it after writing one row to shape an uninitialised
        storage."""
        super().empty(empty_write_count=empty_write_count)
        if self.clip_stream is not None:
            self.clip_stream.reset()
        if not self._sync and self._prioritized_sampler is not None:
            with self._replay_lock, self._write_lock:
                self._prioritized_sampler._empty()
                self._written_seen = int(self.write_count)

    # ------------------------------------------------------------------ sync=False: the owner's side
    def catch_up(self) -> None:
        """``sync=False``: takes in the rows written since the last call, by any process — marks their
        slots written in the VLM sampler, cuts their clips and queues them for scoring. ``sample()``,
        :meth:`flush_clips` and :meth:`vlm_stats` call it; nothing for a ``sync=True`` buffer."""
        if self._sync:
            return
        sampler = self.prioritized_sampler
        with self._replay_lock, self._write_lock:  # (the writers hold the write lock while they write)
            count, seen, capacity = int(self.write_count), self._written_seen, self._storage.max_size
            if count == seen:
                return
            if count < seen:  # the buffer was emptied in another process: forget what was taken in, as TorchRL
                seen = 0
                sampler._empty()
                self.clip_stream.reset()
            first = max(seen, count - capacity)  # rows written before were overwritten already
            index = torch.arange(first, count) % capacity
            rows = self._storage.get(index)
            self._written_seen = count
        if first > seen:  # trajectories lost rows: end their clips where they were
            self.async_scorer.submit(self.clip_stream.flush())
        sampler.mark_update(index, storage=self._storage)
        self._push(rows, index)

    def _sample(self, batch_size: int) -> tuple[Any, dict]:
        if self._sync:
            return super()._sample(batch_size)
        self.catch_up()
        with self._replay_lock, self._write_lock:
            index, info = self.prioritized_sampler.sample(self._storage, batch_size)
            info["index"] = index
            data = self._storage.get(index)
        data = self._collate_fn(data)
        if self._transform is not None and len(self._transform):
            with data.unlock_():
                data = self._transform(data)
        return data, info

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        if self._sync:
            return super().update_priority(index, priority)
        with self._replay_lock, self._write_lock:
            self.prioritized_sampler.update_priority(index, priority, storage=self._storage)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        if self._sync:
            return super().update_tensordict_priority(data)
        data = data.reshape(-1)  # (one transition, batch_size=[], too)
        priority = data.get(self.priority_key, None)
        if priority is None:  # as TorchRL's: the default priority (new slots get it anyway when taken in)
            priority = torch.full((data.shape[0],), float(self.prioritized_sampler.default_priority))
        else:
            reduce = {"max": torch.amax, "min": torch.amin, "mean": torch.mean, "sum": torch.sum,
                      "median": lambda x, dim: x.median(dim).values}[self.prioritized_sampler.reduction]
            priority = reduce(priority.reshape(data.shape[0], -1), dim=1)
        self.update_priority(data.get("index").reshape(-1), priority)

    def extend(
        self,
        tensordict: TensorDictBase,
        *,
        update_priority: bool | None = None,
        clips_from: TensorDictBase | None = None,
    ) -> torch.Tensor:
        """Stores a (collector) batch and queues its clips for scoring.

        Args:
            tensordict (TensorDictBase): ``[N]`` or ``[E, T]`` data, stored flattened in a
                1-D storage and as TorchRL stores it (``dim_extend``) in an ``ndim > 1`` one.

        Keyword Args:
            update_priority (bool, optional): as in TorchRL.
            clips_from (TensorDictBase, optional): the batch to cut clips from when the stored
                data was rewritten (e.g. n-step returns replace ``("next", ...)`` entries with
                those ``n`` steps ahead): same layout and order as ``tensordict``.
        """
        data = tensordict
        if self._storage_ndim() == 1 and tensordict.ndim > 1:
            data = tensordict.reshape(-1)
        if not self._sync:  # the owner cuts clips from what is stored (catch_up)
            if clips_from is not None:
                raise ValueError("a sync=False VLMReplayBuffer cuts clips from the stored rows: clips_from= is not "
                                 "available; store what the clips should show.")
            return super().extend(data, update_priority=update_priority)
        stored = data if self._store_frames else data.exclude(*self._frame_keys)
        index = super().extend(stored, update_priority=update_priority)
        self.score_batch(tensordict if clips_from is None else clips_from, index)
        return index

    def add(self, data: TensorDictBase) -> int:
        """Stores one transition (``batch_size=[]``) and queues the clips it completes for scoring.

        What ``Collector(..., replay_buffer=rb, extend_buffer=False)`` calls for each step of a
        single (unbatched) env. A storage with ``ndim > 1`` takes batches only (``extend``), as
        TorchRL's ``TensorDictReplayBuffer.add`` cannot write one there.

        Returns:
            the slot written.
        """
        if self._storage_ndim() > 1:
            raise ValueError(f"add() cannot write one step into a storage with ndim={self._storage_ndim()} (TorchRL's "
                             "add does not either): use extend() with [envs, T] batches, e.g. "
                             "Collector(..., replay_buffer=rb, extend_buffer=True).")
        if data.batch_dims:
            raise ValueError(f"add() stores one transition (batch_size=[]), got batch_size={list(data.batch_size)}: "
                             "use extend() for batches (e.g. Collector(..., extend_buffer=True) with batched envs).")
        if not self._sync:  # as TensorDictPrioritizedReplayBuffer(sync=False).add: no priority here (a writer
            # process has no prioritized sampler; the owner gives the slot the default priority when it takes it in)
            if self._transform is not None:
                data = self._transform.inv(data)
            if data is None:
                return torch.zeros((0, 1), dtype=torch.long)
            index = self._add(data)
            if index is not None:
                self._set_index_in_td(data, index)
            return index
        stored = data if self._store_frames else data.exclude(*self._frame_keys)
        index = super().add(stored)
        self._push(data.unsqueeze(0), torch.as_tensor(index).reshape(1))
        return index

    def score_batch(self, batch: TensorDictBase, index: torch.Tensor) -> None:
        """Feeds a batch already written at ``index`` to the clip stream and the scorer.

        Use it when the data went into the storage some other way (``rb.extend`` does it
        for you). ``batch`` must still hold the frames and the trajectory ids; ``batch`` and
        ``index`` are what was given to and returned by ``extend``.
        """
        try:  # only what the stream reads is reshaped (a collector batch has ~30 entries)
            batch = batch.select(*self.clip_stream.in_keys)
        except KeyError:
            pass  # the stream's push names what is missing, and what the batch holds
        if self._storage_ndim() > 1 and self.dim_extend > 0 and batch.ndim > self.dim_extend:
            batch = batch.transpose(self.dim_extend, 0)  # the layout TorchRL's extend wrote
        self._push(batch.reshape(-1) if batch.ndim > 1 else batch, index)

    def _push(self, rows: TensorDictBase, index: torch.Tensor) -> None:
        """``rows``: 1-D, one per slot of ``index`` (slots, or an ``ndim > 1`` storage's coordinates)."""
        sampler = self.prioritized_sampler
        if self._storage_ndim() > 1:
            index = sampler.slots(index)  # row-major coordinates -> the sampler's slot numbers
        else:
            index = torch.as_tensor(index).reshape(-1)
        generation = sampler.generations(index)
        if sampler.spread is not None:  # episode credit walks back along the steps: link them before any score
            sampler.link(index, self.clip_stream.predecessors(rows, index))
        self.async_scorer.submit(self.clip_stream.push(rows, index, generation))

    def _storage_ndim(self) -> int:
        return getattr(self._storage, "ndim", 1)

    def flush_clips(self) -> None:
        """Emits the pending (padded) clips of unfinished trajectories for scoring."""
        self.catch_up()
        self.async_scorer.submit(self.clip_stream.flush())

    def vlm_stats(self) -> dict[str, float | int]:
        """Sampler statistics plus the scorer's, prefixed ``scorer/``."""
        self.catch_up()
        stats = dict(self.prioritized_sampler.stats())
        stats.update({f"scorer/{k}": v for k, v in self.async_scorer.stats().items()})
        stats["clip_stream/frames_held"] = self.clip_stream.num_frames_held
        return stats

    def close(self, *, flush: bool = True, timeout: float | None = None) -> None:
        """Scores the pending tail clips (``flush``), waits for the scorer and stops it, within
        ``timeout`` seconds in all (see :meth:`AsyncScorer.close`). A writer process's copy of a
        ``sync=False`` buffer has nothing to close."""
        if self.async_scorer is None:
            return
        try:
            if flush:
                self.flush_clips()
        finally:
            self.async_scorer.close(drain=flush, timeout=timeout)

    def __enter__(self) -> VLMReplayBuffer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            try:
                self.close(flush=False)
            except RuntimeError:
                pass


def make_vlm_replay_buffer(
    capacity: int,
    scorer,
    *,
    clip_spec: ClipSpec | None = None,
    batch_size: int | None = None,
    storage: Storage | None = None,
    frame_key: NestedKey = "pixels",
    traj_key: NestedKey = ("collector", "traj_ids"),
    store_frames: bool = False,
    frame_size: int | tuple[int, int] | None = None,
    grid: bool = False,
    backend: Literal["thread", "process", "ray"] = "thread",
    max_pending: int = 4096,
    scorer_batch_size: int = 32,
    on_full: Literal["drop_oldest", "block"] = "drop_oldest",
    on_scorer_error: Literal["raise", "skip"] = "raise",
    max_consecutive_scorer_errors: int | None = 10,
    scorer_options: dict[str, Any] | None = None,
    generator: torch.Generator | None = None,
    sampler_kwargs: dict[str, Any] | None = None,
    sync: bool = True,
    renderer: StateRenderer | None = None,
    **rb_kwargs: Any,
) -> VLMReplayBuffer:
    """Builds a VLM-RB replay buffer: storage, sampler, clip stream and async scorer in one call.

    Args:
        capacity (int): storage size.
        scorer: a :class:`~vlmrb_torchrl.scorers.Scorer` or a spec string for
            :func:`~vlmrb_torchrl.scorers.make_scorer` (e.g. ``"oracle:minigrid"``).

    Keyword Args:
        clip_spec (ClipSpec): clip length, stride, frames sent, score assignment.
            Defaults to ``ClipSpec()`` (32 steps, stride 1, all frames, ``"start"``).
        batch_size (int, optional): default ``rb.sample()`` batch size.
        storage (Storage, optional): defaults to ``LazyTensorStorage(capacity)``.
        frame_key (NestedKey): the rendered frames in collector batches. Frames are only
            carried when the scorer needs them (its ``in_keys`` name ``frame_key``).
        traj_key (NestedKey): trajectory ids, ``("collector", "traj_ids")`` from TorchRL's
            collectors.
        store_frames (bool): keep frames in the storage too (for offline re-scoring).
            Defaults to ``False``: frames live only in the clip stream until scored.
        frame_size, grid: passed to :class:`VLMScoreTransform`. The stream and the
            transform come from :func:`~vlmrb_torchrl.make_clip_scoring`.
        backend, max_pending, scorer_batch_size, on_full, on_scorer_error,
            max_consecutive_scorer_errors: passed to
            :func:`~vlmrb_torchrl.scoring.backends.make_async_scorer` (as ``batch_size``,
            ``on_error`` and ``max_consecutive_errors`` for the last three).
        scorer_options (dict, optional): more :class:`AsyncScorer` arguments, e.g. for
            ``backend="ray"``: ``num_workers``, ``worker_options``, ``scorer_factory``, ``ray_address``.
        generator (torch.Generator, optional): the buffer's random generator (seed it for
            reproducible sampling).
        sampler_kwargs (dict, optional): :class:`VLMPrioritizedSampler` arguments
            (``lambda_max``, ``warmup``, ``td_boost``, ...).
        sync (bool): ``False`` builds the buffer for writers in other processes, with
            ``shared=True`` (TorchRL's ``TensorDictPrioritizedReplayBuffer(shared=True, sync=False)``
            pattern; see :class:`VLMReplayBuffer`): 1-D storages only, frames stored (the owner cuts
            clips from the stored rows). Initialise the storage in the owner (one ``extend``) or use a
            ``LazyMemmapStorage`` before sending the buffer, so that every process writes the same memory.
            Defaults to ``True``.
        renderer (StateRenderer, optional): ψ: the envs write ``renderer.state_key`` (a few bytes per
            step) instead of ``frame_key``, and the frames a clip shows are rendered from those states
            in the scorer's thread, process or Ray actor (:func:`~vlmrb_torchrl.make_clip_scoring`).
            Defaults to ``None``: frames are passed.
        **rb_kwargs: other :class:`~torchrl.data.TensorDictReplayBuffer` arguments (``shared=True``, ...).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl import ClipSpec, make_vlm_replay_buffer
        >>> rb = make_vlm_replay_buffer(100, "oracle:minigrid", clip_spec=ClipSpec(clip_len=4),
        ...                             batch_size=8)
        >>> batch = TensorDict({"observation": torch.zeros(10, 3),
        ...                     ("collector", "traj_ids"): torch.zeros(10, dtype=torch.long),
        ...                     ("next", "done"): torch.arange(10) == 9,
        ...                     ("next", "progress_event"): torch.arange(10) == 6}, batch_size=[10])
        >>> index = rb.extend(batch)
        >>> rb.close()
        >>> rb.sampler.scores(torch.arange(10)).tolist()  # clips starting at 3..6 contain the event
        [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
        >>> rb.sample().batch_size
        torch.Size([8])
    """
    if isinstance(scorer, str):
        from vlmrb_torchrl.scorers import make_scorer

        scorer = make_scorer(scorer)
    clip_spec = clip_spec if clip_spec is not None else ClipSpec()
    sampler = VLMPrioritizedSampler(capacity, **(sampler_kwargs or {}))
    sampler.provenance = dict(getattr(scorer, "provenance", {}) or {})
    clip_stream, transform = make_clip_scoring(
        scorer, clip_spec, frame_key=frame_key, traj_key=traj_key, frame_size=frame_size, grid=grid,
        renderer=renderer,
    )
    storage = storage if storage is not None else LazyTensorStorage(capacity)
    if not sync and getattr(storage, "ndim", 1) != 1:
        raise ValueError(f"sync=False takes a 1-D storage (as TorchRL's TensorDictPrioritizedReplayBuffer), got "
                         f"ndim={storage.ndim}.")
    async_scorer = make_async_scorer(transform, sampler, backend=backend, max_pending=max_pending,
                                     batch_size=scorer_batch_size, on_full=on_full, on_error=on_scorer_error,
                                     max_consecutive_errors=max_consecutive_scorer_errors, **(scorer_options or {}))
    carried = frame_key if renderer is None else renderer.state_key  # what the envs write for the scorer
    frame_keys = [carried, unravel_key(("next", carried))]
    return VLMReplayBuffer(
        clip_stream=clip_stream, scoring_transform=transform, async_scorer=async_scorer,
        frame_keys=frame_keys, store_frames=store_frames or not sync,
        storage=storage, sampler=sampler if sync else RandomSampler(), prioritized_sampler=None if sync else sampler,
        batch_size=batch_size, generator=generator, **rb_kwargs,
    )
