"""Clips of consecutive frames cut from collector batches, for a VLM scorer.

A VLM scores short clips of the agent's own experience, not single frames. This module turns
the stream of TorchRL collector batches into such clips:

- :class:`ClipSpec` fixes the clip geometry (length, stride between clip starts, how many frames
  the scorer sees, how a clip score maps back onto transitions).
- :class:`ClipStream` keeps a small rolling window of frames per live trajectory and emits every
  clip as soon as the steps it needs have arrived, together with the storage indices (and slot
  generations) of the transitions its score is written to.
- :class:`ClipBatch` is what :meth:`ClipStream.push` returns: a ``[B, L]`` TensorDict of clips and
  the ``[M]`` targets of their scores.
"""

from __future__ import annotations

import dataclasses
import itertools
import numbers
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey, unravel_key
from torch import Tensor

from vlmrb_torchrl._frames import evenly_spaced
from vlmrb_torchrl._keys import CLIP_INDEX_KEY, FRAME_ROW_KEY, MASK_KEY, is_nested_key

__all__ = ["ClipBatch", "ClipSpec", "ClipStream"]

_ASSIGN_MODES = ("start", "cover_max")
# How a sampler folds several clip scores landing on one transition.
_REDUCE_OF_ASSIGN = {"start": "replace", "cover_max": "max"}
# Output entries ClipStream writes itself; a frame or extra key must not shadow them.
_RESERVED_ROOTS = ("mask", "clip")


def _check_int(name: str, value: object, minimum: int) -> int:
    # bool is an int subclass, but ClipSpec(stride=True) is a bug, not a stride of 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"ClipSpec.{name} must be an int >= {minimum}, got {name}={value!r} "
            f"of type {type(value).__name__}."
        )
    if value < minimum:
        raise ValueError(f"ClipSpec.{name} must be an int >= {minimum}, got {name}={value!r}.")
    return int(value)


@dataclasses.dataclass(frozen=True)
class ClipSpec:
    """Geometry of the clips cut from each trajectory.

    A clip starting at step ``s`` of a trajectory covers steps ``s .. s + clip_len - 1``. Clip
    starts are ``0, stride, 2 * stride, ...`` inside every trajectory. Near the end of a
    trajectory, clips run past the last step; they are padded by repeating the last real frame
    and carry a validity mask, so transitions near an episode end are scored like the others.

    A clip of ``L`` steps shows ``L + 1`` frames when ``final_frame`` is on (the default): the
    frame before each step, then the *outcome* frame, the ``("next", <frame key>)`` frame of its
    last real step. Events live in ``("next", ...)``, so without it what the clip's last step
    did (reaching the goal, opening a door) would never be seen by a scorer reading frames.
    Scorers that read only per-step entries (the privileged oracle) are unaffected: the outcome
    frame is not a step and carries no event.

    Args:
        clip_len (int, optional): number of consecutive steps ``L`` covered by one clip
            (the paper uses 32). Defaults to ``32``.
        stride (int, optional): distance between consecutive clip starts inside a trajectory.
            ``1`` is the paper's "one clip per transition"; larger strides trade resolution for
            scoring cost. Defaults to ``1``.
        frames (int, optional): number of frames actually sent to the scorer, evenly subsampled
            from the clip's ``clip_len`` (``+ 1`` with ``final_frame``) frames, always keeping
            the first and the last (see :meth:`frame_indices`). ``None`` sends all of them.
            Defaults to ``None``.
        assign (str, optional): how a clip score becomes per-transition scores.

            - ``"start"`` (paper): the clip starting at ``s`` scores transitions
              ``s .. s + stride - 1`` (just ``s`` when ``stride=1``), so every transition
              gets exactly one score.
            - ``"cover_max"``: the clip scores every real step it covers; a transition covered
              by several clips keeps the max of their scores. With ``stride > clip_len`` the
              steps between two windows are covered by no clip and are assigned to the
              preceding clip, as with ``"start"``, so no transition is left unscored.

            Defaults to ``"start"``.
        final_frame (bool, optional): show the outcome frame after each clip's last real step
            (position ``clip_len`` of :meth:`frame_indices`). Defaults to ``True``.

    Raises:
        TypeError: if an integer argument is not an ``int`` (``bool`` is rejected),
            ``assign`` is not a string or ``final_frame`` is not a bool.
        ValueError: if ``clip_len < 1``, ``stride < 1``, ``frames`` is outside
            ``[1, clip_len]`` or ``assign`` is not one of ``"start"``, ``"cover_max"``.

    Examples:
        >>> spec = ClipSpec(clip_len=8, stride=4, frames=3)  # 9 frames: 8 steps + the outcome
        >>> spec.num_frames, spec.frame_indices().tolist()
        (3, [0, 4, 8])
        >>> ClipSpec(clip_len=8, frames=1).frame_indices().tolist()  # the outcome alone
        [8]
        >>> ClipSpec(clip_len=8, frames=3, final_frame=False).frame_indices().tolist()
        [0, 4, 7]
        >>> ClipSpec(clip_len=0)
        Traceback (most recent call last):
            ...
        ValueError: ClipSpec.clip_len must be an int >= 1, got clip_len=0.
    """

    clip_len: int = 32
    stride: int = 1
    frames: int | None = None
    assign: Literal["start", "cover_max"] = "start"
    final_frame: bool = True

    def __post_init__(self) -> None:
        # Frozen dataclass: normalised values (numpy ints -> int) go through object.__setattr__.
        object.__setattr__(self, "clip_len", _check_int("clip_len", self.clip_len, 1))
        object.__setattr__(self, "stride", _check_int("stride", self.stride, 1))
        if self.frames is not None:
            if isinstance(self.frames, bool) or not isinstance(self.frames, numbers.Integral):
                raise TypeError(
                    f"ClipSpec.frames must be None or an int in [1, clip_len={self.clip_len}], "
                    f"got frames={self.frames!r} of type {type(self.frames).__name__}."
                )
            if not 1 <= self.frames <= self.clip_len:
                raise ValueError(
                    f"ClipSpec.frames must be None or an int in [1, clip_len={self.clip_len}], "
                    f"got frames={self.frames!r}."
                )
            object.__setattr__(self, "frames", int(self.frames))
        if not isinstance(self.assign, str):
            raise TypeError(
                f"ClipSpec.assign must be one of {list(_ASSIGN_MODES)}, got assign={self.assign!r} "
                f"of type {type(self.assign).__name__}."
            )
        if self.assign not in _ASSIGN_MODES:
            raise ValueError(
                f"ClipSpec.assign must be one of {list(_ASSIGN_MODES)}, got assign={self.assign!r}."
            )
        if not isinstance(self.final_frame, bool):
            raise TypeError(
                f"ClipSpec.final_frame must be a bool, got final_frame={self.final_frame!r} "
                f"of type {type(self.final_frame).__name__}."
            )

    @property
    def clip_frames(self) -> int:
        """Number of frames a clip has: ``clip_len``, plus one (the outcome) with ``final_frame``."""
        return self.clip_len + int(self.final_frame)

    @property
    def num_frames(self) -> int:
        """Number of frames per clip sent to the scorer: ``frames``, or :attr:`clip_frames` if ``None``."""
        return self.clip_frames if self.frames is None else self.frames

    @property
    def reduce(self) -> str:
        """How a sampler folds several clip scores on one transition: ``"replace"`` or ``"max"``."""
        return _REDUCE_OF_ASSIGN[self.assign]

    def frame_indices(self) -> Tensor:
        """Positions inside a clip of the frames sent to the scorer.

        Positions ``0 .. clip_len - 1`` are the frames before each step; position
        ``clip_len`` is the outcome frame (only with ``final_frame``). All positions when
        ``frames`` is ``None``. Otherwise ``frames`` positions evenly spaced over the clip's
        :attr:`clip_frames` frames by ``torch.linspace(0, clip_frames - 1, frames).round()``
        (round half to even): strictly increasing, the first is ``0`` and the last is the
        clip's last frame (the outcome with ``final_frame``). A single frame (``frames=1``) is
        the *last* position, because the end of a clip is what shows whether progress was
        made. The rule lives in :func:`vlmrb_torchrl._frames.evenly_spaced`; the scorer
        backends subsample with it too, and only clips with more real frames than their
        ``max_frames``.

        Returns:
            an int64 tensor of shape ``[num_frames]``.

        Examples:
            >>> ClipSpec(clip_len=4).frame_indices().tolist()
            [0, 1, 2, 3, 4]
            >>> ClipSpec(clip_len=32, frames=8, final_frame=False).frame_indices().tolist()
            [0, 4, 9, 13, 18, 22, 27, 31]
        """
        return evenly_spaced(self.clip_frames, self.num_frames)


