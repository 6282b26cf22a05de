"""The per-trajectory ClipStream that the vectorised one replaced (kept as the tests' reference).

``LoopClipStream`` cuts clips one trajectory at a time in Python, as ``ClipStream`` did before it
was vectorised: the tests check that the vectorised stream returns the very same
:class:`ClipBatch` (clips, frame pool layout, targets, order) and keeps the same state.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch
from tensordict import TensorDict
from tensordict.utils import NestedKey
from torch import Tensor

from vlmrb_torchrl._keys import CLIP_INDEX_KEY, FRAME_ROW_KEY, MASK_KEY
from vlmrb_torchrl.scoring.clips import ClipBatch, ClipStream, _gather_rows


class _Trajectory:
    """Buffered state of one live trajectory.

    ``index``/``generation`` cover steps ``next_start .. length - 1`` (targets not yet emitted);
    ``data`` holds the frames (and extras) of the steps some pending clip still shows, at the
    trajectory steps listed in ``steps`` (sorted; contiguous unless ``stride > clip_len``).
    ``tail`` is the ``("next", frame)`` of step ``length - 1``, the outcome frame of a clip
    ending there if the trajectory is flushed before its next step arrives.
    """

    __slots__ = ("length", "next_start", "data", "steps", "index", "generation", "tail")

    def __init__(self) -> None:
        self.length = 0
        self.next_start = 0
        self.data: dict[NestedKey, Tensor] | None = None
        self.steps: Tensor | None = None
        self.index: Tensor | None = None
        self.generation: Tensor | None = None
        self.tail: Tensor | None = None


class _Piece(NamedTuple):
    # Clips emitted from one trajectory during one push/flush. Frames are gathered later, in
    # one pass over all pieces: clips duplicate each frame up to clip_len times, so that
    # gather is the costly copy and must happen once.
    data: dict
    num_rows: int
    rows: Tensor  # [count, L'] rows of ``data`` per clip position (the outcome position: the last real step)
    mask: Tensor
    clip_index: Tensor
    target_clip: Tensor
    index: Tensor
    generation: Tensor
    frame_rows: Tensor | None = None  # [count, L + 1] frame rows; row num_rows is ``tail``
    tail: Tensor | None = None  # the outcome frame past the buffered steps, when a clip shows it


class LoopClipStream(ClipStream):
    """ClipStream as it was: one ``_advance``/``_cut`` per trajectory segment."""

    def __init__(self, *args, **kwargs) -> None:
        self._trajs: dict[int, _Trajectory] = {}
        super().__init__(*args, **kwargs)

    @property
    def num_trajectories(self) -> int:
        """Number of live (started, not yet ended) trajectories buffered."""
        return len(self._trajs)

    @property
    def num_frames_held(self) -> int:
        """Number of steps (frames) currently buffered, summed over trajectories.

        Bounded by ``num_trajectories * spec.clip_len`` (``clip_len + 2`` with the outcome
        frame: one more step and the buffered ``("next", frame)`` of the last step).
        """
        return sum(
            (0 if t.steps is None else t.steps.numel()) + (t.tail is not None)
            for t in self._trajs.values()
        )

    def reset(self) -> None:
        """Drops all buffered state without emitting anything."""
        self._trajs.clear()
        self._features = None

    def push(self, batch, index, generation=None) -> ClipBatch | None:
        """ClipStream.push, one trajectory segment at a time."""
        num, data, traj, done, index, generation, next_frames = self._read_batch(
            batch, index, generation
        )
        traj_ids, group_of = torch.unique(traj, return_inverse=True)
        # Process trajectories in order of first appearance so output order follows the batch.
        positions = torch.arange(num, device=traj.device)
        first = torch.full(traj_ids.shape, num, dtype=torch.long, device=traj.device)
        first = first.scatter_reduce(0, group_of, positions, "amin")
        group_order = torch.argsort(first)
        rank = torch.empty_like(group_order)
        rank[group_order] = torch.arange(group_order.numel(), device=rank.device)
        step_rank = rank[group_of]
        perm = torch.argsort(step_rank, stable=True)
        permuted = not torch.equal(perm, positions)
        if permuted:
            data = {k: v[perm.to(v.device)] for k, v in data.items()}
            done = done[perm.to(done.device)]
            perm_i = perm.to(index.device)
            index, generation = index[perm_i], generation[perm_i]
        counts = torch.bincount(step_rank, minlength=group_order.numel()).tolist()
        ids = traj_ids[group_order].tolist()
        done_at = done.nonzero().squeeze(-1).tolist()

        pieces: list[_Piece] = []
        begin, d = 0, 0
        for tid, count in zip(ids, counts):
            end = begin + count
            # Split this trajectory's run at every done: a done ends the trajectory, and any
            # later step with the same id starts a new one.
            cuts = []
            while d < len(done_at) and done_at[d] < end:
                cuts.append(done_at[d] + 1)
                d += 1
            seg_begin = begin
            for seg_end in [*cuts, end]:
                if seg_end == seg_begin:
                    continue
                ended = seg_end in cuts
                traj_state = self._trajs.pop(tid, None) or _Trajectory()
                tail = None
                if next_frames is not None:  # ("next", frame) of the segment's last step
                    last = int(perm[seg_end - 1]) if permuted else seg_end - 1
                    tail = next_frames[last].clone()
                piece = self._advance(
                    traj_state,
                    {k: v[seg_begin:seg_end] for k, v in data.items()},
                    index[seg_begin:seg_end],
                    generation[seg_begin:seg_end],
                    ended=ended,
                    tail=tail,
                )
                if piece is not None:
                    pieces.append(piece)
                if not ended:
                    self._trajs[tid] = traj_state
                seg_begin = seg_end
            begin = end
        if not self._trajs:
            self._features = None
        self._device = batch.device
        return self._assemble(pieces)

    def flush(self) -> ClipBatch | None:
        """ClipStream.flush, one trajectory at a time."""
        pieces = []
        for traj_state in self._trajs.values():
            piece = self._advance(traj_state, None, None, None, ended=True, tail=traj_state.tail)
            if piece is not None:
                pieces.append(piece)
        self.reset()
        return self._assemble(pieces)

    # ------------------------------------------------------------------ internals

    def _advance(
        self,
        traj: _Trajectory,
        seg: dict | None,
        seg_index: Tensor | None,
        seg_generation: Tensor | None,
        *,
        ended: bool,
        tail: Tensor | None = None,
    ) -> _Piece | None:
        """Appends a run of steps to ``traj``, returns its newly complete clips, updates state.

        ``tail`` is the ``("next", frame)`` of the run's last step (of the trajectory's last
        step when flushing), the outcome frame of a clip ending at the trajectory's end.
        """
        clip_len, stride = self.spec.clip_len, self.spec.stride
        outcome = int(self.final_frame)
        # A clip is ready once its frames (L steps, plus the next step's frame: its outcome)
        # and its targets (stride block for "start", window or stride block for "cover_max")
        # have all arrived.
        window = max(clip_len + outcome, stride)
        first = traj.length
        if seg is None:
            length, work, work_steps = first, traj.data, traj.steps
            index, generation = traj.index, traj.generation
        else:
            length = first + seg_index.numel()
            device = seg_index.device if not seg else next(iter(seg.values())).device
            seg_steps = torch.arange(first, length, device=device)
            if stride > clip_len:
                # Steps between two windows are never shown: keep only their index/generation.
                shown = (seg_steps % stride) < clip_len + outcome
                if not bool(shown.all()):
                    seg = {k: v[shown] for k, v in seg.items()}
                    seg_steps = seg_steps[shown]
            if traj.data is None:
                work, work_steps = seg, seg_steps
                index, generation = seg_index, seg_generation
            else:
                work = {k: torch.cat([traj.data[k], seg[k]]) for k in seg}
                work_steps = torch.cat([traj.steps, seg_steps])
                index = torch.cat([traj.index, seg_index])
                generation = torch.cat([traj.generation, seg_generation])
        start0 = traj.next_start
        if ended:
            count = -(-(length - start0) // stride) if length > start0 else 0
        else:
            count = (length - window - start0) // stride + 1 if length - window >= start0 else 0

        piece = None
        if count and work is not None:
            piece = self._cut(work, work_steps, index, generation, start0, count, length, tail)
        if ended:
            return piece
        traj.tail = tail
        next_start = start0 + stride * count
        # Clone what is kept: slices would pin the whole batch (or concatenation) in memory.
        keep_from = int((work_steps < next_start).sum())
        traj.data = {k: v[keep_from:].clone() for k, v in work.items()}
        traj.steps = work_steps[keep_from:].clone()
        traj.index = index[next_start - start0 :].clone()
        traj.generation = generation[next_start - start0 :].clone()
        traj.next_start = next_start
        traj.length = length
        return piece

    def _cut(
        self,
        work: dict,
        work_steps: Tensor,
        index: Tensor,
        generation: Tensor,
        start0: int,
        count: int,
        length: int,
        tail: Tensor | None = None,
    ) -> _Piece:
        """Gathers ``count`` clips starting at ``start0, start0 + stride, ...``."""
        clip_len, stride = self.spec.clip_len, self.spec.stride
        device = work_steps.device
        starts = start0 + stride * torch.arange(count, device=device)
        pos = starts[:, None] + torch.arange(clip_len, device=device)
        mask = pos < length
        # Padding repeats the last real step; that step is always buffered (it lies inside
        # the clip's own window), so searchsorted finds exact rows.
        pos = pos.clamp(max=length - 1)
        rows = torch.searchsorted(work_steps, pos)
        idx_device = index.device
        clip_index = index[(pos - start0).to(idx_device)]
        clip_index = torch.where(mask.to(idx_device), clip_index, -1).to(device)

        frame_rows = used_tail = None
        if self.final_frame:
            # the outcome: the frame of the step after the last real one while that step is
            # buffered, else (trajectory end) the tail, appended as row work_steps.numel()
            after = (starts + clip_len).clamp(max=length)
            inside = after < length
            found = torch.searchsorted(work_steps, after.clamp(max=length - 1))
            outcome_rows = torch.where(inside, found, work_steps.numel())
            frame_rows = torch.cat([rows, outcome_rows[:, None]], 1)
            rows = torch.cat([rows, rows[:, -1:]], 1)  # per-step entries repeat the last real step
            mask = torch.cat([mask, mask.new_zeros(count, 1)], 1)
            clip_index = torch.cat([clip_index, clip_index.new_full((count, 1), -1)], 1)
            if not bool(inside.all()):
                if tail is None:  # push() always reads it: only reachable by misuse
                    raise RuntimeError("ClipStream: the outcome frame of a trajectory's end is missing.")
                used_tail = tail

        span = stride if self.spec.assign == "start" else max(clip_len, stride)
        starts_i = starts.to(idx_device)
        tpos = starts_i[:, None] + torch.arange(span, device=idx_device)
        valid = tpos < length
        target_clip = torch.arange(count, device=idx_device)[:, None].expand_as(tpos)[valid]
        offset = tpos[valid] - start0
        return _Piece(
            work, work_steps.numel(), rows, mask, clip_index, target_clip, index[offset],
            generation[offset], frame_rows, used_tail,
        )

    def _assemble(self, pieces: list[_Piece]) -> ClipBatch | None:
        if not pieces:
            return None
        num_clips = [p.mask.shape[0] for p in pieces]
        total = sum(num_clips)
        if len(pieces) == 1:
            source, rows = pieces[0].data, pieces[0].rows
        else:
            # Stack the (small) per-trajectory windows, then gather all clips at once.
            source = {k: torch.cat([p.data[k] for p in pieces]) for k in self._data_keys}
            num_rows = [p.num_rows for p in pieces[:-1]]
            row_offsets = itertools.accumulate(num_rows, initial=0)
            rows = torch.cat([p.rows + off for p, off in zip(pieces, row_offsets)])
        frame_pool = frame_rows = None
        if self.frame_key is not None:
            frame_pool, frame_rows = source[self.frame_key], rows
            if self.final_frame:
                frame_pool, frame_rows = self._outcome_frames(pieces, frame_pool)
            source = {k: v for k, v in source.items() if k != self.frame_key}
        flat_rows = rows.reshape(-1)
        clips = TensorDict(batch_size=[total, rows.shape[1]], device=self._device)
        frames = None
        if frame_pool is not None:
            if self.pool_frames:
                # frames stay one copy each; clips point at their rows (see ClipBatch.frames)
                frames = TensorDict(
                    {self.frame_key: frame_pool}, batch_size=[frame_pool.shape[0]], device=self._device
                )
                clips.set(FRAME_ROW_KEY, frame_rows)
            else:
                clips.set(self.frame_key, _gather_rows(frame_pool, frame_rows))
        for key, value in source.items():
            if isinstance(value, Tensor):
                clips.set(key, _gather_rows(value, rows))
            else:
                clips.set(key, value[flat_rows].reshape(*rows.shape))
        clips.set(MASK_KEY, torch.cat([p.mask for p in pieces]))
        clips.set(CLIP_INDEX_KEY, torch.cat([p.clip_index for p in pieces]))
        offsets = itertools.accumulate(num_clips[:-1], initial=0)
        return ClipBatch(
            clips,
            torch.cat([p.target_clip + off for p, off in zip(pieces, offsets)]),
            torch.cat([p.index for p in pieces]),
            torch.cat([p.generation for p in pieces]),
            self.spec.reduce,
            frames,
        )

    def _outcome_frames(self, pieces: list[_Piece], steps_pool: Tensor) -> tuple[Tensor, Tensor]:
        """The frame pool with each piece's tail (trajectory-end outcome) after its own rows,
        and the ``[B, L + 1]`` frame rows into it."""
        if len(pieces) == 1 and pieces[0].tail is None:
            return steps_pool, pieces[0].frame_rows
        parts, frame_rows, offset = [], [], 0
        for p in pieces:
            parts.append(p.data[self.frame_key])
            if p.tail is not None:
                parts.append(p.tail[None])
            frame_rows.append(p.frame_rows + offset)
            offset += p.num_rows + (p.tail is not None)
        return torch.cat(parts), torch.cat(frame_rows)
