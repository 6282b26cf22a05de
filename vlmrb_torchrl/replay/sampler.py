"""VLMPrioritizedSampler: a mixture of VLM-prioritized and uniform replay (VLM-RB).

The TorchRL-facing class: argument checks, the lock, the random draws, checkpoints and
TorchRL's ``Sampler`` API. The per-slot state and the trees it samples from live in
:mod:`vlmrb_torchrl.replay._slot_state` (plain NumPy, lock-free).
"""

from __future__ import annotations

import json
import math
import warnings
from multiprocessing.context import get_spawning_popen
import threading
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data.replay_buffers import PrioritizedSampler
from torchrl.data.replay_buffers.storages import Storage
from torchrl.data.replay_buffers.utils import unravel_index

from vlmrb_torchrl._signature import init_signature
from vlmrb_torchrl.replay._sampler_args import (PrioritySetting, Setting, as_index_like, as_values, check_arguments,
                                                check_ceiling, check_nonneg, check_range, check_spread, check_threshold,
                                                check_unit, check_unscored, check_warmup, check_weights_defined,
                                                default_warmup, flatten_index, int_array, to_numpy)
from vlmrb_torchrl.replay._slot_state import SPREAD_ARRAYS, PriorityConfig, SlotState, UnscoredMode
from vlmrb_torchrl.replay._sumtree import TreeBackend, resolve_backend

__all__ = ["VLMPrioritizedSampler", "UniformScoresWarning", "SCORE_CHECK_AFTER"]

#: Scores a sampler takes in before it checks, once, that they do not make its replay uniform.
SCORE_CHECK_AFTER = 1000


class UniformScoresWarning(UserWarning):
    """The first :data:`SCORE_CHECK_AFTER` scores give every transition the same priority: replay is uniform.

    Raised (once per sampler) when continuous scores all fall at or below the threshold (each priority
    ``eps``), when every score is above it (each priority 1), or, with ``threshold=None``, when the scores
    are all equal. Binary scores (exactly 0 or 1) that are all 0 do not warn: no progress in the first
    clips is what a sparse task looks like.
    """

_STATE_SCHEMA_VERSION = 1
_ARRAY_KEYS = ("score", "scored", "filled", "td", "generation")  # per-slot arrays of a checkpoint
_EMPTY_STORAGE_ERROR = "Cannot sample from an empty storage: extend the replay buffer first."
_REDUCTIONS = ("max", "min", "mean", "median", "sum")