class _ClipBatchFields(NamedTuple):
    clips: TensorDictBase
    target_clip: Tensor
    index: Tensor
    generation: Tensor
    reduce: str
    frames: TensorDictBase | None = None


class ClipBatch(_ClipBatchFields):
    """Complete clips and the transitions their scores are written to.

    Fields (read them by name; the tuple order is the one below):

    - ``clips`` (TensorDict ``[B, L']``): one row per clip, always the full ``clip_len`` L steps
      (the scoring transform subsamples with :meth:`ClipSpec.frame_indices`), then, when the
      stream shows the outcome frame (:attr:`ClipStream.final_frame`), one more position
      ``L`` (``L' = L + 1``; else ``L' = L``). Entries: the frame key
      (``[B, L', *frame_shape]``, dtype as collected), ``"mask"`` (``[B, L']`` bool, ``True``
      on real steps, ``False`` on padding), ``("clip", "index")`` (``[B, L']`` int64 storage
      index of each step, ``-1`` on padding) and every ``extra_keys`` entry. Padding repeats
      the last real step, for frames and extras alike. Position ``L`` is no step: its frame is
      the outcome (``("next", frame)`` of the last real step), its other entries repeat the
      last real step, ``"mask"`` is ``False`` and the index ``-1``.
    - ``target_clip`` (Tensor ``[M]`` int64): which row of ``clips`` scores each target.
    - ``index`` (Tensor ``[M]`` int64): storage index of each target transition.
    - ``generation`` (Tensor ``[M]`` int64): the slot generation given to
      :meth:`ClipStream.push` for that transition, for stale-write checks.
    - ``reduce`` (str): ``"replace"`` (``assign="start"``: each transition has one target) or
      ``"max"`` (``assign="cover_max"``: keep the max over the clips covering a transition).
    - ``frames`` (TensorDict ``[P]`` or ``None``): the frame pool of a stream built with
      ``pool_frames=True``. Each distinct frame is then stored once here instead of once per
      clip that shows it (``clip_len`` times with stride 1), and ``clips`` holds
      ``("clip", "frame_row")`` (``[B, L]`` rows of the pool) instead of the frame key.
      :meth:`gather_frames` rebuilds the inline layout.

    ``len(clip_batch)`` is the number of clips ``B``, not the number of fields.

    The class owns the layout: the entry names (:attr:`MASK_KEY`, :attr:`INDEX_KEY`,
    :attr:`FRAME_ROW_KEY`), cutting a batch in two (:meth:`split`), joining batches
    (:meth:`cat`) and reading frames back from the pool (:meth:`gather_frames`,
    :meth:`inline_frames`, :meth:`pooled_frames`).

    Examples:
        >>> clips = TensorDict(pixels=torch.zeros(2, 3, 1), batch_size=[2, 3])
        >>> cb = ClipBatch(clips, torch.tensor([0, 1, 1]), torch.tensor([7, 8, 9]),
        ...                torch.zeros(3, dtype=torch.long), "max")
        >>> len(cb), cb.scores_for_targets(torch.tensor([0.25, 0.75])).tolist()
        (2, [0.25, 0.75, 0.75])
        >>> both = ClipBatch.cat([cb, cb])
        >>> len(both), both.target_clip.tolist(), both.index.tolist()
        (4, [0, 1, 1, 2, 3, 3], [7, 8, 9, 7, 8, 9])
        >>> head, rest = both.split(3)
        >>> (len(head), head.index.tolist()), (len(rest), rest.target_clip.tolist())
        ((3, [7, 8, 9, 7]), (1, [0, 0]))
    """

    # A plain subclass (not typing.NamedTuple itself) so that __len__ and _make can be
    # overridden: namedtuple's _make/_replace check the field count with len().
    __slots__ = ()

    #: ``[B, L]`` bool entry of :attr:`clips`: ``True`` on real steps, ``False`` on padding.
    MASK_KEY = MASK_KEY
    #: ``[B, L]`` int64 entry of :attr:`clips`: storage index of each step, ``-1`` on padding.
    INDEX_KEY = CLIP_INDEX_KEY
    #: ``[B, L]`` int64 entry of :attr:`clips` with a frame pool: the pool row of each step.
    FRAME_ROW_KEY = FRAME_ROW_KEY

    def __len__(self) -> int:
        return self.clips.shape[0]

    @classmethod
    def _make(cls, iterable) -> ClipBatch:
        result = tuple.__new__(cls, iterable)
        if tuple.__len__(result) == len(cls._fields) - 1:  # no frame pool
            result = tuple.__new__(cls, (*result, None))
        if tuple.__len__(result) != len(cls._fields):
            raise TypeError(
                f"ClipBatch takes {len(cls._fields)} fields {list(cls._fields)}, "
                f"got {tuple.__len__(result)}."
            )
        return result

    @property
    def num_clips(self) -> int:
        """Number of clips ``B`` (same as ``len``)."""
        return self.clips.shape[0]

    @property
    def num_targets(self) -> int:
        """Number of target transitions ``M``."""
        return self.index.shape[0]

    def scores_for_targets(self, clip_scores: Tensor) -> Tensor:
        """Spreads one score per clip onto the targets: ``clip_scores[target_clip]``.

        Args:
            clip_scores (Tensor): ``[B]`` (or ``[B, ...]``) scores, one row per clip.

        Returns:
            a ``[M]`` (or ``[M, ...]``) tensor on the device of ``clip_scores``, aligned with
            :attr:`index` and :attr:`generation`.
        """
        if clip_scores.ndim == 0 or clip_scores.shape[0] != self.num_clips:
            raise ValueError(
                f"ClipBatch.scores_for_targets needs one score per clip, i.e. shape "
                f"[{self.num_clips}], got clip_scores.shape={list(clip_scores.shape)}."
            )
        return clip_scores[self.target_clip.to(clip_scores.device)]

    def split(self, n: int) -> tuple[ClipBatch, ClipBatch]:
        """The first ``n`` clips (with their targets) and the rest, as two clip batches.

        Both halves share the frame pool (no copy); :meth:`cat` shifts the pool rows when they
        meet again.

        Args:
            n (int): clips in the first half, ``0 <= n <= len(self)``.
        """
        head = self.target_clip < n
        tail = ~head
        first = ClipBatch(self.clips[:n], self.target_clip[head], self.index[head],
                          self.generation[head], self.reduce, self.frames)
        rest = ClipBatch(self.clips[n:], self.target_clip[tail] - n, self.index[tail],
                         self.generation[tail], self.reduce, self.frames)
        return first, rest

    def gather_frames(self, positions: Tensor | None = None) -> TensorDictBase:
        """The clips with frames inline, optionally only at ``positions`` along the clip.

        Without a frame pool this returns :attr:`clips` (sliced at ``positions``). With one,
        it gathers just the frames asked for, so scoring ``F`` of ``L`` frames costs
        ``B * F`` frame copies. See :meth:`inline_frames`.
        """
        return self.inline_frames(self.clips, self.frames, positions)

    def materialize(self, positions: Tensor | None = None) -> TensorDictBase:
        """Alias of :meth:`gather_frames` (the earlier name)."""
        return self.gather_frames(positions)

    @staticmethod
    def inline_frames(
        clips: TensorDictBase, frames: TensorDictBase | None, positions: Tensor | None = None
    ) -> TensorDictBase:
        """``[B, L]`` clips with the pooled ``frames`` written inline, at ``positions`` only.

        The reading side of :attr:`frames` for code that holds the two fields apart (e.g. a
        child process scoring ``clips`` and ``frames`` sent separately).

        Args:
            clips (TensorDictBase): ``[B, L]`` clips; with a pool they hold
                :attr:`FRAME_ROW_KEY` instead of the frame entries.
            frames (TensorDictBase or None): the frame pool, ``[P]``; ``None`` when the frames
                are already inline.
            positions (Tensor, optional): positions along the clip to keep; all if ``None``.

        Returns:
            ``[B, len(positions)]`` (or ``[B, L]``) clips holding the pool's entries and not
            :attr:`FRAME_ROW_KEY`.
        """
        clips = clips if positions is None else clips[:, positions]
        if frames is None:
            return clips
        clips = clips.copy()
        rows = clips.pop(FRAME_ROW_KEY)
        for key, pool in frames.items(include_nested=True, leaves_only=True):
            clips.set(key, _gather_rows(pool, rows))
        return clips

    @staticmethod
    def pooled_frames(
        clips: TensorDictBase, frames: TensorDictBase, key: NestedKey, positions: Tensor | None = None
    ) -> Tensor:
        """The ``[B, len(positions), ...]`` frames of entry ``key`` for pooled ``[B, L]`` clips.

        What :meth:`inline_frames` writes for one entry, as a plain tensor (no TensorDict copy):
        the scoring transform gathers just the frames it sends this way.
        """
        rows = clips.get(FRAME_ROW_KEY)
        return _gather_rows(frames.get(key), rows if positions is None else rows[:, positions])

    @classmethod
    def cat(cls, batches: Sequence[ClipBatch]) -> ClipBatch:
        """Concatenates clip batches (e.g. from several pushes) into one.

        Clips are concatenated along dim 0 and ``target_clip`` is offset accordingly, so the
        result scores exactly the targets of its parts.

        Args:
            batches (sequence of ClipBatch): non-empty; same ``reduce``, same clip length, same
                keys and frame shapes.

        Returns:
            a single :class:`ClipBatch`.
        """
        batches = list(batches)
        if not batches:
            raise ValueError("ClipBatch.cat needs at least one ClipBatch, got an empty sequence.")
        if len(batches) == 1:
            return batches[0]
        reduces = {b.reduce for b in batches}
        if len(reduces) > 1:
            raise ValueError(
                f"ClipBatch.cat needs batches with one reduce mode, got {sorted(reduces)}; "
                "clips from streams with different ClipSpec.assign cannot share targets."
            )
        clip_lens = [b.clips.shape[1] for b in batches]
        if len(set(clip_lens)) > 1:
            raise ValueError(
                f"ClipBatch.cat needs clips of one length, got clip lengths {clip_lens}."
            )
        try:
            clips = torch.cat([b.clips for b in batches], dim=0)
        except (KeyError, RuntimeError, ValueError) as err:
            raise ValueError(
                "ClipBatch.cat needs clips with the same keys, frame shapes and dtypes; "
                f"torch.cat failed with: {err}"
            ) from err
        offsets = itertools.accumulate([len(b) for b in batches[:-1]], initial=0)
        target_clip = torch.cat([b.target_clip + off for b, off in zip(batches, offsets)])
        frames = None
        if any(b.frames is not None for b in batches):
            if any(b.frames is None for b in batches):
                raise ValueError("ClipBatch.cat cannot mix clips with and without a frame pool.")
            # pools are concatenated, each batch's rows shifted past the pools before it
            pool_offsets = itertools.accumulate([b.frames.shape[0] for b in batches[:-1]], initial=0)
            clips.set(FRAME_ROW_KEY, torch.cat(
                [b.clips[FRAME_ROW_KEY] + off for b, off in zip(batches, pool_offsets)]))
            frames = torch.cat([b.frames for b in batches])
        return cls(
            clips,
            target_clip,
            torch.cat([b.index for b in batches]),
            torch.cat([b.generation for b in batches]),
            batches[0].reduce,
            frames,
        )


