"""Per-slot state of :class:`~vlmrb_torchrl.VLMPrioritizedSampler` and the trees over it.

Plain NumPy, no TorchRL API and no locking: :class:`SlotState` owns the per-slot arrays
(raw score, scored / filled masks, TD priority, generation), the running counts and maxima,
and the sum/min trees kept in step with them. The sampler serialises every call under its
lock, validates arguments, draws the random numbers and speaks TorchRL's ``Sampler`` API.

Indices passed in are 1-D ``int64`` arrays of slots in ``[0, capacity)`` (the sampler checks
them). Methods that write de-duplicate them first (the last write of a slot wins, or the
largest with ``reduce="max"``); the ``fill``/``refresh`` helpers expect unique indices.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from vlmrb_torchrl.replay._sumtree import make_tree

__all__ = ["PriorityConfig", "SlotState", "SPREAD_ARRAYS"]

UnscoredMode = Literal["mean", "max"] | float


@dataclass(frozen=True)
class PriorityConfig:
    """How a slot's priority follows from its score and TD priority (values are not checked).

    Attributes:
        threshold: binarisation threshold of the scores, or ``None`` for raw scores.
        eps: priority floor, and TD offset with ``td_boost``.
        td_boost: multiply priorities by ``(|td| + eps) ** alpha``.
        alpha: TD exponent.
        unscored: priority of unscored slots: ``"mean"`` of the scored priorities,
            ``"max"`` priority written so far, or a fixed float (floored at ``eps``).
        spread: per-step decay ``rho`` of the credit a positive slot gives the slots before it in its
            episode (:meth:`SlotState.spread_back`), or ``None`` for none.

    Examples:
        >>> import numpy as np
        >>> from vlmrb_torchrl.replay._slot_state import PriorityConfig
        >>> PriorityConfig(threshold=0.5, eps=0.01).priority(np.array([0.2, 0.7], np.float32)).tolist()
        [0.01, 1.0]
        >>> PriorityConfig(threshold=None).cut  # what counts as a positive in the statistics
        0.5
    """

    threshold: float | None = 0.5
    eps: float = 0.01
    td_boost: bool = False
    alpha: float = 0.6
    unscored: UnscoredMode = "mean"
    spread: float | None = None

    def priority(self, score: np.ndarray) -> np.ndarray:
        """``max(1[score > threshold], eps)``, or ``max(score, eps)`` without a threshold (float64)."""
        if self.threshold is None:
            p = score.astype(np.float64)
        else:
            p = (score > self.threshold).astype(np.float64)
        return np.maximum(p, self.eps)

    def td_factor(self, td: np.ndarray) -> np.ndarray:
        """``(td + eps) ** alpha`` (float64), the ``td_boost`` factor."""
        return (td.astype(np.float64) + self.eps) ** self.alpha

    @property
    def cut(self) -> float:
        """Score above which a slot counts as positive in the statistics."""
        # the priority itself uses the threshold; raw scores are cut at 0.5
        return 0.5 if self.threshold is None else self.threshold


# fields whose change alters tree leaves (alpha only matters with td_boost)
_LEAF_FIELDS = ("threshold", "eps", "td_boost", "alpha", "spread")
#: per-slot arrays of the episode credit (``PriorityConfig.spread``), kept only when it is on
SPREAD_ARRAYS = ("credit", "link", "link_generation")


class SlotState:
    r"""Per-slot arrays, counts and sum/min trees of a VLM-prioritized replay memory.

    A filled slot is *scored* (leaf :math:`v_i = p_i g_i` in the scored sum tree) or
    *unscored* (leaf :math:`g_i` in the unscored sum tree, to be scaled by the current
    unscored priority :math:`\bar p`), where :math:`p_i` is the priority of the slot's score
    and :math:`g_i` its TD factor (1 without ``td_boost``). Every write refreshes the leaves
    of the slots it touched, so the trees always equal a rebuild from the arrays.

    Not thread-safe: the owner serialises access.

    Args:
        capacity (int): number of slots.
        config (PriorityConfig, optional): priority settings. Defaults to ``PriorityConfig()``.
        backend (str, optional): tree backend, ``"numpy"`` or ``"torchrl"``. Defaults to
            ``"numpy"``.

    Examples:
        >>> import numpy as np
        >>> from vlmrb_torchrl.replay._slot_state import SlotState
        >>> state = SlotState(8)
        >>> state.write(np.arange(4))                  # four transitions stored
        >>> state.set_scores(np.array([0, 1]), np.array([0.75, 0.25]), np.array([1, 1]))
        2
        >>> state.scores(np.arange(4)).tolist()       # NaN: not scored
        [0.75, 0.25, nan, nan]
        >>> state.unscored_priority()                # mean of p = [1, 0.01]
        0.505
        >>> state.probabilities(4, lam=1.0).round(3).tolist()
        [0.495, 0.005, 0.25, 0.25]
    """

    def __init__(
        self,
        capacity: int,
        config: PriorityConfig = PriorityConfig(),
        backend: Literal["numpy", "torchrl"] = "numpy",
    ) -> None:
        self.capacity = capacity
        self.config = config
        self.backend = backend
        self.generation = np.zeros(capacity, dtype=np.int64)
        self.reset()

    def reset(self, keep_generations: bool = False) -> None:
        """Empties every slot; generations survive with ``keep_generations`` (``rb.empty()``)."""
        cap = self.capacity
        self.score = np.zeros(cap, dtype=np.float32)  # raw score; 0 while unscored
        self.scored = np.zeros(cap, dtype=bool)
        self.filled = np.zeros(cap, dtype=bool)
        self.td = np.zeros(cap, dtype=np.float32)
        # episode credit (config.spread): the credit a later positive gave the slot, and the slot of the step
        # before it in its episode + 1 (0: none, or not linked) with that slot's generation when linked; 20 bytes
        # a slot, so only kept when spread is on (it is read-only)
        if self.config.spread is not None:
            self.credit = np.zeros(cap, dtype=np.float32)
            self.link = np.zeros(cap, dtype=np.int64)
            self.link_generation = np.zeros(cap, dtype=np.int64)
        if not keep_generations:
            self.generation = np.zeros(cap, dtype=np.int64)
        # scratch for de-duplicating indices in O(M) rather than sorting
        self._scratch = np.zeros(cap, dtype=np.int64)
        self.n_filled = 0
        self.end = 0  # one past the highest filled slot: the per-slot statistics read [0, end) only
        self.n_scored = 0
        self.stale_drops = 0
        self.max_p: float | None = None
        self.max_td = 1.0
        self._make_trees()

    def _make_trees(self) -> None:
        cap, backend = self.capacity, self.backend
        self.tree_v = make_tree(cap, "sum", backend)  # scored: p * g
        self.tree_u = make_tree(cap, "sum", backend)  # unscored: g
        # sum of p over scored slots, for unscored="mean"; equals tree_v without td_boost
        self.tree_p = make_tree(cap, "sum", backend) if self.config.td_boost else None
        self.min_trees = None  # built on first use (importance weights)
        self.max_trees = None  # built on first use (the over-sampling ceiling)

    def reconfigure(self, **changes) -> None:
        """Replaces fields of :attr:`config`; rebuilds the trees when their leaves change."""
        old, self.config = self.config, dataclasses.replace(self.config, **changes)
        if "td_boost" in changes and changes["td_boost"] != old.td_boost:
            self._make_trees()
            self.rebuild()
        elif any(f in changes for f in _LEAF_FIELDS if f != "alpha") or (
            "alpha" in changes and self.config.td_boost
        ):
            self.rebuild()

    # ------------------------------------------------------------------ leaves and trees
    def leaves(self, index: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(p, g, is_scored, is_unscored)`` of ``index``: priority, TD factor and the masks."""
        filled, scored = self.filled[index], self.scored[index]
        p = self.config.priority(self.score[index])
        if self.config.spread is not None:
            p = np.maximum(p, self.credit[index])
        g = self.config.td_factor(self.td[index]) if self.config.td_boost else np.ones_like(p)
        return p, g, filled & scored, filled & ~scored

    def refresh(self, index: np.ndarray, unscored_changed: np.ndarray | None = None) -> None:
        """Rewrites the tree leaves of ``index`` (unique) from the arrays.

        ``unscored_changed`` (a mask over ``index``) limits the unscored tree's update
        to the slots whose unscored leaf changed; ``None`` updates all of them.
        """
        p, g, is_scored, is_unscored = self.leaves(index)
        self.tree_v.update(index, np.where(is_scored, p * g, 0.0))
        if unscored_changed is None:
            self.tree_u.update(index, np.where(is_unscored, g, 0.0))
        elif unscored_changed.any():
            self.tree_u.update(index[unscored_changed], np.where(is_unscored, g, 0.0)[unscored_changed])
        if self.tree_p is not None:
            self.tree_p.update(index, np.where(is_scored, p, 0.0))
        if self.min_trees is not None:
            min_v, min_u = self.min_trees
            min_v.update(index, np.where(is_scored, p * g, np.inf))
            min_u.update(index, np.where(is_unscored, g, np.inf))
        if self.max_trees is not None:
            max_v, max_u = self.max_trees
            max_v.update(index, np.where(is_scored, -(p * g), np.inf))
            max_u.update(index, np.where(is_unscored, -g, np.inf))

    def rebuild(self) -> None:
        """Rebuilds every tree from the arrays (the min trees only if they exist)."""
        p, g, is_scored, is_unscored = self.leaves(slice(None))
        self.tree_v.build(np.where(is_scored, p * g, 0.0))
        self.tree_u.build(np.where(is_unscored, g, 0.0))
        if self.tree_p is not None:
            self.tree_p.build(np.where(is_scored, p, 0.0))
        if self.min_trees is not None:
            self.min_trees = None
            self.ensure_min_trees()
        if self.max_trees is not None:
            self.max_trees = None
            self.ensure_max_trees()

    def ensure_min_trees(self) -> None:
        """Builds the min trees (smallest scored and unscored leaf) if they do not exist yet."""
        if self.min_trees is None:
            p, g, is_scored, is_unscored = self.leaves(slice(None))
            min_v = make_tree(self.capacity, "min", self.backend)
            min_u = make_tree(self.capacity, "min", self.backend)
            min_v.build(np.where(is_scored, p * g, np.inf))
            min_u.build(np.where(is_unscored, g, np.inf))
            self.min_trees = (min_v, min_u)

    def ensure_max_trees(self) -> None:
        """Builds the max trees (largest scored and unscored leaf) if they do not exist yet.

        They are min trees over the negated leaves (empty slots hold ``+inf``), so the two
        tree kinds the backends provide suffice.
        """
        if self.max_trees is None:
            p, g, is_scored, is_unscored = self.leaves(slice(None))
            max_v = make_tree(self.capacity, "min", self.backend)
            max_u = make_tree(self.capacity, "min", self.backend)
            max_v.build(np.where(is_scored, -(p * g), np.inf))
            max_u.build(np.where(is_unscored, -g, np.inf))
            self.max_trees = (max_v, max_u)

    def max_leaf(self, p_bar: float) -> float:
        r"""The largest prioritized mass of one filled slot: :math:`\max_i v_i` (unscored: :math:`\bar p g_i`).

        ``O(1)`` with the max trees (:meth:`ensure_max_trees`), else ``O(N)`` from the arrays.
        """
        if self.max_trees is None:
            # slots from `end` on are empty (mass 0), and a filled slot's mass is >= 0: the max over [0, end)
            # (0.0 when nothing is filled) is the max over all slots
            p, g, is_scored, is_unscored = self.leaves(slice(0, self.end))
            v = np.where(is_scored, p * g, np.where(is_unscored, p_bar * g, 0.0))
            return float(v.max()) if v.size else 0.0
        max_v, max_u = self.max_trees
        top = -max_v.root() if self.n_scored else 0.0
        if self.n_filled > self.n_scored:
            top = max(top, -max_u.root() * p_bar)
        return top

    def effective_lambda(self, lam: float, n: int, ceiling: float | None) -> float:
        r"""The mixture weight actually used: ``lam``, lowered so that no slot's over-sampling exceeds ``ceiling``.

        A slot's over-sampling is :math:`N q_i = \lambda N v_i / V + (1 - \lambda)` (1 under
        uniform replay); its maximum is :math:`\lambda (r - 1) + 1` with
        :math:`r = N \max_i v_i / V`, so the largest :math:`\lambda` that keeps every slot at
        most ``ceiling`` times as likely as under uniform replay is
        :math:`(\text{ceiling} - 1) / (r - 1)`. ``None`` (no ceiling) returns ``lam``.
        """
        if ceiling is None or lam == 0.0 or n == 0:
            return lam
        p_bar = self.unscored_priority()
        total = self.tree_v.root() + p_bar * self.tree_u.root()
        if total <= 0:
            return lam  # every priority is 0: prioritized draws fall back to uniform ones
        r = n * self.max_leaf(p_bar) / total
        if r <= ceiling:  # lambda (r - 1) + 1 <= ceiling for every lambda <= 1
            return lam
        return min(lam, (ceiling - 1.0) / (r - 1.0))

    def unscored_priority(self) -> float:
        r"""The current priority :math:`\bar p` of unscored slots (1.0 while nothing is scored)."""
        mode = self.config.unscored
        if mode == "mean":
            if self.n_scored == 0:
                return 1.0
            p_sum_tree = self.tree_p if self.tree_p is not None else self.tree_v
            return max(p_sum_tree.root() / self.n_scored, self.config.eps)
        if mode == "max":
            return 1.0 if self.max_p is None else self.max_p
        return max(mode, self.config.eps)

    # ------------------------------------------------------------------ writes
    def dedupe(
        self, index: np.ndarray, values: np.ndarray | None = None, reduce: str = "replace"
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """One entry per slot: the last write wins (``"replace"``) or the largest (``"max"``)."""
        if reduce == "max":
            uniq, inverse = np.unique(index, return_inverse=True)
            out = np.full(len(uniq), -np.inf)
            np.maximum.at(out, inverse, values)
            return uniq, out
        # two gathers through a shared scratch array instead of a sort
        position = np.arange(index.size)
        self._scratch[index] = position  # each slot keeps the position of one write
        keep = self._scratch[index] == position
        if keep.all():
            return index, values
        return index[keep], None if values is None else values[keep]

    def fill(self, index: np.ndarray) -> None:
        """Marks never-written slots of ``index`` (unique) as filled and unscored."""
        new = index[~self.filled[index]]
        if new.size:
            self.filled[new] = True
            self.td[new] = self.max_td
            self.n_filled += int(new.size)
            self.end = max(self.end, int(new.max()) + 1)
            self.refresh(new)

    def write(self, index: np.ndarray) -> None:
        """A write of ``index``: bumps generations, resets the slots to filled and unscored."""
        index, _ = self.dedupe(index)
        self.generation[index] += 1
        self.n_filled += int((~self.filled[index]).sum())
        self.n_scored -= int((self.scored[index] & self.filled[index]).sum())
        self.filled[index] = True
        if index.size:
            self.end = max(self.end, int(index.max()) + 1)
        self.scored[index] = False
        self.score[index] = 0.0
        self.td[index] = self.max_td
        if self.config.spread is not None:
            self.credit[index] = 0.0
            self.link[index] = 0
            self.link_generation[index] = 0
        self.refresh(index)

    def link_steps(self, index: np.ndarray, previous: np.ndarray) -> None:
        """Records that slot ``index[k]`` holds the step after slot ``previous[k]`` in one episode (``-1``: it
        starts one, or its predecessor is unknown), with the predecessor's current generation: once that slot
        is rewritten the link is broken (:meth:`spread_back` stops there)."""
        has = previous >= 0
        self.link[index] = np.where(has, previous + 1, 0)
        self.link_generation[index] = np.where(has, self.generation[np.maximum(previous, 0)], 0)

    def spread_back(self, index: np.ndarray) -> np.ndarray:
        r"""Gives the slots before each positive of ``index`` in its episode a decaying credit; returns the slots
        whose credit rose (unique).

        A slot :math:`d` steps before a slot of priority :math:`p` (above ``eps``) gets the credit
        :math:`p \rho^d` (``rho = config.spread``) unless it holds more already; its priority becomes
        :math:`\max(p_j, \text{credit}_j)`. A walk stops at the episode's first step, at a link broken by a
        rewrite, where the credit would not exceed ``eps`` or where a slot holds at least as much credit
        already (an earlier walk with the same decay covered what lies before it).
        """
        rho, eps = self.config.spread, self.config.eps
        p = self.config.priority(self.score[index])
        raised: list[int] = []
        for slot, value in zip(index[p > eps].tolist(), p[p > eps].tolist()):
            credit = value
            while True:
                prev = int(self.link[slot]) - 1
                if prev < 0 or not self.filled[prev] or self.generation[prev] != self.link_generation[slot]:
                    break
                credit *= rho
                if credit <= eps or credit <= self.credit[prev]:
                    break
                self.credit[prev] = credit
                raised.append(prev)
                slot = prev
        return np.unique(np.asarray(raised, dtype=np.int64))

    def set_scores(
        self,
        index: np.ndarray,
        scores: np.ndarray,
        generation: np.ndarray | None = None,
        reduce: Literal["replace", "max"] = "replace",
    ) -> int:
        """Writes scores of live slots; returns how many slots were scored.

        A score for a slot never written, or whose generation is no longer ``generation``,
        is dropped and counted in :attr:`stale_drops`.
        """
        live = self.filled[index]
        if generation is not None:
            live &= self.generation[index] == generation
        n_stale = live.size - int(np.count_nonzero(live))
        if n_stale:
            self.stale_drops += n_stale
            index, scores = index[live], scores[live]
        index, scores = self.dedupe(index, scores, reduce)
        if index.size == 0:
            return 0
        was_scored = self.scored[index]
        if reduce == "max":
            scores = np.where(was_scored, np.maximum(self.score[index], scores), scores)
        self.score[index] = scores
        self.scored[index] = True
        newly_scored = ~was_scored
        self.n_scored += int(np.count_nonzero(newly_scored))
        top = float(self.config.priority(scores).max())
        self.max_p = top if self.max_p is None else max(self.max_p, top)
        # a re-scored slot's unscored leaf stays 0: only newly scored ones change it
        self.refresh(index, newly_scored)
        if self.config.spread is not None:
            raised = self.spread_back(index)
            if raised.size:
                self.refresh(raised)
        return int(index.size)

    def set_td(self, index: np.ndarray, priority: np.ndarray) -> None:
        """Stores TD priorities (``priority >= 0``) of ``index``, filling never-written slots."""
        index, priority = self.dedupe(index, priority)
        self.fill(index)
        self.td[index] = priority
        self.max_td = max(self.max_td, float(priority.max()))
        if self.config.td_boost:
            self.refresh(index)

    # ------------------------------------------------------------------ sampling
    def draw(self, draws: np.ndarray, lam: float, n: int) -> tuple[np.ndarray, float, float]:
        """Slots for a batch from two rows of uniform ``[0, 1)`` numbers (``draws[0]``, ``draws[1]``).

        A draw is prioritized when ``draws[0] < lam``; it then picks by tree mass at
        ``draws[1] * total``, else the uniform slot ``floor(draws[1] * n)``. Returns the
        slots, the total mass and the unscored priority.
        """
        index = np.minimum((draws[1] * n).astype(np.int64), n - 1)
        prioritized = draws[0] < lam
        scored_mass = self.tree_v.root()
        p_bar = self.unscored_priority()
        total = scored_mass + p_bar * self.tree_u.root()
        if total > 0 and prioritized.any():
            mass = draws[1][prioritized] * total
            in_scored = mass < scored_mass
            picked = np.empty(mass.size, dtype=np.int64)
            picked[in_scored] = self.tree_v.find(mass[in_scored])
            picked[~in_scored] = self.tree_u.find((mass[~in_scored] - scored_mass) / p_bar)
            index[prioritized] = np.minimum(picked, n - 1)
        return index, total, p_bar

    def count_positive(self, index: np.ndarray) -> int:
        """How many of ``index`` hold a score above :attr:`PriorityConfig.cut`."""
        return int(np.count_nonzero(self.scored[index] & (self.score[index] > self.config.cut)))

    def importance_weights(
        self, index: np.ndarray, lam: float, n: int, total: float, p_bar: float, beta: float
    ) -> np.ndarray:
        """``(q_i / q_min) ** -beta`` capped at 1, with ``q_min`` over all filled slots (float64)."""
        self.ensure_min_trees()
        p, g, is_scored, _ = self.leaves(index)
        v = np.where(is_scored, p * g, p_bar * g)
        q = lam * v / total + (1.0 - lam) / n
        min_v, min_u = self.min_trees
        candidates = []
        if self.n_scored > 0:
            candidates.append(min_v.root())
        if self.n_filled > self.n_scored:
            candidates.append(p_bar * min_u.root())
        q_min = lam * min(candidates) / total + (1.0 - lam) / n
        return np.minimum((q / q_min) ** -beta, 1.0)

    def probabilities(self, n: int, lam: float) -> np.ndarray:
        """The exact sampling distribution over slots ``0..n-1`` (``O(n)``, float64)."""
        p, g, is_scored, _ = self.leaves(slice(0, n))
        v = np.where(is_scored, p * g, self.unscored_priority() * g)
        total = v.sum()
        # all priorities 0 (eps=0, nothing positive): the prioritised half is uniform, as in sample()
        return (1.0 - lam) / n + (lam * v / total if total > 0 else np.full(n, lam / n))

    # ------------------------------------------------------------------ reading
    def scores(self, index: np.ndarray) -> np.ndarray:
        """Raw scores of ``index`` (float32); NaN for a slot without a score."""
        has_score = self.scored[index] & self.filled[index]
        return np.where(has_score, self.score[index], np.float32(np.nan))

    def score_summary(self) -> tuple[float, float]:
        """Mean raw score and positive fraction over scored slots (NaN when none)."""
        end = self.end  # no slot from `end` on is filled
        scores = self.score[:end][self.scored[:end] & self.filled[:end]]
        if not scores.size:
            return float("nan"), float("nan")
        return float(scores.mean()), float((scores > self.config.cut).mean())

    def arrays(self) -> dict[str, np.ndarray]:
        """Copies of the per-slot arrays, by checkpoint name (the episode credit's only when ``spread`` is on)."""
        out = {
            "score": self.score.copy(),
            "scored": self.scored.copy(),
            "filled": self.filled.copy(),
            "td": self.td.copy(),
            "generation": self.generation.copy(),
        }
        if self.config.spread is not None:
            out.update({name: getattr(self, name).copy() for name in SPREAD_ARRAYS})
        return out

    def load(
        self,
        arrays: dict[str, np.ndarray],
        *,
        max_p: float | None,
        max_td: float,
        stale_drops: int,
    ) -> None:
        """Replaces the state with :meth:`arrays`' output and the scalars; rebuilds the trees."""
        self.reset()
        spread = SPREAD_ARRAYS if self.config.spread is not None else ()
        for name in ("score", "scored", "filled", "td", "generation", *spread):
            if name in arrays:  # the credit's arrays: absent when a state was written without spread
                getattr(self, name)[:] = arrays[name]
        self.n_filled = int(self.filled.sum())
        filled = np.flatnonzero(self.filled)
        self.end = int(filled[-1]) + 1 if filled.size else 0
        self.n_scored = int((self.scored & self.filled).sum())
        self.max_p = max_p
        self.max_td = max_td
        self.stale_drops = stale_drops
        self.rebuild()
