"""VLMPrioritizedSampler: a mixture of VLM-prioritized and uniform replay (VLM-RB)."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data.replay_buffers import PrioritizedSampler
from torchrl.data.replay_buffers.storages import Storage

from vlmrb_torchrl._sumtree import TreeBackend, make_tree, resolve_backend

__all__ = ["VLMPrioritizedSampler"]

_STATE_SCHEMA_VERSION = 1
_EMPTY_STORAGE_ERROR = "Cannot sample from an empty storage: extend the replay buffer first."
_REDUCTIONS = ("max", "min", "mean", "median", "sum")


def _as_index(index: int | torch.Tensor | np.ndarray, capacity: int) -> np.ndarray:
    """Flattens a storage index to a 1-D int64 NumPy array and checks its range."""
    if isinstance(index, tuple):
        if len(index) != 1:
            raise ValueError(
                "VLMPrioritizedSampler supports 1-D storages only; got a "
                f"{len(index)}-tuple index."
            )
        index = index[0]
    if isinstance(index, torch.Tensor):
        if index.is_floating_point() or index.dtype == torch.bool:
            raise TypeError(f"index must hold integers, got dtype {index.dtype}.")
        if index.dtype != torch.int64 or index.device.type != "cpu":
            index = index.to("cpu", torch.int64)
        arr = index.detach().reshape(-1).numpy()
    else:
        arr = np.asarray(index)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"index must hold integers, got dtype {arr.dtype}.")
        arr = arr.reshape(-1).astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= capacity):
        raise ValueError(
            f"index out of range: storage slots are 0..{capacity - 1}, got values in "
            f"[{int(arr.min())}, {int(arr.max())}]."
        )
    return arr


def _as_values(values: float | torch.Tensor | np.ndarray, n: int, name: str) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        arr = values.detach().reshape(-1).cpu().numpy().astype(np.float64)
    else:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 1 and n != 1:
        arr = np.full(n, arr[0])
    if arr.size != n:
        raise ValueError(f"{name} has {arr.size} values but index has {n} entries.")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite; got NaN or inf.")
    return arr


class VLMPrioritizedSampler(PrioritizedSampler):
    r"""Samples transitions from a mixture of VLM-prioritized and uniform replay.

    This is the sampler of VLM-guided experience replay (VLM-RB, arXiv 2602.01915).
    A frozen vision-language model scores short clips of the agent's experience; the
    scores arrive asynchronously through :meth:`update_scores` and the learner
    samples from

    .. math::

        q_t(i) = \lambda_t \frac{p_i}{\sum_j p_j} + (1 - \lambda_t) \frac{1}{N}

    over the :math:`N` filled slots, where :math:`\lambda_t` rises linearly from 0 to
    ``lambda_max`` over ``warmup`` calls to :meth:`sample`.

    The priority :math:`p_i` of a scored slot is its VLM score binarised at
    ``threshold`` (1 if ``score > threshold`` else 0, as in the paper) or the raw
    score when ``threshold=None``, floored at ``eps`` so that no transition becomes
    unreachable. An unscored slot (its clip is not scored yet) uses the current
    ``default_priority``: ``"mean"`` of the priorities of the scored slots,
    ``"max"`` priority written so far, or a fixed float. Both are recomputed at
    every sample, so a slot inserted before any score arrived is not frozen at a
    stale default.

    With ``td_boost=True`` (the paper's continuous-control variant) the prioritized
    component becomes :math:`\propto p_i \cdot (|\delta_i| + \epsilon)^\alpha`, where
    the TD errors :math:`\delta_i` arrive exactly as with TorchRL's PER: through
    ``rb.update_tensordict_priority(td)`` or ``rb.update_priority(index, priority)``
    (new slots get the largest TD priority seen so far). Without ``td_boost``, TD
    priorities are stored but do not change sampling.

    Every slot has a *generation* that the buffer's writer bumps (through
    :meth:`mark_update`) each time it writes the slot. A producer records
    :meth:`generations` right after ``rb.extend`` and passes them back with the
    scores; a score whose generation is no longer the slot's (the ring buffer wrapped
    around while the clip was being scored) is dropped and counted in
    :meth:`stats`. :meth:`update_scores` may be called from another thread while
    the learner samples.

    Sampling is :math:`O(B \log N)` on sum trees (TorchRL's C++ segment trees when
    they load with the installed torch, else a vectorised NumPy tree with the same
    results). Each sample returns ``info["priority_weight"]``, the importance
    weights :math:`w_i = (N q_t(i))^{-\beta} / \max_j (N q_t(j))^{-\beta}` with the
    maximum taken over all filled slots (all ones for ``beta=0``, the paper's
    setting).

    .. note::
        The class derives from :class:`~torchrl.data.PrioritizedSampler` only so
        that TorchRL routes priorities to it: ``rb.update_tensordict_priority``
        returns silently for any other sampler. It does not use its parent's
        trees or state and calls none of its parent's methods.

    Args:
        max_capacity (int): the capacity of the storage the sampler is used with.

    Keyword Args:
        lambda_max (float, optional): final weight of the prioritized component,
            in [0, 1]. Defaults to 0.5 (the paper's value).
        warmup (int, optional): number of :meth:`sample` calls over which
            :math:`\lambda_t` rises linearly from 0 to ``lambda_max``; 0 starts at
            ``lambda_max``. Assigning :attr:`lambda_` (e.g. from a TorchRL
            :class:`~torchrl.data.replay_buffers.scheduler.LinearScheduler`)
            replaces this built-in schedule. Defaults to 100_000.
        default_priority (str or float, optional): priority of unscored slots:
            ``"mean"``, ``"max"`` or a float >= 0. Defaults to ``"mean"``.
        threshold (float or None, optional): binarisation threshold in [0, 1], or
            ``None`` to use continuous scores. Defaults to 0.5.
        eps (float, optional): priority floor (and TD offset with ``td_boost``).
            Defaults to 0.01.
        td_boost (bool, optional): multiply priorities by
            :math:`(|\delta| + \epsilon)^\alpha`. Defaults to ``False``.
        alpha (float, optional): TD exponent for ``td_boost``. Defaults to 0.6.
        beta (float, optional): importance-sampling exponent. Defaults to 0.0.
        reduction (str, optional): how
            ``rb.update_tensordict_priority`` reduces multi-dimensional TD errors
            to one per slot. Defaults to ``"max"``.
        tree_backend (str, optional): ``"auto"``, ``"torchrl"`` or ``"numpy"``.
            Defaults to ``"auto"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from vlmrb_torchrl import VLMPrioritizedSampler
        >>> sampler = VLMPrioritizedSampler(100, lambda_max=1.0, warmup=0)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler,
        ...                             batch_size=1000, generator=torch.Generator().manual_seed(0))
        >>> index = rb.extend(TensorDict(obs=torch.arange(4.0), batch_size=[4]))
        >>> generation = sampler.generations(index)
        >>> sampler.update_scores(index, torch.tensor([0.9, 0.1, 0.2, 0.3]), generation)
        4
        >>> counts = torch.bincount(rb.sample()["index"], minlength=4)
        >>> (counts[0] / 1000).item() > 0.95  # p = [1, .01, .01, .01]
        True
        >>> sampler.stats()["fraction_scored"]
        1.0
    """

    def __init__(
        self,
        max_capacity: int,
        *,
        lambda_max: float = 0.5,
        warmup: int = 100_000,
        default_priority: Literal["mean", "max"] | float = "mean",
        threshold: float | None = 0.5,
        eps: float = 0.01,
        td_boost: bool = False,
        alpha: float = 0.6,
        beta: float = 0.0,
        reduction: str = "max",
        tree_backend: TreeBackend = "auto",
    ) -> None:
        # PrioritizedSampler.__init__ is deliberately not called: see the class note.
        if isinstance(max_capacity, bool) or not isinstance(max_capacity, int) or max_capacity < 1:
            raise ValueError(f"max_capacity must be an int >= 1, got max_capacity={max_capacity!r}.")
        self._max_capacity = max_capacity
        self.lambda_max = lambda_max
        self.warmup = warmup
        self.default_priority_mode = default_priority
        self._threshold = self._check_threshold(threshold)
        self._eps = self._check_nonneg("eps", eps)
        if not isinstance(td_boost, bool):
            raise TypeError(f"td_boost must be a bool, got td_boost={td_boost!r}.")
        self._td_boost = td_boost
        self._alpha = self._check_nonneg("alpha", alpha)
        self.beta = beta
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}.")
        self.reduction = reduction
        self._backend = resolve_backend(tree_backend)
        self.provenance: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._reset_state()

    # ------------------------------------------------------------------ config
    @staticmethod
    def _check_nonneg(name: str, value: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {name}={value!r}.")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {name}={value!r}.")
        return float(value)

    @staticmethod
    def _check_unit(name: str, value: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
            raise TypeError(f"{name} must be a number in [0, 1], got {name}={value!r}.")
        value = float(value)
        if not 0.0 <= value <= 1.0:  # also rejects NaN
            raise ValueError(f"{name} must be in [0, 1], got {name}={value!r}.")
        return value

    @classmethod
    def _check_threshold(cls, threshold: float | None) -> float | None:
        return None if threshold is None else cls._check_unit("threshold", threshold)

    @property
    def max_size(self) -> int:
        return self._max_capacity

    @property
    def lambda_max(self) -> float:
        return self._lambda_max

    @lambda_max.setter
    def lambda_max(self, value: float) -> None:
        self._lambda_max = self._check_unit("lambda_max", value)

    @property
    def warmup(self) -> int:
        return self._warmup

    @warmup.setter
    def warmup(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"warmup must be an int >= 0 (sample calls), got warmup={value!r}.")
        self._warmup = value

    @property
    def default_priority_mode(self) -> str | float:
        """The ``default_priority`` setting for unscored slots (``"mean"``, ``"max"`` or a float)."""
        return self._default_priority_mode

    @default_priority_mode.setter
    def default_priority_mode(self, value: str | float) -> None:
        if isinstance(value, str):
            if value not in ("mean", "max"):
                raise ValueError(
                    f"default_priority must be 'mean', 'max' or a float >= 0, got {value!r}."
                )
        else:
            value = self._check_nonneg("default_priority", value)
        self._default_priority_mode = value

    @property
    def threshold(self) -> float | None:
        return self._threshold

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def td_boost(self) -> bool:
        return self._td_boost

    @property
    def alpha(self) -> float:
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        value = self._check_nonneg("alpha", value)
        with self._lock:
            self._alpha = value
            if self._td_boost:
                self._rebuild_trees()

    @property
    def beta(self) -> float:
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = self._check_nonneg("beta", float(value) if isinstance(value, np.floating) else value)

    @property
    def lambda_(self) -> float:
        r"""The current mixture weight :math:`\lambda_t`.

        Follows the built-in linear warm-up until it is assigned; an assigned value
        (for instance by ``LinearScheduler(sampler, "lambda_", 0.5, num_steps)``)
        then holds until the next assignment.
        """
        if self._lambda_override is not None:
            return self._lambda_override
        if self._warmup == 0:
            return self._lambda_max
        return self._lambda_max * min(1.0, self._sample_calls / self._warmup)

    @lambda_.setter
    def lambda_(self, value: float) -> None:
        self._lambda_override = self._check_unit("lambda_", value)

    @property
    def default_priority(self) -> float:
        """TD priority given to new slots (the largest seen so far, as in PER).

        This is the quantity TorchRL's buffers ask a prioritized sampler for; the
        priority of *unscored* slots is :attr:`unscored_priority`.
        """
        return self._max_td

    @property
    def unscored_priority(self) -> float:
        """The priority :math:`\\bar p` currently used for slots without a score."""
        with self._lock:
            return self._unscored_priority()

    # ------------------------------------------------------------------ state
    def _reset_state(self, keep_generations: bool = False) -> None:
        cap = self._max_capacity
        generation = getattr(self, "_generation", None)
        self._score = np.zeros(cap, dtype=np.float32)
        self._scored = np.zeros(cap, dtype=bool)
        self._filled = np.zeros(cap, dtype=bool)
        self._td = np.zeros(cap, dtype=np.float32)
        if not (keep_generations and generation is not None):
            self._generation = np.zeros(cap, dtype=np.int64)
        # scratch for de-duplicating indices in O(M) rather than sorting
        self._scratch = np.zeros(cap, dtype=np.int64)
        self._n_filled = 0
        self._n_scored = 0
        self._sample_calls = 0
        self._drawn = 0
        self._drawn_positive = 0
        self._lambda_override: float | None = None
        self._stale_drops = 0
        self._max_p: float | None = None
        self._max_td = 1.0
        self._tree_v = make_tree(cap, "sum", self._backend)  # scored: p * g
        self._tree_u = make_tree(cap, "sum", self._backend)  # unscored: g
        # sum of p over scored slots, for default_priority="mean"; equals tree_v without td_boost
        self._tree_p = make_tree(cap, "sum", self._backend) if self._td_boost else None
        self._min_trees = None  # built on first use with beta > 0

    def _priority(self, score: np.ndarray) -> np.ndarray:
        if self._threshold is None:
            p = score.astype(np.float64)
        else:
            p = (score > self._threshold).astype(np.float64)
        return np.maximum(p, self._eps)

    def _td_factor(self, td: np.ndarray) -> np.ndarray:
        return (td.astype(np.float64) + self._eps) ** self._alpha

    def _leaves(self, index: np.ndarray | slice):
        filled, scored = self._filled[index], self._scored[index]
        p = self._priority(self._score[index])
        g = self._td_factor(self._td[index]) if self._td_boost else np.ones_like(p)
        is_scored = filled & scored
        is_unscored = filled & ~scored
        return p, g, is_scored, is_unscored

    def _refresh(self, index: np.ndarray, unscored_changed: np.ndarray | None = None) -> None:
        """Rewrites the tree leaves of ``index`` (unique) from the per-slot arrays.

        ``unscored_changed`` (a mask over ``index``) limits the unscored tree's update
        to the slots whose unscored leaf changed; ``None`` updates all of them.
        """
        p, g, is_scored, is_unscored = self._leaves(index)
        self._tree_v.update(index, np.where(is_scored, p * g, 0.0))
        if unscored_changed is None:
            self._tree_u.update(index, np.where(is_unscored, g, 0.0))
        elif unscored_changed.any():
            self._tree_u.update(index[unscored_changed], np.where(is_unscored, g, 0.0)[unscored_changed])
        if self._tree_p is not None:
            self._tree_p.update(index, np.where(is_scored, p, 0.0))
        if self._min_trees is not None:
            min_v, min_u = self._min_trees
            min_v.update(index, np.where(is_scored, p * g, np.inf))
            min_u.update(index, np.where(is_unscored, g, np.inf))

    def _rebuild_trees(self) -> None:
        p, g, is_scored, is_unscored = self._leaves(slice(None))
        self._tree_v.build(np.where(is_scored, p * g, 0.0))
        self._tree_u.build(np.where(is_unscored, g, 0.0))
        if self._tree_p is not None:
            self._tree_p.build(np.where(is_scored, p, 0.0))
        if self._min_trees is not None:
            self._min_trees = None
            self._ensure_min_trees()

    def _ensure_min_trees(self) -> None:
        if self._min_trees is None:
            p, g, is_scored, is_unscored = self._leaves(slice(None))
            min_v = make_tree(self._max_capacity, "min", self._backend)
            min_u = make_tree(self._max_capacity, "min", self._backend)
            min_v.build(np.where(is_scored, p * g, np.inf))
            min_u.build(np.where(is_unscored, g, np.inf))
            self._min_trees = (min_v, min_u)

    def _unscored_priority(self) -> float:
        mode = self._default_priority_mode
        if mode == "mean":
            if self._n_scored == 0:
                return 1.0
            p_sum_tree = self._tree_p if self._tree_p is not None else self._tree_v
            total = p_sum_tree.root()
            return max(total / self._n_scored, self._eps)
        if mode == "max":
            return 1.0 if self._max_p is None else self._max_p
        return max(mode, self._eps)

    def _dedupe(
        self, index: np.ndarray, values: np.ndarray | None = None, reduce: str = "replace"
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """One entry per slot: the last write wins (``"replace"``) or the largest (``"max"``).

        Must be called under the lock: it uses a shared scratch array so that the
        common case costs two gathers instead of a sort.
        """
        if reduce == "max":
            uniq, inverse = np.unique(index, return_inverse=True)
            out = np.full(len(uniq), -np.inf)
            np.maximum.at(out, inverse, values)
            return uniq, out
        position = np.arange(index.size)
        self._scratch[index] = position  # each slot keeps the position of one write
        keep = self._scratch[index] == position
        if keep.all():
            return index, values
        return index[keep], None if values is None else values[keep]

    def _fill(self, index: np.ndarray) -> None:
        """Marks never-written slots of ``index`` (unique) as filled and unscored."""
        new = index[~self._filled[index]]
        if new.size:
            self._filled[new] = True
            self._td[new] = self._max_td
            self._n_filled += int(new.size)
            self._refresh(new)

    # ------------------------------------------------------------------ writes
    def mark_update(self, index: int | torch.Tensor, *, storage: Storage | None = None) -> None:
        """Called by the writer on every write: bumps generations, resets the slots to unscored."""
        index = _as_index(index, self._max_capacity)
        with self._lock:
            index, _ = self._dedupe(index)
            self._generation[index] += 1
            self._n_filled += int((~self._filled[index]).sum())
            self._n_scored -= int((self._scored[index] & self._filled[index]).sum())
            self._filled[index] = True
            self._scored[index] = False
            self._score[index] = 0.0
            self._td[index] = self._max_td
            self._refresh(index)

    def add(self, index: int) -> None:  # work done in mark_update
        return

    def extend(self, index: torch.Tensor) -> None:  # work done in mark_update
        return

    def generations(self, index: int | torch.Tensor) -> torch.Tensor:
        """Current generation of each slot in ``index`` (what a producer records at insertion)."""
        index = _as_index(index, self._max_capacity)
        with self._lock:
            return torch.from_numpy(self._generation[index].copy())

    def update_scores(
        self,
        index: int | torch.Tensor,
        scores: float | torch.Tensor,
        generation: torch.Tensor | None = None,
        *,
        reduce: Literal["replace", "max"] = "replace",
    ) -> int:
        """Writes VLM scores back; drops those whose slot was rewritten since.

        Args:
            index (int or Tensor): storage slots.
            scores (float or Tensor): one score in [0, 1] per slot.
            generation (Tensor, optional): the slots' generations when the scored
                transitions were inserted (from :meth:`generations`). A score whose
                generation differs from the slot's current one is stale: it is
                dropped and counted. ``None`` applies every score to a filled slot.

        Keyword Args:
            reduce (str, optional): ``"replace"`` overwrites a previous score;
                ``"max"`` keeps the larger one (several clips covering a
                transition). Defaults to ``"replace"``.

        Returns:
            the number of slots whose score was applied.
        """
        if reduce not in ("replace", "max"):
            raise ValueError(f"reduce must be 'replace' or 'max', got reduce={reduce!r}.")
        index = _as_index(index, self._max_capacity)
        scores = _as_values(scores, index.size, "scores")
        if scores.size and (scores.min() < 0.0 or scores.max() > 1.0):
            raise ValueError(
                f"scores must lie in [0, 1]; got values in [{scores.min():.4g}, {scores.max():.4g}]."
            )
        if generation is not None:
            generation = _as_index_like(generation, index.size)
        with self._lock:
            live = self._filled[index]
            if generation is not None:
                live &= self._generation[index] == generation
            n_stale = live.size - int(np.count_nonzero(live))
            if n_stale:
                self._stale_drops += n_stale
                index, scores = index[live], scores[live]
            index, scores = self._dedupe(index, scores, reduce)
            if index.size == 0:
                return 0
            was_scored = self._scored[index]
            if reduce == "max":
                scores = np.where(was_scored, np.maximum(self._score[index], scores), scores)
            self._score[index] = scores
            self._scored[index] = True
            newly_scored = ~was_scored
            self._n_scored += int(np.count_nonzero(newly_scored))
            top = float(self._priority(scores).max())
            self._max_p = top if self._max_p is None else max(self._max_p, top)
            # a re-scored slot's unscored leaf stays 0: only newly scored ones change it
            self._refresh(index, newly_scored)
            return int(index.size)

    def update_priority(
        self,
        index: int | torch.Tensor,
        priority: float | torch.Tensor,
        *,
        storage: Storage | None = None,
    ) -> None:
        """Stores TD priorities (``|td_error|``); they shape sampling only with ``td_boost``.

        Negative indices are skipped, as TorchRL's samplers do for rows a
        ``TensorDictMaxValueWriter`` did not write.
        """
        if isinstance(index, tuple):
            index = index[0] if len(index) == 1 else torch.stack(index, -1)
        if isinstance(index, torch.Tensor):
            index = index.detach().reshape(-1).to("cpu", torch.int64).numpy()
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        priority = np.abs(_as_values(priority, index.size, "priority"))
        keep = index >= 0
        index = _as_index(index[keep], self._max_capacity)
        priority = priority[keep]
        if index.size == 0:
            return
        with self._lock:
            index, priority = self._dedupe(index, priority)
            self._fill(index)
            self._td[index] = priority
            self._max_td = max(self._max_td, float(priority.max()))
            if self._td_boost:
                self._refresh(index)

    # ------------------------------------------------------------------ sampling
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError(_EMPTY_STORAGE_ERROR)
        if getattr(storage, "ndim", 1) != 1:
            raise ValueError(
                f"VLMPrioritizedSampler supports 1-D storages only; got ndim={storage.ndim}. "
                "Flatten collector batches with batch.reshape(-1) before rb.extend."
            )
        if n > self._max_capacity:
            raise RuntimeError(
                f"The storage holds {n} items but the sampler was built with "
                f"max_capacity={self._max_capacity}: give them the same size."
            )
        with self._lock:
            if self._n_filled < n:
                # rows written without passing through this sampler's mark_update
                # (a pre-filled storage): they count as new, unscored transitions
                self._fill(np.arange(n, dtype=np.int64))
            elif self._n_filled > n:
                raise RuntimeError(
                    f"The sampler tracks {self._n_filled} written slots but the storage "
                    f"holds {n}: the storage was emptied or replaced without rb.empty()."
                )
            lam = self.lambda_
            self._sample_calls += 1
            draws = torch.rand(2, batch_size, dtype=torch.float64, generator=self._rng).numpy()
            index = np.minimum((draws[1] * n).astype(np.int64), n - 1)
            prioritized = draws[0] < lam
            scored_mass = self._tree_v.root()
            p_bar = self._unscored_priority()
            unscored_mass = p_bar * self._tree_u.root()
            total = scored_mass + unscored_mass
            if total > 0 and prioritized.any():
                mass = draws[1][prioritized] * total
                in_scored = mass < scored_mass
                picked = np.empty(mass.size, dtype=np.int64)
                picked[in_scored] = self._tree_v.find(mass[in_scored])
                picked[~in_scored] = self._tree_u.find((mass[~in_scored] - scored_mass) / p_bar)
                index[prioritized] = np.minimum(picked, n - 1)
            self._drawn += batch_size
            self._drawn_positive += int(np.count_nonzero(self._scored[index] & (self._score[index] > self._cut)))
            if self._beta == 0.0 or total <= 0 or lam == 0.0:
                weight = torch.ones(batch_size, dtype=torch.float32)
            else:
                weight = torch.from_numpy(
                    self._importance_weights(index, lam, n, total, p_bar).astype(np.float32)
                )
        return torch.from_numpy(index), {"priority_weight": weight}

    def _importance_weights(
        self, index: np.ndarray, lam: float, n: int, total: float, p_bar: float
    ) -> np.ndarray:
        self._ensure_min_trees()
        p, g, is_scored, _ = self._leaves(index)
        v = np.where(is_scored, p * g, p_bar * g)
        q = lam * v / total + (1.0 - lam) / n
        min_v, min_u = self._min_trees
        candidates = []
        if self._n_scored > 0:
            candidates.append(min_v.root())
        if self._n_filled > self._n_scored:
            candidates.append(p_bar * min_u.root())
        q_min = lam * min(candidates) / total + (1.0 - lam) / n
        return np.minimum((q / q_min) ** -self._beta, 1.0)

    def probabilities(self, storage_len: int | None = None) -> torch.Tensor:
        """The exact sampling distribution :math:`q_t` over the filled slots, for inspection.

        ``O(N)``; meant for tests, debugging and plots, not for the training loop.
        """
        with self._lock:
            n = self._n_filled if storage_len is None else storage_len
            p, g, is_scored, _ = self._leaves(slice(0, n))
            v = np.where(is_scored, p * g, self._unscored_priority() * g)
            lam = self.lambda_
            total = v.sum()
            q = (1.0 - lam) / n + (lam * v / total if total > 0 else lam / n)
            return torch.from_numpy(q)

    # ------------------------------------------------------------------ reporting
    def stats(self) -> dict[str, float | int]:
        """Replay statistics for logging.

        Returns a dict with ``num_filled``, ``fraction_scored``, ``mean_score`` (raw
        scores of scored slots), ``positive_fraction`` (scored slots above the
        threshold, or above 0.5 with ``threshold=None``), ``lambda``,
        ``unscored_priority``, ``stale_drops``, ``sample_calls``, and the cumulative
        ``drawn`` / ``drawn_positive`` counts of sampled indices and of those that were
        positive when drawn. Their ratio over an interval, set against ``positive_fraction``,
        says how much more often positives are replayed than they are stored.
        """
        with self._lock:
            n = self._n_filled
            scored = self._scored & self._filled
            scores = self._score[scored]
            cut = self._cut
            return {
                "num_filled": n,
                "fraction_scored": self._n_scored / n if n else 0.0,
                "mean_score": float(scores.mean()) if scores.size else float("nan"),
                "positive_fraction": float((scores > cut).mean()) if scores.size else float("nan"),
                "lambda": self.lambda_,
                "unscored_priority": self._unscored_priority(),
                "stale_drops": self._stale_drops,
                "sample_calls": self._sample_calls,
                "drawn": self._drawn,
                "drawn_positive": self._drawn_positive,
            }

    @property
    def _cut(self) -> float:
        # what counts as a positive in the statistics (the priority itself uses the threshold)
        return 0.5 if self._threshold is None else self._threshold

    def _empty(self) -> None:
        with self._lock:
            self._reset_state(keep_generations=True)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_capacity={self._max_capacity}, lambda_max={self._lambda_max}, "
            f"warmup={self._warmup}, default_priority={self._default_priority_mode!r}, "
            f"threshold={self._threshold}, eps={self._eps}, td_boost={self._td_boost}, "
            f"alpha={self._alpha}, beta={self._beta}, tree_backend={self._backend!r})"
        )

    # ------------------------------------------------------------------ checkpoints
    def _config(self) -> dict[str, Any]:
        return {
            "max_capacity": self._max_capacity,
            "lambda_max": self._lambda_max,
            "warmup": self._warmup,
            "default_priority": self._default_priority_mode,
            "threshold": self._threshold,
            "eps": self._eps,
            "td_boost": self._td_boost,
            "alpha": self._alpha,
            "beta": self._beta,
            "reduction": self.reduction,
        }

    def _scalars(self) -> dict[str, Any]:
        return {
            "_schema_version": _STATE_SCHEMA_VERSION,
            "config": self._config(),
            "sample_calls": self._sample_calls,
            "drawn": self._drawn,
            "drawn_positive": self._drawn_positive,
            "lambda_override": self._lambda_override,
            "stale_drops": self._stale_drops,
            "max_p": self._max_p,
            "max_td": self._max_td,
            "provenance": dict(self.provenance),
        }

    def _arrays(self) -> dict[str, torch.Tensor]:
        return {
            "score": torch.from_numpy(self._score.copy()),
            "scored": torch.from_numpy(self._scored.copy()),
            "filled": torch.from_numpy(self._filled.copy()),
            "td": torch.from_numpy(self._td.copy()),
            "generation": torch.from_numpy(self._generation.copy()),
        }

    def state_dict(self) -> dict[str, Any]:
        """Raw scores, scored mask, TD priorities, generations, schedule position and config."""
        with self._lock:
            return {**self._scalars(), **self._arrays()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        version = state_dict.get("_schema_version")
        if version != _STATE_SCHEMA_VERSION:
            raise ValueError(
                f"Unsupported VLMPrioritizedSampler state schema {version!r} "
                f"(this version reads {_STATE_SCHEMA_VERSION})."
            )
        config = state_dict["config"]
        if config["max_capacity"] != self._max_capacity:
            raise ValueError(
                f"Checkpoint was saved with max_capacity={config['max_capacity']} but this "
                f"sampler has max_capacity={self._max_capacity}."
            )
        with self._lock:
            # the checkpoint's settings win, so that a resumed run samples as before
            self.lambda_max = config["lambda_max"]
            self.warmup = config["warmup"]
            self.default_priority_mode = config["default_priority"]
            self._threshold = self._check_threshold(config["threshold"])
            self._eps = config["eps"]
            self._td_boost = config["td_boost"]
            self._alpha = config["alpha"]
            self.beta = config["beta"]
            self.reduction = config["reduction"]
            self._reset_state()
            for name in ("score", "scored", "filled", "td", "generation"):
                value = state_dict[name]
                value = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
                getattr(self, f"_{name}")[:] = value
            self._n_filled = int(self._filled.sum())
            self._n_scored = int((self._scored & self._filled).sum())
            self._sample_calls = int(state_dict["sample_calls"])
            self._drawn = int(state_dict.get("drawn", 0))  # absent in checkpoints before 0.2
            self._drawn_positive = int(state_dict.get("drawn_positive", 0))
            self._lambda_override = state_dict["lambda_override"]
            self._stale_drops = int(state_dict["stale_drops"])
            self._max_p = state_dict["max_p"]
            self._max_td = float(state_dict["max_td"])
            self.provenance = dict(state_dict.get("provenance", {}))
            self._rebuild_trees()

    def dumps(self, path: str | Path) -> None:
        """Writes the state to ``path``: memory-mapped per-slot arrays plus a JSON file."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with self._lock:
            arrays, scalars = self._arrays(), self._scalars()
        TensorDict(arrays, batch_size=[self._max_capacity]).memmap(path / "slots", existsok=True)
        (path / "sampler_metadata.json").write_text(json.dumps(scalars, indent=2))

    def loads(self, path: str | Path) -> None:
        """Reads a state written by :meth:`dumps`."""
        path = Path(path)
        scalars = json.loads((path / "sampler_metadata.json").read_text())
        arrays = TensorDict.load_memmap(path / "slots")
        self.load_state_dict({**scalars, **{k: arrays[k].clone() for k in arrays.keys()}})

    def __getstate__(self) -> dict[str, Any]:
        return {"state": self.state_dict(), "tree_backend": self._backend}

    def __setstate__(self, state: dict[str, Any]) -> None:
        config = state["state"]["config"]
        self.__init__(**config, tree_backend=state["tree_backend"])
        self.load_state_dict(state["state"])


def _as_index_like(generation: torch.Tensor | np.ndarray, n: int) -> np.ndarray:
    if isinstance(generation, torch.Tensor):
        arr = generation.detach().reshape(-1).to("cpu", torch.int64).numpy()
    else:
        arr = np.asarray(generation, dtype=np.int64).reshape(-1)
    if arr.size != n:
        raise ValueError(f"generation has {arr.size} values but index has {n} entries.")
    return arr