def _gather_rows(pool: Tensor, rows: Tensor) -> Tensor:
    """``pool[rows]`` for ``[B, F]`` pool rows: ``[B, F, *pool.shape[1:]]``."""
    # index_select is about twice as fast as advanced indexing for image rows.
    gathered = torch.index_select(pool, 0, rows.reshape(-1).to(pool.device))
    return gathered.reshape(*rows.shape, *pool.shape[1:])


_EMPTY = np.zeros(0, dtype=np.int64)


def _take(value, rows: np.ndarray):
    """``value[rows]`` along the first dim, for a tensor (``index_select``) or a TensorDict."""
    rows = torch.from_numpy(rows).to(value.device)
    return torch.index_select(value, 0, rows) if isinstance(value, Tensor) else value[rows]


def _by_segment(held: tuple, new: tuple) -> list[np.ndarray]:
    """Columns ``(source row, segment, ...)`` of held rows and of new rows, concatenated and
    ordered by segment, held rows first (both parts are already in step order per segment)."""
    columns = [np.concatenate([h, n]) for h, n in zip(held, new)]
    key = columns[1] * 2
    key[held[0].size:] += 1
    order = np.argsort(key, kind="stable")
    return [c[order] for c in columns]


def _found_keys(td: TensorDictBase) -> list:
    return sorted(td.keys(include_nested=True, leaves_only=True), key=str)