@init_signature
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
    unreachable. An unscored slot (its clip is not scored yet) gets the priority
    :math:`\bar p` (:attr:`unscored_priority`) that the ``unscored_priority``
    argument sets: ``"mean"`` of the priorities of the scored slots, ``"max"``
    priority written so far, or a fixed float. :math:`\bar p` is recomputed at
    every sample, so a slot inserted before any score arrived is not frozen at a
    stale value.

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

    ``spread`` (episode credit, an option of this package, not the paper's) lets a positive slot lift the
    transitions that led to it: a slot :math:`d` steps before a slot of priority :math:`p` in the same
    episode gets priority :math:`\max(p_j, p \rho^d)` with :math:`\rho` = ``spread`` (until the credit
    falls to ``eps``). A goal-only label then marks the whole path to the goal as progress, with the
    weight a discounted return would give it, instead of the last ``clip_len`` steps only, which
    also spreads the prioritized mass over many more slots when goal clips are rare. The buffer
    tells the sampler which slot follows which (:meth:`link`; :class:`~vlmrb_torchrl.VLMReplayBuffer`
    does it from the trajectory ids); a rewritten slot breaks the chain.

    ``max_oversampling`` puts a ceiling on how much more often than under uniform replay
    any slot is drawn: :math:`N q_t(i) \le` ``max_oversampling`` for every slot. It lowers
    the mixture weight to the largest :math:`\lambda \le \lambda_t` that keeps the
    most-favoured slot under the ceiling (:attr:`lambda_effective`, recomputed at every
    sample in :math:`O(1)`); the ranking of slots within the prioritized component is
    unchanged. When positives are rare (0.5% of the buffer at :math:`\lambda = 0.5` draws
    each of them ~30 times as often as uniform replay would) this bounds their share of the
    batches at ``max_oversampling`` times their share of the buffer; when they are common
    the ceiling does not bind.

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
            replaces this built-in schedule. ``None``: the one warm-up default,
            ``default_warmup()``, 100_000 (the recipes, which know their run's
            length, pass half of its sample calls). Defaults to ``None``.
        unscored_priority (str or float, optional): priority of unscored slots:
            ``"mean"``, ``"max"`` or a float >= 0 (floored at ``eps``); readable
            and assignable afterwards as :attr:`unscored_priority_mode`.
            ``None`` means ``"mean"``. Defaults to ``None``.
        threshold (float or None, optional): binarisation threshold in [0, 1], or
            ``None`` to use continuous scores. Defaults to 0.5.
        eps (float, optional): priority floor (and TD offset with ``td_boost``).
            Defaults to 0.01.
        td_boost (bool, optional): multiply priorities by
            :math:`(|\delta| + \epsilon)^\alpha`. Defaults to ``False``.
        alpha (float, optional): TD exponent for ``td_boost``. Defaults to 0.6.
        beta (float, optional): importance-sampling exponent. Defaults to 0.0.
        max_oversampling (float or None, optional): the ceiling on every slot's
            :math:`N q_t(i)` (>= 1; 1 is uniform replay), or ``None`` for none, the
            paper's sampler. Assignable afterwards. Defaults to ``None``.
        spread (float or None, optional): the per-step decay :math:`\rho \in (0, 1]` of the episode
            credit, or ``None`` for none (the paper's sampler). Defaults to ``None``.
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
        >>> sampler.scores(index)
        tensor([0.9000, 0.1000, 0.2000, 0.3000])
        >>> sampler.stats()["fraction_scored"]
        1.0
    """

    def __init__(
        self,
        max_capacity: int,
        *,
        lambda_max: float = 0.5,
        warmup: int | None = None,
        unscored_priority: UnscoredMode = "mean",
        threshold: float | None = 0.5,
        eps: float = 0.01,
        td_boost: bool = False,
        alpha: float = 0.6,
        beta: float = 0.0,
        max_oversampling: float | None = None,
        spread: float | None = None,
        reduction: str = "max",
        tree_backend: TreeBackend = "auto",
    ) -> None:
        # PrioritizedSampler.__init__ is deliberately not called: see the class note.
        if isinstance(max_capacity, bool) or not isinstance(max_capacity, int) or max_capacity < 1:
            raise ValueError(f"max_capacity must be an int >= 1, got max_capacity={max_capacity!r}.")
        self._max_capacity = max_capacity
        self.lambda_max = lambda_max
        self.warmup = default_warmup() if warmup is None else warmup
        unscored = check_unscored("unscored_priority", unscored_priority)
        threshold = check_threshold("threshold", threshold)
        eps = check_nonneg("eps", eps)
        if not isinstance(td_boost, bool):
            raise TypeError(f"td_boost must be a bool, got td_boost={td_boost!r}.")
        alpha = check_nonneg("alpha", alpha)
        config = PriorityConfig(
            threshold=threshold, eps=eps, td_boost=td_boost, alpha=alpha, unscored=unscored,
            spread=check_spread("spread", spread),
        )
        self.beta = beta
        self.max_oversampling = max_oversampling
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}.")
        self.reduction = reduction
        self._backend = resolve_backend(tree_backend)
        self.provenance: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._state = SlotState(max_capacity, config, self._backend)
        self._trailing: tuple[int, ...] | None = None  # storage.shape[1:] of an ndim > 1 storage
        # the first scores' summary until SCORE_CHECK_AFTER of them arrived: count, positives, binary, min, max, sum
        self._score_check: list | None = [0, 0, True, math.inf, -math.inf, 0.0]
        self._reset_counters()
        self._validate_setting("beta", self._beta)

    @staticmethod
    def check_arguments(**kwargs: Any) -> dict[str, Any]:
        """Checks keyword arguments of the constructor (``lambda_max``, ``warmup``, ``unscored_priority``,
        ``threshold``, ``eps``, ``td_boost``, ``alpha``, ``beta``, ``max_oversampling``, ``spread``) as it does,
        without building a sampler: what a config calls to validate its values before a run. Returns them
        normalised; raises the constructor's ``ValueError`` or ``TypeError``.

        Examples:
            >>> VLMPrioritizedSampler.check_arguments(eps=0.0, beta=0.4, lambda_max=1.0)
            Traceback (most recent call last):
            ...
            ValueError: eps=0 with beta=0.4 > 0 and lambda reaching 1 leaves the importance weights undefined: ...
        """
        return check_arguments(**kwargs)

    def _reset_counters(self) -> None:
        self._sample_calls = 0
        self._drawn = 0
        self._drawn_positive = 0
        self._lambda_override: float | None = None

    def _validate_setting(self, name: str, value: Any) -> None:
        """Checks that assigning ``name = value`` keeps the importance weights defined."""
        current = {
            "eps": self._state.config.eps,
            "beta": self._beta,
            "lambda_max": self._lambda_max,
            "lambda_": self._lambda_override,
        }
        if name in current:
            current[name] = value
        lam = current["lambda_max"] if current["lambda_"] is None else current["lambda_"]
        check_weights_defined(current["eps"], current["beta"], lam)

    # ------------------------------------------------------------------ settings
    lambda_max = Setting(check_unit, "Final weight of the prioritized component, in [0, 1].")
    warmup = Setting(check_warmup, "Number of sample calls over which the built-in ``lambda_`` rises.")
    beta = Setting(check_nonneg, "Importance-sampling exponent (>= 0).")
    max_oversampling = Setting(check_ceiling, "Ceiling on N q_t(i) for every slot (>= 1), or None for none.")
    threshold = PrioritySetting("threshold", "Binarisation threshold of the scores, or None (read-only).")
    eps = PrioritySetting("eps", "Priority floor and TD offset (read-only).")
    td_boost = PrioritySetting("td_boost", "Whether TD priorities shape sampling (read-only).")
    spread = PrioritySetting("spread", "Per-step decay of the episode credit, or None (read-only).")
    alpha = PrioritySetting("alpha", "TD exponent; assigning it rebuilds the trees with td_boost (O(N)).",
                             check_nonneg)
    unscored_priority_mode = PrioritySetting(
        "unscored",
        'The unscored_priority setting ("mean", "max" or a float >= 0); assignable.',
        check_unscored,
    )

    @property
    def max_size(self) -> int:
        return self._max_capacity

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
        value = check_unit("lambda_", value)
        self._validate_setting("lambda_", value)
        self._lambda_override = value

    @property
    def lambda_effective(self) -> float:
        r"""The mixture weight the next :meth:`sample` uses: :attr:`lambda_` under the ``max_oversampling`` ceiling.

        :attr:`lambda_` without a ceiling, or when the ceiling does not bind.

        Examples:
            >>> import torch
            >>> from vlmrb_torchrl import VLMPrioritizedSampler
            >>> sampler = VLMPrioritizedSampler(100, lambda_max=0.5, warmup=0, max_oversampling=4.0)
            >>> sampler.mark_update(torch.arange(100))
            >>> _ = sampler.update_scores(torch.arange(100), (torch.arange(100) == 0).float())  # 1 positive
            >>> round(sampler.lambda_effective, 4)  # 0.5 would draw the positive 25.6x as often as uniform
            0.0609
            >>> round(float(sampler.probabilities().max() * 100), 6)
            4.0
        """
        with self._lock:
            return self._state.effective_lambda(self.lambda_, self._state.n_filled, self._max_oversampling)

    @property
    def device(self) -> torch.device:
        """The device of the sampler's trees and of the indices it returns: always the CPU.

        :class:`~torchrl.data.PrioritizedSampler` reports its trees' device the same
        way. The per-slot state and trees are NumPy arrays; a buffer with a storage on
        another device moves the indices there itself (``storage.get``).
        """
        return torch.device("cpu")

    @property
    def unscored_priority(self) -> float:
        """The priority :math:`\\bar p` currently given to slots without a score.

        The value the ``unscored_priority`` setting (:attr:`unscored_priority_mode`)
        yields now: with ``"mean"`` it follows the scores as they arrive.
        """
        with self._lock:
            return self._state.unscored_priority()

    @property
    def default_priority(self) -> float:
        """TD priority given to new slots (the largest seen so far, as in PER).

        This is the quantity TorchRL's buffers ask a prioritized sampler for; the
        priority of *unscored* slots is :attr:`unscored_priority`.
        """
        return self._state.max_td

    # ------------------------------------------------------------------ writes
    def _note_storage(self, storage: Storage | None) -> None:
        """Records the trailing shape of an ``ndim > 1`` storage, to read its coordinates."""
        if storage is not None and getattr(storage, "ndim", 1) > 1:
            self._trailing = tuple(int(d) for d in storage.shape[1:])

    def _index(self, index: Any) -> np.ndarray:
        """A storage index (slot numbers or coordinates) as checked 1-D slot numbers."""
        return check_range(flatten_index(index, self._trailing), self._max_capacity)

    def mark_update(self, index: int | torch.Tensor, *, storage: Storage | None = None) -> None:
        """Called by the writer on every write: bumps generations, resets the slots to unscored.

        The storage was written already, so no row the writer did write is left behind:
        negative indices (rows a :class:`~torchrl.data.TensorDictMaxValueWriter` did not
        write) are skipped, as :class:`~torchrl.data.PrioritizedSampler` does, and a
        storage larger than ``max_capacity`` raises only after the rows that fit were
        recorded. An ``ndim > 1`` storage's coordinates are flattened row-major.
        """
        self._note_storage(storage)
        slots = flatten_index(index, self._trailing)
        slots = slots[slots >= 0]
        beyond = slots >= self._max_capacity
        with self._lock:
            self._state.write(slots[~beyond] if beyond.any() else slots)
        if beyond.any():
            size = getattr(storage, "max_size", None)
            raise ValueError(
                f"The writer wrote slot {int(slots[beyond].max())} but the sampler was built "
                f"with max_capacity={self._max_capacity}"
                + (f" (the storage holds {size} items)" if size is not None else "")
                + ": give the sampler and the storage the same size."
            )

    def add(self, index: int) -> None:  # work done in mark_update
        return

    def extend(self, index: torch.Tensor) -> None:  # work done in mark_update
        return

    def slots(self, index: int | torch.Tensor | tuple) -> torch.Tensor:
        """The sampler's slot numbers (1-D int64) of a storage index, one per index row.

        The identity for a 1-D storage; for a storage with ``ndim > 1`` the row-major
        flattening of the coordinates (what :meth:`probabilities` is indexed by). Useful to
        line up the time-major coordinates of ``rb.extend`` with other per-slot data.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
            >>> from vlmrb_torchrl import VLMPrioritizedSampler
            >>> sampler = VLMPrioritizedSampler(12)
            >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(12, ndim=2), sampler=sampler)
            >>> index = rb.extend(TensorDict(obs=torch.zeros(2, 3), batch_size=[2, 3]))  # [envs, T]
            >>> index.tolist()  # (t, env), time-major
            [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [2, 1]]
            >>> sampler.slots(index)
            tensor([0, 1, 2, 3, 4, 5])
        """
        return torch.from_numpy(self._index(index).copy())

    def generations(self, index: int | torch.Tensor) -> torch.Tensor:
        """Current generation of each slot in ``index`` (what a producer records at insertion).

        ``index`` is what ``rb.extend`` returned: slot numbers, or for a storage with
        ``ndim > 1`` the ``[M, ndim]`` coordinates (one generation per row). A slot listed more
        than once (an ``extend`` larger than the storage wraps around onto its own rows) holds
        only its last row: the earlier rows get generation ``-1``, which never matches, so scores
        of their clips are dropped as stale instead of landing on the row that replaced them.

        Examples:
            >>> import torch
            >>> from vlmrb_torchrl import VLMPrioritizedSampler
            >>> sampler = VLMPrioritizedSampler(4)
            >>> index = torch.tensor([0, 1, 2, 3, 0, 1])  # 6 rows into 4 slots: rows 0 and 1 overwritten
            >>> sampler.mark_update(index)
            >>> sampler.generations(index)
            tensor([-1, -1,  1,  1,  1,  1])
        """
        index = self._index(index)
        with self._lock:
            generation = self._state.generation[index].copy()
        _, last = np.unique(index[::-1], return_index=True)  # each slot's last row in ``index``
        overwritten = np.ones(len(index), dtype=bool)
        overwritten[len(index) - 1 - last] = False
        generation[overwritten] = -1
        return torch.from_numpy(generation)

    def link(self, index: int | torch.Tensor, previous: torch.Tensor) -> None:
        """Records, for each slot of ``index``, the slot of the step before it in its episode (``previous``,
        ``-1`` where the step starts an episode): what ``spread`` walks back along. Call it right after the
        write (``rb.extend``); :class:`~vlmrb_torchrl.VLMReplayBuffer` does, from its trajectory ids.

        Examples:
            >>> import torch
            >>> from vlmrb_torchrl import VLMPrioritizedSampler
            >>> sampler = VLMPrioritizedSampler(8, spread=0.5, lambda_max=1.0, warmup=0)
            >>> sampler.mark_update(torch.arange(5))
            >>> sampler.link(torch.arange(5), torch.tensor([-1, 0, 1, 2, 3]))  # one episode, slots 0..4
            >>> sampler.update_scores(torch.arange(5), torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0]))  # the goal at 4
            5
            >>> q = sampler.probabilities()
            >>> (q / q[-1]).tolist()  # priorities 0.5 ** d, d steps before the positive
            [0.0625, 0.125, 0.25, 0.5, 1.0]
        """
        index = self._index(index)
        previous = int_array(previous, "previous").reshape(-1)
        if previous.size != index.size:
            raise ValueError(f"previous has {previous.size} values but index has {index.size} entries.")
        if previous.size and (previous.min() < -1 or previous.max() >= self._max_capacity):
            raise ValueError(f"previous must hold slots in [0, {self._max_capacity}) or -1 (no step before), got "
                             f"values in [{previous.min()}, {previous.max()}].")
        if self._state.config.spread is None:
            return
        with self._lock:
            self._state.link_steps(index, previous)

    def scores(self, index: int | torch.Tensor) -> torch.Tensor:
        """The raw VLM scores of the slots in ``index``, flattened (float32).

        A slot without a score, because its clip is not scored yet, it was rewritten
        since, or it was never written, reads ``NaN``. (Internally such a slot holds
        0.0, which never counts: priorities and statistics use only scored slots.)

        Examples:
            >>> import torch
            >>> from vlmrb_torchrl import VLMPrioritizedSampler
            >>> sampler = VLMPrioritizedSampler(4)
            >>> sampler.mark_update(torch.arange(3))
            >>> sampler.update_scores(torch.tensor([0, 1]), torch.tensor([0.5, 0.0]))
            2
            >>> sampler.scores(torch.arange(4))
            tensor([0.5000, 0.0000,    nan,    nan])
        """
        index = self._index(index)
        with self._lock:
            return torch.from_numpy(self._state.scores(index))

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
            index (int or Tensor): storage slots, or for a storage with ``ndim > 1``
                the coordinates ``rb.extend`` returned (``[M, ndim]``).
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
        index = self._index(index)
        scores = as_values(scores, index.size, "scores")
        if scores.size and (scores.min() < 0.0 or scores.max() > 1.0):
            raise ValueError(
                f"scores must lie in [0, 1]; got values in [{scores.min():.4g}, {scores.max():.4g}]."
            )
        if generation is not None:
            generation = as_index_like(generation, index.size)
        with self._lock:
            applied = self._state.set_scores(index, scores, generation, reduce)
            if self._score_check is not None and scores.size:
                self._check_scores(scores)
        return applied

    def _check_scores(self, scores: np.ndarray) -> None:
        """Folds ``scores`` into the first scores' summary; once :data:`SCORE_CHECK_AFTER` arrived, warns if they
        make replay uniform (:class:`UniformScoresWarning`) and stops watching."""
        check = self._score_check
        threshold = self._state.config.threshold
        check[0] += int(scores.size)
        check[1] += int(np.count_nonzero(scores > (0.5 if threshold is None else threshold)))
        check[2] = check[2] and bool(np.isin(scores, (0.0, 1.0)).all())
        check[3], check[4] = min(check[3], float(scores.min())), max(check[4], float(scores.max()))
        check[5] += float(scores.sum(dtype=np.float64))
        n, positive, binary, low, high, total = check
        if n < SCORE_CHECK_AFTER:
            return
        self._score_check = None
        seen = f"scores seen: min {low:.3g}, mean {total / n:.3g}, max {high:.3g}"
        if threshold is None:
            problem = (f"all {n} first scores are equal ({seen}), and with threshold=None they are the priorities"
                       if high - low < 1e-6 else None)
        elif positive == 0 and not binary:
            problem = (f"none of the first {n} scores is above threshold={threshold} ({seen}): every scored "
                       f"transition has priority eps={self._state.config.eps}")
        elif positive == n:
            problem = f"all of the first {n} scores are above threshold={threshold} ({seen}): every one has priority 1"
        else:
            problem = None
        if problem:
            warnings.warn(
                f"VLMPrioritizedSampler: {problem}, so replay is uniform. A scorer with continuous scores needs a "
                "threshold inside their range (threshold=auto picks a built-in scorer's own), or threshold=None to use "
                "the scores themselves as priorities; if progress is this rare early in your task, it is expected "
                "(docs/custom_scorers.md, 'Scores and the threshold').", UniformScoresWarning, stacklevel=3)

    def update_priority(
        self,
        index: int | torch.Tensor,
        priority: float | torch.Tensor,
        *,
        storage: Storage | None = None,
    ) -> None:
        """Stores TD priorities (``|td_error|``); they shape sampling only with ``td_boost``.

        Negative indices are skipped, as TorchRL's samplers do for rows a
        ``TensorDictMaxValueWriter`` did not write. With a storage of ``ndim > 1``
        the index holds coordinates (``[B, ndim]``, as in a sampled batch's ``"index"``).
        """
        self._note_storage(storage)
        index = flatten_index(index, self._trailing)
        priority = np.abs(as_values(priority, index.size, "priority"))
        keep = index >= 0
        index = check_range(index[keep], self._max_capacity)
        priority = priority[keep]
        if index.size == 0:
            return
        with self._lock:
            self._state.set_td(index, priority)

    # ------------------------------------------------------------------ sampling
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        n = len(storage)
        if n == 0:
            raise RuntimeError(_EMPTY_STORAGE_ERROR)
        if n > self._max_capacity:
            raise RuntimeError(
                f"The storage holds {n} items but the sampler was built with "
                f"max_capacity={self._max_capacity}: give them the same size."
            )
        with self._lock:
            state = self._state
            if state.n_filled < n:
                # rows written without passing through this sampler's mark_update
                # (a pre-filled storage): they count as new, unscored transitions
                state.fill(np.arange(n, dtype=np.int64))
            elif state.n_filled > n:
                raise RuntimeError(
                    f"The sampler tracks {state.n_filled} written slots but the storage "
                    f"holds {n}: the storage was emptied or replaced without rb.empty()."
                )
            if self._max_oversampling is not None:
                state.ensure_max_trees()  # O(N) once, then kept in step with every write
            lam = state.effective_lambda(self.lambda_, n, self._max_oversampling)
            self._sample_calls += 1
            draws = torch.rand(2, batch_size, dtype=torch.float64, generator=self._rng).numpy()
            index, total, p_bar = state.draw(draws, lam, n)
            self._drawn += batch_size
            self._drawn_positive += state.count_positive(index)
            if self._beta == 0.0 or total <= 0 or lam == 0.0:
                weight = torch.ones(batch_size, dtype=torch.float32)
            else:
                weight = torch.from_numpy(
                    state.importance_weights(index, lam, n, total, p_bar, self._beta).astype(np.float32)
                )
        index = torch.from_numpy(index)
        if getattr(storage, "ndim", 1) > 1:
            # coordinates, as PrioritizedSampler returns them (slots are row-major)
            self._note_storage(storage)
            index = unravel_index(index, storage.shape)
        return index, {"priority_weight": weight}

    def probabilities(self, storage_len: int | None = None) -> torch.Tensor:
        """The exact sampling distribution :math:`q_t` over the filled slots, for inspection.

        ``O(N)``; meant for tests, debugging and plots, not for the training loop. An
        empty buffer has an empty distribution. With a storage of ``ndim > 1`` entry
        ``i`` is the row-major slot ``i``.

        Examples:
            >>> from vlmrb_torchrl import VLMPrioritizedSampler
            >>> sampler = VLMPrioritizedSampler(4)
            >>> sampler.probabilities()
            tensor([], dtype=torch.float64)
        """
        if storage_len is not None and (
            isinstance(storage_len, bool)
            or not isinstance(storage_len, int)
            or not 0 <= storage_len <= self._max_capacity
        ):
            raise ValueError(
                f"storage_len must be an int in [0, {self._max_capacity}], got {storage_len!r}."
            )
        with self._lock:
            n = self._state.n_filled if storage_len is None else storage_len
            if n == 0:
                return torch.zeros(0, dtype=torch.float64)
            lam = self._state.effective_lambda(self.lambda_, n, self._max_oversampling)
            return torch.from_numpy(self._state.probabilities(n, lam))

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
        ``lambda_effective`` is the mixture weight under the ``max_oversampling`` ceiling
        (``lambda`` without one) and ``max_oversampling_ratio`` the current
        :math:`N \max_i q_t(i)`: how many times as often as under uniform replay the
        most-favoured slot is drawn (``O(N)`` without a ceiling: a logging call).
        With ``spread``, ``credited_fraction`` is the share of filled slots holding episode credit above
        ``eps``: the path before the positives that the credit lifted.
        """
        with self._lock:
            state = self._state
            n = state.n_filled
            mean_score, positive_fraction = state.score_summary()
            lam = self.lambda_
            lam_eff = state.effective_lambda(lam, n, self._max_oversampling)
            if n:
                p_bar = state.unscored_priority()
                total = state.tree_v.root() + p_bar * state.tree_u.root()
                top = state.max_leaf(p_bar) / total if total > 0 else 1.0 / n
                max_ratio = lam_eff * n * top + (1.0 - lam_eff)
            else:
                max_ratio = float("nan")
            credit = ({"credited_fraction": float(np.count_nonzero(state.credit[: state.end] > state.config.eps)) / n
                       if n else 0.0} if state.config.spread is not None else {})
            return {
                "num_filled": n,
                **credit,
                "fraction_scored": state.n_scored / n if n else 0.0,
                "mean_score": mean_score,
                "positive_fraction": positive_fraction,
                "lambda": lam,
                "lambda_effective": lam_eff,
                "max_oversampling_ratio": max_ratio,
                "unscored_priority": state.unscored_priority(),
                "stale_drops": state.stale_drops,
                "sample_calls": self._sample_calls,
                "drawn": self._drawn,
                "drawn_positive": self._drawn_positive,
            }

    def _empty(self) -> None:
        with self._lock:
            self._state.reset(keep_generations=True)
            self._reset_counters()

    def __repr__(self) -> str:
        c = self._state.config
        return (
            f"{type(self).__name__}(max_capacity={self._max_capacity}, lambda_max={self._lambda_max}, "
            f"warmup={self._warmup}, unscored_priority={c.unscored!r}, "
            f"threshold={c.threshold}, eps={c.eps}, td_boost={c.td_boost}, "
            f"alpha={c.alpha}, beta={self._beta}, max_oversampling={self._max_oversampling}, spread={c.spread}, "
            f"tree_backend={self._backend!r})"
        )

    # ------------------------------------------------------------------ checkpoints
    # Every path goes through _to_state / _from_state: state_dict() is _to_state(), dumps()
    # writes its per-slot arrays as a memory-mapped TensorDict and the rest as JSON, and
    # pickling wraps it with the tree backend.
    def _to_state(self) -> dict[str, Any]:
        """The checkpoint, schema 1: scalars and config first, then the per-slot arrays."""
        with self._lock:
            state, c = self._state, self._state.config
            return {
                "_schema_version": _STATE_SCHEMA_VERSION,
                "config": {
                    "max_capacity": self._max_capacity,
                    "lambda_max": self._lambda_max,
                    "warmup": self._warmup,
                    "default_priority": c.unscored,  # schema 1's name of unscored_priority
                    "threshold": c.threshold,
                    "eps": c.eps,
                    "td_boost": c.td_boost,
                    "alpha": c.alpha,
                    "beta": self._beta,
                    "reduction": self.reduction,
                    # only when set, so that a sampler without a ceiling writes schema 1's layout unchanged
                    **({"max_oversampling": self._max_oversampling} if self._max_oversampling is not None else {}),
                    **({"spread": c.spread} if c.spread is not None else {}),
                },
                "sample_calls": self._sample_calls,
                "drawn": self._drawn,
                "drawn_positive": self._drawn_positive,
                "lambda_override": self._lambda_override,
                "stale_drops": state.stale_drops,
                "max_p": state.max_p,
                "max_td": state.max_td,
                "provenance": dict(self.provenance),
                # only for an ndim > 1 storage (1-D checkpoints keep their layout), so that
                # coordinates are understood right after loading
                **({"storage_trailing_shape": list(self._trailing)} if self._trailing else {}),
                **{name: torch.from_numpy(a) for name, a in state.arrays().items()},
            }

    def _from_state(self, state_dict: dict[str, Any]) -> None:
        """Restores :meth:`_to_state`'s output; the checkpoint's config wins."""
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
        # every value is checked before anything is replaced
        lambda_max = check_unit("lambda_max", config["lambda_max"])
        warmup = check_warmup("warmup", config["warmup"])
        priority_config = PriorityConfig(
            threshold=check_threshold("threshold", config["threshold"]),
            eps=config["eps"],
            td_boost=config["td_boost"],
            alpha=config["alpha"],
            unscored=check_unscored("default_priority", config["default_priority"]),
            spread=check_spread("spread", config.get("spread")),  # absent: written without episode credit
        )
        beta = check_nonneg("beta", config["beta"])
        # absent in checkpoints written before the ceiling existed: they sampled without one
        max_oversampling = check_ceiling("max_oversampling", config.get("max_oversampling"))
        lambda_override = state_dict["lambda_override"]
        if lambda_override is not None:
            lambda_override = check_unit("lambda_", lambda_override)
        check_weights_defined(
            priority_config.eps, beta, lambda_max if lambda_override is None else lambda_override
        )
        if config["reduction"] not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {config['reduction']!r}.")
        arrays = self._checked_arrays(state_dict, spread=priority_config.spread is not None)
        with self._lock:
            # the checkpoint's settings win, so that a resumed run samples as before
            self._lambda_max, self._warmup, self._beta = lambda_max, warmup, beta
            self._max_oversampling = max_oversampling
            self.reduction = config["reduction"]
            self._state = SlotState(self._max_capacity, priority_config, self._backend)
            self._state.load(
                arrays,
                max_p=state_dict["max_p"],
                max_td=float(state_dict["max_td"]),
                stale_drops=int(state_dict["stale_drops"]),
            )
            self._sample_calls = int(state_dict["sample_calls"])
            self._drawn = int(state_dict.get("drawn", 0))  # absent in checkpoints before 0.2
            self._drawn_positive = int(state_dict.get("drawn_positive", 0))
            self._lambda_override = lambda_override
            self.provenance = dict(state_dict.get("provenance", {}))
            trailing = state_dict.get("storage_trailing_shape")
            self._trailing = tuple(int(d) for d in trailing) if trailing else None

    def _checked_arrays(self, state_dict: dict[str, Any], *, spread: bool = False) -> dict[str, np.ndarray]:
        """The per-slot arrays of a state, refused unless they could have been written by a sampler:
        ``capacity`` long, flags 0/1, scores in ``[0, 1]``, TD priorities finite and ``>= 0``,
        generations ``>= 0``, and finite ``max_td``/``max_p``; with ``spread``, credits in ``[0, 1]`` and
        links in ``[0, capacity]``."""
        where = "VLMPrioritizedSampler state"
        arrays = {}
        for name in _ARRAY_KEYS + (SPREAD_ARRAYS if spread else ()):
            if name not in state_dict:
                raise ValueError(f"{where}: no {name!r} array.")
            arr = to_numpy(state_dict[name]).reshape(-1) if np.ndim(to_numpy(state_dict[name])) else None
            if arr is None or arr.shape[0] != self._max_capacity:
                raise ValueError(f"{where}: {name!r} must hold one value per slot ({self._max_capacity}), got "
                                 f"shape {list(np.shape(to_numpy(state_dict[name])))}.")
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                bad = int(np.flatnonzero(~np.isfinite(arr))[0])
                raise ValueError(f"{where}: {name!r} holds NaN or infinite values (first at slot {bad}).")
            arrays[name] = arr
        checks = [("score", (arrays["score"] >= 0) & (arrays["score"] <= 1), "in [0, 1]"),
                  ("td", arrays["td"] >= 0, ">= 0"), ("generation", arrays["generation"] >= 0, ">= 0"),
                  ("scored", np.isin(arrays["scored"], (0, 1)), "0 or 1"),
                  ("filled", np.isin(arrays["filled"], (0, 1)), "0 or 1")]
        if spread:
            checks += [("credit", (arrays["credit"] >= 0) & (arrays["credit"] <= 1), "in [0, 1]"),
                       ("link", (arrays["link"] >= 0) & (arrays["link"] <= self._max_capacity),
                        f"in [0, {self._max_capacity}]"),
                       ("link_generation", arrays["link_generation"] >= 0, ">= 0")]
        for name, ok, allowed in checks:
            if not ok.all():
                bad = int(np.flatnonzero(~ok)[0])
                raise ValueError(f"{where}: {name!r} must be {allowed}, got {arrays[name][bad]!r} at slot {bad}.")
        max_td, max_p = state_dict["max_td"], state_dict["max_p"]
        if not (math.isfinite(float(max_td)) and float(max_td) >= 0) or \
                (max_p is not None and not math.isfinite(float(max_p))):
            raise ValueError(f"{where}: max_td={max_td!r} and max_p={max_p!r} must be finite (max_td >= 0).")
        return arrays

    def state_dict(self) -> dict[str, Any]:
        """Raw scores, scored mask, TD priorities, generations, schedule position and config."""
        return self._to_state()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._from_state(state_dict)

    def dumps(self, path: str | Path) -> None:
        """Writes the state to ``path``: memory-mapped per-slot arrays plus a JSON file."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        scalars = self._to_state()
        arrays = {name: scalars.pop(name) for name in (*_ARRAY_KEYS, *SPREAD_ARRAYS) if name in scalars}
        TensorDict(arrays, batch_size=[self._max_capacity]).memmap(path / "slots", existsok=True)
        (path / "sampler_metadata.json").write_text(json.dumps(scalars, indent=2))

    def loads(self, path: str | Path) -> None:
        """Reads a state written by :meth:`dumps`."""
        path = Path(path)
        scalars = json.loads((path / "sampler_metadata.json").read_text())
        arrays = TensorDict.load_memmap(path / "slots")
        self._from_state({**scalars, **{k: arrays[k].clone() for k in arrays.keys()}})

    def __getstate__(self) -> dict[str, Any]:
        if get_spawning_popen() is not None:
            # a copy in another process would never see the learner's generations and
            # trees (nor the learner its writes), so stale scores would be accepted
            raise RuntimeError(
                f"{type(self).__name__} cannot be shared between processes: each process "
                "would hold a private copy of the per-slot state, so the learner would never "
                "see other processes' writes. For writers in other processes build the buffer with "
                "make_vlm_replay_buffer(..., shared=True, sync=False) (TorchRL's pattern for "
                "PrioritizedSampler: the sampler stays in this process), or keep the buffer here and "
                "send it data (e.g. a collector without replay_buffer=, then rb.extend)."
            )
        return {"state": self._to_state(), "tree_backend": self._backend}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # (this class's __init__, not a subclass's, whose signature may differ)
        VLMPrioritizedSampler.__init__(self, state["state"]["config"]["max_capacity"], tree_backend=state["tree_backend"])
        self._from_state(state["state"])