class ClipStream:
    """Cuts a stream of collector batches into clips, trajectory by trajectory.

    Feed every collector batch to :meth:`push` together with the storage indices (and slot
    generations) that ``rb.extend(batch.reshape(-1))`` returned. The stream groups steps by
    trajectory id, keeps a rolling window of frames per live trajectory and returns every clip
    whose steps have all arrived, as a :class:`ClipBatch`.

    How clips are cut (``L = spec.clip_len``):

    - Clip starts inside a trajectory are ``0, stride, 2 * stride, ...``; the clip starting at
      ``s`` shows steps ``s .. s + L - 1``.
    - A clip is emitted as soon as all the steps it shows *and* all its targets have arrived,
      i.e. once the trajectory reaches ``s + max(L, stride)`` steps (``stride > L`` only delays
      ``assign="start"`` clips until their stride block is known).
    - When a trajectory ends (``done_key`` is ``True`` at a step, or :meth:`flush`), every clip
      start ``s < n`` not yet emitted is emitted at once, padded to ``L`` by repeating the last
      real step (``"mask"`` is ``False`` on padding). A trajectory shorter than ``L`` thus gives
      at least one padded clip, and no transition is left without a target.
    - Targets: see :class:`ClipSpec` ``assign``. With ``"start"`` every transition is the target
      of exactly one clip once its trajectory has ended.

    Trajectory boundaries come only from ``traj_key`` and ``done_key``: a clip never mixes two
    trajectory ids, even where flattened env blocks of a ``[E, T]`` batch touch without a done.

    Outcome frame (``spec.final_frame``, on by default, and a ``frame_key``): every clip also
    shows the frame after its last real step, ``("next", frame_key)`` of that step, at position
    ``L`` (so clips are ``[B, L + 1]``; see :class:`ClipBatch`). Inside a trajectory it is the
    next step's frame, so a clip is emitted one step later (once ``s + L + 1`` steps arrived);
    at a trajectory's end (``done`` or :meth:`flush`) it is read from ``("next", frame_key)``,
    which every batch must then hold (TorchRL collectors write it for every observation of a
    rendering env). Pooled, it is stored once like any frame. Per-step entries at position
    ``L`` repeat the last real step, with ``"mask"`` ``False`` and index ``-1``: the outcome
    is a frame, not a step, so a scorer reading event flags sees exactly the steps it saw
    without it.

    Memory: only the steps some pending clip still needs are kept, at most ``clip_len`` frames
    per live trajectory whatever the stream length (``clip_len + 2`` with the outcome frame;
    see :attr:`num_frames_held`).

    Args:
        spec (ClipSpec): clip geometry.

    Keyword Args:
        frame_key (NestedKey or None, optional): the per-step frames, e.g. ``"pixels"``
            (``[*batch, H, W, C]`` uint8 as rendered; any per-step tensor works). ``None``
            cuts clips without frames, for scorers that read only ``extra_keys`` (e.g. a
            privileged state or success flag). Defaults to ``"pixels"``.
        traj_key (NestedKey, optional): per-step trajectory ids. Defaults to
            ``("collector", "traj_ids")``, which TorchRL collectors write
            (``track_traj_ids=True``).
        done_key (NestedKey or None, optional): per-step end flags; a ``True`` at a step ends
            that trajectory after the step. ``None`` ends trajectories only at :meth:`flush`.
            Defaults to ``("next", "done")``.
        extra_keys (sequence of NestedKey, optional): more per-step entries copied into the
            clips (``[B, L, ...]``, padded like the frames), e.g. ``[("next", "reward")]``.
            A lone str is wrapped in a list; a nested key must be inside a list.
            Defaults to ``()``.
        pool_frames (bool, optional): emit each frame once in :attr:`ClipBatch.frames` with
            per-clip row indices, instead of copying it into every clip that shows it
            (``clip_len`` copies with stride 1). Use it for image scorers; the scoring
            transform gathers only the frames it sends. Defaults to ``False``.

    Raises:
        KeyError: at :meth:`push`, a needed entry (``("next", frame_key)`` included, with the
            outcome frame on) is missing from the batch.

    .. note::
        A trajectory that stops appearing without a ``done`` (a collector recreated on resume,
        ``reset_at_each_iter=True``) stays buffered (and its held rows are copied again at every
        push): its ids can come back meaning something else, e.g. trajectory ids restart at 0 in
        a new collector. Call :meth:`flush` (score what is pending) or :meth:`reset` (drop it)
        whenever the collector is recreated. A
        ``done`` followed by more steps with the same id (``set_truncated=True``) starts a new
        trajectory: clips never cross a ``done``.

    Examples:
        >>> # two envs, 4 steps each; pixels encode the storage index. Env 1 finishes
        >>> # trajectory 1 after its second step (its last frame, "next" of step 5, is 50)
        >>> # and starts trajectory 2.
        >>> batch = TensorDict(
        ...     pixels=torch.arange(8, dtype=torch.uint8).reshape(2, 4, 1),
        ...     collector=TensorDict(traj_ids=torch.tensor([[0, 0, 0, 0], [1, 1, 2, 2]]),
        ...                          batch_size=[2, 4]),
        ...     next=TensorDict(done=torch.tensor([[0, 0, 0, 0], [0, 1, 0, 0]]).bool()[..., None],
        ...                     pixels=torch.tensor([[1, 2, 3, 4], [5, 50, 7, 8]]).byte()[..., None],
        ...                     batch_size=[2, 4]),
        ...     batch_size=[2, 4])
        >>> stream = ClipStream(ClipSpec(clip_len=3))  # 3 steps + the outcome frame
        >>> out = stream.push(batch, index=torch.arange(8))
        >>> out.clips.batch_size
        torch.Size([3, 4])
        >>> out.clips["pixels"][..., 0].tolist()
        [[0, 1, 2, 3], [4, 5, 5, 50], [5, 5, 5, 50]]
        >>> out.clips["mask"].sum(-1).tolist(), out.index.tolist()
        ([3, 2, 1], [0, 4, 5])
        >>> stream.num_trajectories, stream.num_frames_held
        (2, 7)
        >>> rest = stream.flush()
        >>> rest.clips["pixels"][..., 0].tolist(), rest.index.tolist()
        ([[1, 2, 3, 4], [2, 3, 3, 4], [3, 3, 3, 4], [6, 7, 7, 8], [7, 7, 7, 8]], [1, 2, 3, 6, 7])
        >>> stream.num_trajectories, stream.flush()
        (0, None)

        Without the outcome frame, clips hold the frames before their steps only:

        >>> stream = ClipStream(ClipSpec(clip_len=3, final_frame=False))
        >>> stream.push(batch, index=torch.arange(8)).clips["pixels"][..., 0].tolist()
        [[0, 1, 2], [1, 2, 3], [4, 5, 5], [5, 5, 5]]
    """

    def __init__(
        self,
        spec: ClipSpec,
        *,
        frame_key: NestedKey | None = "pixels",
        traj_key: NestedKey = ("collector", "traj_ids"),
        done_key: NestedKey | None = ("next", "done"),
        extra_keys: Sequence[NestedKey] = (),
        pool_frames: bool = False,
    ) -> None:
        if not isinstance(spec, ClipSpec):
            raise TypeError(
                f"ClipStream needs spec to be a ClipSpec, got {type(spec).__name__}; "
                "build one with ClipSpec(clip_len=..., stride=...)."
            )
        self.spec = spec
        self.frame_key = None if frame_key is None else self._check_key("frame_key", frame_key)
        self.traj_key = self._check_key("traj_key", traj_key, reserved_ok=True)
        self.done_key = (
            None if done_key is None else self._check_key("done_key", done_key, reserved_ok=True)
        )
        if isinstance(extra_keys, str):
            extra_keys = [extra_keys]
        extras = [self._check_key("extra_keys", k) for k in extra_keys]
        data_keys = ([] if self.frame_key is None else [self.frame_key]) + extras
        if len(set(data_keys)) != len(data_keys):
            raise ValueError(
                f"ClipStream got duplicated keys in frame_key={frame_key!r} and "
                f"extra_keys={list(extra_keys)!r}; list each entry once."
            )
        self.extra_keys = extras
        self.pool_frames = bool(pool_frames)
        #: whether clips show the outcome frame (``spec.final_frame`` and a ``frame_key``).
        self.final_frame = spec.final_frame and self.frame_key is not None
        #: where the outcome frame is read at a trajectory's end: ``("next", frame_key)``.
        self.next_frame_key = (
            None if self.frame_key is None else unravel_key(("next", self.frame_key))
        )
        self._data_keys = data_keys
        # (feature shape, dtype) per data key, so a mid-trajectory change fails clearly.
        self._features: dict[NestedKey, tuple] | None = None
        # Device of the last pushed batch (None for mixed devices), given to emitted clips.
        self._device: torch.device | None = None
        # Device of the per-clip entries (mask, rows): the data's (the index's without data).
        self._out_device: torch.device | None = None
        self.reset()

    @staticmethod
    def _check_key(name: str, key: object, reserved_ok: bool = False) -> NestedKey:
        # unravel_key alone is too lenient (it accepts ("a", 1) and "").
        if not is_nested_key(key):
            raise TypeError(
                f"ClipStream {name} must be a non-empty str or tuple of str (a NestedKey), "
                f"got {name}={key!r}."
            )
        key = unravel_key(key)
        root = key if isinstance(key, str) else key[0]
        if not reserved_ok and root in _RESERVED_ROOTS:
            raise ValueError(
                f"ClipStream {name}={key!r} would shadow the entries the stream writes "
                f"({MASK_KEY!r}, {CLIP_INDEX_KEY!r}); rename that entry in the batch."
            )
        return key

    # ------------------------------------------------------------------ public state

    @property
    def in_keys(self) -> list[NestedKey]:
        """The batch entries :meth:`push` reads: frames (and outcome frames), trajectory ids, end
        flags and ``extra_keys``.

        Examples:
            >>> ClipStream(ClipSpec(clip_len=3)).in_keys
            ['pixels', ('next', 'pixels'), ('collector', 'traj_ids'), ('next', 'done')]
        """
        frames = [] if self.frame_key is None else [self.frame_key]
        if self.final_frame:
            frames.append(self.next_frame_key)
        done = [] if self.done_key is None else [self.done_key]
        return [*frames, self.traj_key, *done, *self.extra_keys]

    @property
    def num_trajectories(self) -> int:
        """Number of live (started, not yet ended) trajectories buffered."""
        return self._live_id.size

    @property
    def num_frames_held(self) -> int:
        """Number of steps (frames) currently buffered, summed over trajectories.

        Bounded by ``num_trajectories * spec.clip_len`` (``clip_len + 2`` with the outcome
        frame: one more step and the buffered ``("next", frame)`` of the last step).
        """
        return self._held_step.size + (self.num_trajectories if self.final_frame else 0)

    def reset(self) -> None:
        """Drops all buffered state without emitting anything."""
        # Live trajectories, in the order flush() emits them (CPU int64): id, steps seen so far,
        # first clip start not yet emitted; and the ("next", frame) of each one's last step.
        self._live_id = self._live_length = self._live_next = _EMPTY
        self._live_tail: Tensor | None = None
        # Held rows, in step order within each live trajectory (``slot``: its live position):
        # frames and extras of the steps some pending clip still shows, and the targets
        # (index, generation) of steps ``next_start .. length - 1``.
        self._held: dict = {}
        self._held_slot = self._held_step = self._held_islot = _EMPTY
        self._held_index: Tensor | None = None
        self._held_generation: Tensor | None = None
        self._features = None
        # predecessors(): the storage index of each live trajectory's last step seen
        self._last_index: dict[int, int] = {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(spec={self.spec}, frame_key={self.frame_key!r}, "
            f"traj_key={self.traj_key!r}, done_key={self.done_key!r}, "
            f"extra_keys={self.extra_keys!r}, num_trajectories={self.num_trajectories}, "
            f"num_frames_held={self.num_frames_held})"
        )

    def predecessors(self, batch: TensorDictBase, index: Tensor) -> Tensor:
        """The storage index of the step before each step of ``batch`` in its trajectory.

        ``-1`` for a trajectory's first step, and for the first step this stream sees of a trajectory it
        has not seen since its last :meth:`reset` or :meth:`flush` (both forget every trajectory, as
        clip cutting does). Trajectories are told apart as :meth:`push` does (``traj_key``, a ``done``
        ends one). Independent of :meth:`push`: call it once per batch, before or after. What a sampler
        with episode credit needs (:meth:`~vlmrb_torchrl.VLMPrioritizedSampler.link`).

        Args:
            batch (TensorDictBase): the batch given to :meth:`push` (read in ``reshape(-1)`` order).
            index (Tensor): the ``N`` storage indices of its steps.

        Examples:
            >>> batch = TensorDict({("collector", "traj_ids"): torch.tensor([[0, 0, 0], [1, 2, 2]]),
            ...                     ("next", "done"): torch.tensor([[0, 0, 0], [1, 0, 0]]).bool()[..., None]},
            ...                    batch_size=[2, 3])
            >>> stream = ClipStream(ClipSpec(clip_len=2), frame_key=None)
            >>> stream.predecessors(batch, torch.arange(6)).tolist()
            [-1, 0, 1, -1, -1, 4]
            >>> stream.predecessors(batch, torch.arange(6, 12)).tolist()  # ids 0 and 2 go on, 1 is new
            [2, 6, 7, -1, 5, 10]
        """
        if not isinstance(batch, TensorDictBase) or batch.batch_dims == 0:
            raise TypeError("ClipStream.predecessors needs a TensorDict batch with a batch dimension, got "
                            f"{type(batch).__name__}.")
        num = batch.numel()
        index = self._check_steps("index", index, num, batch)
        traj = batch.get(self.traj_key).reshape(num).tolist()
        done = ([False] * num if self.done_key is None
                else batch.get(self.done_key).reshape(num, -1).any(-1).tolist())
        last, out = self._last_index, []
        for step_traj, step_done, step_index in zip(traj, done, index.tolist()):
            out.append(last.get(step_traj, -1))
            if step_done:
                last.pop(step_traj, None)
            else:
                last[step_traj] = step_index
        return torch.tensor(out, dtype=torch.int64)

    # ------------------------------------------------------------------ push / flush

    def push(
        self,
        batch: TensorDictBase,
        index: Tensor,
        generation: Tensor | None = None,
    ) -> ClipBatch | None:
        """Adds a collector batch and returns the clips it completes.

        Args:
            batch (TensorDictBase): a collector batch, flat ``[N]`` or ``[E, T]`` (read in
                ``reshape(-1)`` order). Must hold ``frame_key``, ``traj_key``, ``done_key``
                (unless ``None``) and every ``extra_keys`` entry. Within the batch the steps of
                one trajectory must be in time order; trajectories may be interleaved, and a
                trajectory continues across pushes under the same id.
            index (Tensor): the ``N`` storage indices of the steps, in ``reshape(-1)`` order
                (what ``rb.extend(batch.reshape(-1))`` returned).
            generation (Tensor, optional): the ``N`` slot generations at insertion. Defaults to
                zeros.

        Returns:
            a :class:`ClipBatch` with the completed clips (grouped by trajectory in order of
            first appearance in the batch, then by start), or ``None`` if none completed.
            Target ``index``/``generation`` stay on the device of ``index``; clips on the
            device of the batch entries.

        Raises:
            KeyError: if a needed entry is missing from ``batch``.
            ValueError: if ``index``/``generation`` do not hold one value per step, or the
                frame shape/dtype changes while a trajectory is buffered.
            TypeError: if ``batch`` is not a TensorDict or ``index`` is not an integer tensor.
        """
        num, data, traj, done, index, generation, next_frames = self._read_batch(
            batch, index, generation
        )
        self._device = batch.device
        self._out_device = next(iter(data.values())).device if data else index.device
        # The bookkeeping works on a few small int arrays: NumPy on the CPU (a NumPy call costs a
        # fraction of a torch call at these sizes), whatever the data's device.
        traj, done = traj.cpu().numpy(), done.cpu().numpy()
        # Segments: each trajectory id's steps (ids in order of first appearance in the batch,
        # so output order follows the batch), cut after every done: a done ends the trajectory,
        # and any later step with the same id starts a new one.
        _, first, group_of = np.unique(traj, return_index=True, return_inverse=True)
        rank = np.empty_like(first)
        rank[np.argsort(first)] = np.arange(first.size)
        step_rank = rank[group_of.reshape(-1)]
        perm = np.argsort(step_rank, kind="stable")  # batch rows, segment by segment
        perm_rank, perm_done = step_rank[perm], done[perm]
        id_starts = np.ones(num, dtype=bool)
        id_starts[1:] = perm_rank[1:] != perm_rank[:-1]
        seg_starts = id_starts.copy()
        seg_starts[1:] |= perm_done[:-1]
        seg_begin = np.flatnonzero(seg_starts)
        seg_end = np.append(seg_begin[1:], num)
        seg_id = traj[perm[seg_begin]]
        # The first segment of an id continues the live trajectory of that id, if any.
        seg_slot = np.full(seg_id.size, -1)
        if self.num_trajectories:
            continues = (seg_id[:, None] == self._live_id) & id_starts[seg_begin, None]
            seg_slot = np.where(continues.any(1), continues.argmax(1), -1)
        tails = None
        if next_frames is not None:  # ("next", frame) of each segment's last step
            tails = _take(next_frames, perm[seg_end - 1])
        return self._emit(
            seg_slot, seg_end - seg_begin, perm_done[seg_end - 1], seg_id, tails,
            perm, data, index, generation,
        )

    def flush(self) -> ClipBatch | None:
        """Ends every live trajectory: emits all its pending (padded) clips and clears state.

        Use it at the end of a run or before the collector is recreated (trajectory ids
        restart at 0 in a new collector).

        Returns:
            a :class:`ClipBatch`, or ``None`` if nothing was pending.
        """
        live = self.num_trajectories
        out = None
        if live:
            out = self._emit(
                np.arange(live), np.zeros(live, dtype=np.int64), np.ones(live, dtype=bool),
                self._live_id, self._live_tail, _EMPTY, {k: v[:0] for k, v in self._held.items()},
                self._held_index[:0], self._held_generation[:0],
            )
        self.reset()
        return out

    # ------------------------------------------------------------------ internals

    def _read_batch(
        self, batch: TensorDictBase, index: Tensor, generation: Tensor | None
    ) -> tuple[int, dict, Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        if not isinstance(batch, TensorDictBase):
            raise TypeError(
                f"ClipStream.push needs a TensorDict batch, got {type(batch).__name__}."
            )
        if batch.batch_dims == 0:
            raise ValueError(
                "ClipStream.push needs a batch with at least one batch dimension ([N] or "
                f"[E, T]), got batch_size={list(batch.batch_size)}."
            )
        num = batch.numel()
        keys = set(batch.keys(include_nested=True))

        def missing(what: str, key: NestedKey, fix: str) -> KeyError:
            return KeyError(
                f"ClipStream needs {what}{key!r} in the batch; found {_found_keys(batch)}. {fix}"
            )

        if self.frame_key is not None and self.frame_key not in keys:
            raise missing(
                "", self.frame_key, "Render frames at collection time or pass frame_key=."
            )
        if self.final_frame and self.next_frame_key not in keys:
            raise missing(
                "the outcome frames ",
                self.next_frame_key,
                "Clips show the frame after their last step (ClipSpec.final_frame=True): "
                "push batches as collectors write them (they hold ('next', <frame key>)), or "
                "pass ClipSpec(final_frame=False).",
            )
        if self.traj_key not in keys:
            raise missing(
                "trajectory ids ",
                self.traj_key,
                "Collect with track_traj_ids=True (the Collector default) or pass traj_key=.",
            )
        if self.done_key is not None and self.done_key not in keys:
            raise missing(
                "",
                self.done_key,
                "Pass done_key= (or done_key=None to end trajectories only at flush()).",
            )
        for key in self.extra_keys:
            if key not in keys:
                raise missing("extra key ", key, "Add it to the batch or drop it from extra_keys=.")

        index = self._check_steps("index", index, num, batch)
        if generation is None:
            generation = torch.zeros_like(index)
        else:
            generation = self._check_steps("generation", generation, num, batch)
            generation = generation.to(index.device)

        traj = batch.get(self.traj_key)
        if traj.numel() != num:
            raise ValueError(
                f"ClipStream needs one trajectory id per step in {self.traj_key!r}, got shape "
                f"{list(traj.shape)} for batch_size={list(batch.batch_size)}."
            )
        traj = traj.reshape(num)
        if self.done_key is None:
            done = torch.zeros(num, dtype=torch.bool, device=traj.device)
        else:
            done = batch.get(self.done_key).reshape(num, -1).any(-1).to(traj.device)

        data = {}
        for key in self._data_keys:
            value = batch.get(key)
            value = value.reshape(num, *value.shape[batch.batch_dims :])
            data[key] = value
        next_frames = None
        if self.final_frame:
            value = batch.get(self.next_frame_key)
            next_frames = value.reshape(num, *value.shape[batch.batch_dims :])
            frames = data[self.frame_key]
            if next_frames.shape[1:] != frames.shape[1:] or next_frames.dtype != frames.dtype:
                raise ValueError(
                    f"ClipStream needs {self.next_frame_key!r} with the per-step shape and dtype "
                    f"of {self.frame_key!r} ({list(frames.shape[1:])}, {frames.dtype}); got "
                    f"{list(next_frames.shape[1:])}, {next_frames.dtype}."
                )
        self._check_features(data)
        return num, data, traj, done, index, generation, next_frames

    @staticmethod
    def _check_steps(name: str, value, num: int, batch: TensorDictBase) -> Tensor:
        value = torch.as_tensor(value)
        if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
            raise TypeError(
                f"ClipStream.push needs integer {name} (storage slots), got dtype={value.dtype}."
            )
        if value.numel() != num:
            raise ValueError(
                f"ClipStream.push needs one {name} per step: got {value.numel()} for a batch of "
                f"{num} steps (batch_size={list(batch.batch_size)}). Pass what "
                "rb.extend(batch.reshape(-1)) returned, in the same order."
            )
        return value.reshape(num).long()

    def _check_features(self, data: dict) -> None:
        features = {
            k: (tuple(v.shape[1:]), v.dtype) for k, v in data.items() if isinstance(v, Tensor)
        }
        if self._features is not None and self.num_trajectories:
            for key, (shape, dtype) in features.items():
                if key in self._features and self._features[key] != (shape, dtype):
                    old_shape, old_dtype = self._features[key]
                    raise ValueError(
                        f"ClipStream got {key!r} with per-step shape {list(shape)} and dtype "
                        f"{dtype}, but live trajectories hold shape {list(old_shape)} and dtype "
                        f"{old_dtype}. Keep one frame shape and dtype, or call flush() before "
                        "changing them."
                    )
        self._features = features


    def _emit(
        self,
        seg_slot: np.ndarray,
        seg_len: np.ndarray,
        seg_ended: np.ndarray,
        seg_id: np.ndarray,
        seg_tail: Tensor | None,
        perm: np.ndarray,
        data: dict,
        index: Tensor,
        generation: Tensor,
    ) -> ClipBatch | None:
        """Cuts the clips that ``S`` trajectory segments complete, all at once, and updates the state.

        Segment ``j`` takes the batch rows ``perm[sum(seg_len[:j]) : sum(seg_len[:j + 1])]`` (in
        time order) and continues the live trajectory ``seg_slot[j]`` (``-1``: a new one);
        ``seg_ended[j]`` ends it after them. ``seg_tail`` holds each segment's outcome frame at its
        end, ``("next", frame)`` of its last step. Segments come in output order.

        Every segment's steps, held ones first, form the *work* rows, ordered by segment then
        step; clip positions are found there by ``searchsorted`` on ``segment * M + step``. Row
        numbers point into ``held + batch (+ tails)`` sources, concatenated once per key.
        """
        clip_len, stride = self.spec.clip_len, self.spec.stride
        outcome = int(self.final_frame)
        num_segs, num_new = seg_len.size, perm.size
        live = self.num_trajectories
        seg_range = np.arange(num_segs)
        continued = seg_slot >= 0
        first = np.zeros(num_segs, dtype=np.int64)  # steps the trajectory had before
        start0 = np.zeros(num_segs, dtype=np.int64)  # its first clip start not yet emitted
        seg_of_slot = np.full(live, -1)
        if live:
            slot = seg_slot[continued]
            first[continued], start0[continued] = self._live_length[slot], self._live_next[slot]
            seg_of_slot[slot] = seg_range[continued]
        length = first + seg_len

        # The batch's rows, segment by segment, with their trajectory steps.
        new_seg = np.repeat(seg_range, seg_len)
        seg_begin = np.cumsum(seg_len) - seg_len
        new_step = first[new_seg] + np.arange(num_new) - seg_begin[new_seg]
        new_rows, new_seg_shown = perm, new_seg
        if stride > clip_len:  # steps between two windows are never shown: keep their targets only
            shown = new_step % stride < clip_len + outcome
            new_rows, new_seg_shown, new_step = perm[shown], new_seg[shown], new_step[shown]

        # Work rows (frames and extras): held rows of continued trajectories, then the batch's.
        num_held = self._held_step.size
        held_seg = seg_of_slot[self._held_slot]
        held_used = np.flatnonzero(held_seg >= 0)
        w_src, w_seg, w_step = _by_segment(
            (held_used, held_seg[held_used], self._held_step[held_used]),
            (num_held + new_rows, new_seg_shown, new_step),
        )
        # Target rows (index, generation): every step from each segment's start0 to its end.
        iheld_seg = seg_of_slot[self._held_islot]
        iheld_used = np.flatnonzero(iheld_seg >= 0)
        i_src = _by_segment(
            (iheld_used, iheld_seg[iheld_used]), (self._held_islot.size + perm, new_seg)
        )[0]
        i_count = length - start0
        i_off = np.cumsum(i_count) - i_count
        index_src, generation_src = index, generation
        if self._held_index is not None:
            index_src = torch.cat([self._held_index, index])
            generation_src = torch.cat([self._held_generation, generation])
        sources = {}
        for key, value in data.items():
            parts = [self._held[key], value] if num_held else [value]
            if self.final_frame and key == self.frame_key:
                parts.append(seg_tail)
            sources[key] = torch.cat(parts) if len(parts) > 1 else value
        tail_rows = num_held + num_new if self.final_frame else 0  # row of segment 0's tail

        # How many clips each segment completes (see the class docstring for the rules).
        window = max(clip_len + outcome, stride)
        todo = length - start0
        count = np.where(
            seg_ended,
            (np.maximum(todo, 0) + stride - 1) // stride,
            np.maximum((todo - window) // stride + 1, 0),
        )
        next_start = start0 + stride * count
        out = None
        if count.sum():
            out = self._cut(
                count, start0, length, w_src, w_seg, w_step, i_src, i_off, sources,
                tail_rows, index_src, generation_src,
            )

        # New state: the live trajectories the segments did not touch keep their order, then
        # the segments that did not end, in order (as a dict re-inserting them would).
        untouched = np.ones(live, dtype=bool)
        untouched[seg_slot[continued]] = False
        kept_old = np.flatnonzero(untouched)
        kept_segs = np.flatnonzero(~seg_ended)
        slot_of_old = np.full(live, -1)
        slot_of_old[kept_old] = np.arange(kept_old.size)
        slot_of_seg = np.full(num_segs, -1)
        slot_of_seg[kept_segs] = kept_old.size + np.arange(kept_segs.size)
        # Held rows: the untouched ones as they are, then each going-on segment's rows from its
        # next clip start on. Copies (index_select): slices would pin the whole batch in memory.
        old_rows = np.flatnonzero(untouched[self._held_slot])
        w_keep = np.flatnonzero(~seg_ended[w_seg] & (w_step >= next_start[w_seg]))
        held_src = np.concatenate([old_rows, w_src[w_keep]])
        self._held = {k: _take(v, held_src) for k, v in sources.items()}
        self._held_slot = np.concatenate([slot_of_old[self._held_slot[old_rows]], slot_of_seg[w_seg[w_keep]]])
        self._held_step = np.concatenate([self._held_step[old_rows], w_step[w_keep]])
        i_seg = np.repeat(seg_range, i_count)
        i_step = start0[i_seg] + np.arange(i_src.size) - i_off[i_seg]
        i_keep = np.flatnonzero(~seg_ended[i_seg] & (i_step >= next_start[i_seg]))
        old_irows = np.flatnonzero(untouched[self._held_islot])
        iheld_src = torch.from_numpy(np.concatenate([old_irows, i_src[i_keep]])).to(index_src.device)
        self._held_index, self._held_generation = index_src[iheld_src], generation_src[iheld_src]
        self._held_islot = np.concatenate(
            [slot_of_old[self._held_islot[old_irows]], slot_of_seg[i_seg[i_keep]]]
        )
        if self.final_frame:
            tails = _take(seg_tail, kept_segs)
            if live:
                tails = torch.cat([_take(self._live_tail, kept_old), tails])
            self._live_tail = tails
        self._live_id = np.concatenate([self._live_id[kept_old], seg_id[kept_segs]])
        self._live_length = np.concatenate([self._live_length[kept_old], length[kept_segs]])
        self._live_next = np.concatenate([self._live_next[kept_old], next_start[kept_segs]])
        if not self.num_trajectories:
            self._features = None
        return out

    def _cut(
        self,
        count: np.ndarray,
        start0: np.ndarray,
        length: np.ndarray,
        w_src: np.ndarray,
        w_seg: np.ndarray,
        w_step: np.ndarray,
        i_src: np.ndarray,
        i_off: np.ndarray,
        sources: dict,
        tail_rows: int,
        index_src: Tensor,
        generation_src: Tensor,
    ) -> ClipBatch:
        """Gathers the ``count[j]`` clips of each segment ``j`` (starts ``start0[j] + stride * k``).

        The frame pool lists, segment by segment, the segment's work rows and then its outcome
        frame at the trajectory's end if a clip shows it (``sources[frame_key]`` row
        ``tail_rows + j``).
        """
        clip_len, stride = self.spec.clip_len, self.spec.stride
        num_segs, num_clips = count.size, int(count.sum())
        clip_seg = np.repeat(np.arange(num_segs), count)
        clip_first = np.cumsum(count) - count
        starts = start0[clip_seg] + stride * (np.arange(num_clips) - clip_first[clip_seg])
        clip_end = length[clip_seg]
        pos = starts[:, None] + np.arange(clip_len)
        mask = pos < clip_end[:, None]
        # Padding repeats the last real step; that step is always held (it lies inside the
        # clip's own window), so searchsorted finds exact rows.
        pos = np.minimum(pos, clip_end[:, None] - 1)
        scale = int(length.max()) + 1
        w_key = w_seg * scale + w_step  # ascending: work rows are ordered by segment, then step
        rows = np.searchsorted(w_key, clip_seg[:, None] * scale + pos)
        i_first = i_off[clip_seg] - start0[clip_seg]  # target row of step s: i_first + s
        clip_rows = np.where(mask, i_src[i_first[:, None] + pos], -1)

        # The frame pool: each emitting segment's work rows, then its tail if a clip shows it.
        w_count = np.bincount(w_seg, minlength=num_segs)
        w_off = np.cumsum(w_count) - w_count
        used_tail = np.zeros(num_segs, dtype=bool)
        if self.final_frame:
            # the outcome: the frame of the step after the last real one while that step is
            # held, else (trajectory end) the tail
            after = np.minimum(starts + clip_len, clip_end)
            inside = after < clip_end
            found = np.searchsorted(w_key, clip_seg * scale + np.minimum(after, clip_end - 1))
            used_tail[clip_seg[~inside]] = True
        pool_len = np.where(count > 0, w_count + used_tail, 0)
        pool_off = np.cumsum(pool_len) - pool_len
        shift = pool_off - w_off  # work row -> pool row, per segment
        frame_rows = rows + shift[clip_seg, None]
        if self.final_frame:
            outcome_rows = np.where(inside, found + shift[clip_seg], (pool_off + w_count)[clip_seg])
            frame_rows = np.concatenate([frame_rows, outcome_rows[:, None]], 1)
            rows = np.concatenate([rows, rows[:, -1:]], 1)  # per-step entries repeat the last real step
            mask = np.concatenate([mask, np.zeros((num_clips, 1), dtype=bool)], 1)
            clip_rows = np.concatenate([clip_rows, np.full((num_clips, 1), -1)], 1)

        device = self._out_device
        clips = TensorDict(batch_size=[num_clips, rows.shape[1]], device=self._device)
        frames = None
        if self.frame_key is not None:
            w_in = np.flatnonzero(count[w_seg] > 0)
            pool_src = np.empty(int(pool_len.sum()), dtype=np.int64)
            pool_src[shift[w_seg[w_in]] + w_in] = w_src[w_in]
            tail_segs = np.flatnonzero(used_tail)
            pool_src[(pool_off + w_count)[tail_segs]] = tail_rows + tail_segs
            frame_pool = _take(sources[self.frame_key], pool_src)
            frame_rows = torch.from_numpy(frame_rows)
            if self.pool_frames:
                # frames stay one copy each; clips point at their rows (see ClipBatch.frames)
                frames = TensorDict(
                    {self.frame_key: frame_pool}, batch_size=[frame_pool.shape[0]], device=self._device
                )
                clips.set(FRAME_ROW_KEY, frame_rows.to(device))
            else:
                clips.set(self.frame_key, _gather_rows(frame_pool, frame_rows))
        src_rows = torch.from_numpy(w_src[rows])
        for key, value in sources.items():
            if key == self.frame_key:
                continue
            if isinstance(value, Tensor):
                clips.set(key, _gather_rows(value, src_rows))
            else:
                clips.set(key, value[src_rows.reshape(-1).to(value.device)].reshape(*rows.shape))
        clips.set(MASK_KEY, torch.from_numpy(mask).to(device))
        clip_rows = torch.from_numpy(clip_rows)
        clip_index = torch.where(clip_rows >= 0, index_src[clip_rows.clamp(min=0).to(index_src.device)], -1)
        clips.set(CLIP_INDEX_KEY, clip_index.to(device))

        span = stride if self.spec.assign == "start" else max(clip_len, stride)
        tpos = starts[:, None] + np.arange(span)
        valid = tpos < clip_end[:, None]
        target_clip = np.broadcast_to(np.arange(num_clips)[:, None], tpos.shape)[valid]
        idx_device = index_src.device
        target_rows = torch.from_numpy(i_src[(i_first[:, None] + tpos)[valid]]).to(idx_device)
        return ClipBatch(
            clips, torch.from_numpy(target_clip).to(idx_device), index_src[target_rows],
            generation_src[target_rows], self.spec.reduce, frames,
        )
