"""The two frame rules every clip consumer shares: which frames of a clip are shown, and how
several frames are tiled into one image.

Which frames a clip of ``L`` steps has: the frame *before* each step (positions ``0 .. L - 1``)
and, with the outcome frame on (:attr:`vlmrb_torchrl.ClipSpec.final_frame`, the default), the
frame *after* its last real step (position ``L``: the ``("next", <frame key>)`` frame of that
step), so ``L + 1`` frames in all. Events live in ``("next", ...)``: without the outcome frame,
what the last step did (reaching the goal, say) never appears in the clip. When fewer frames
are sent (``ClipSpec.frames=F``), they are :func:`evenly_spaced` over all of the clip's frames,
``evenly_spaced(L + 1, F)``, which always keeps the first frame and the last one, the outcome.
Each step's per-step flags (events) are then carried by one kept position, a *real* one
(:func:`step_owners`), so subsampling never hides an event of a real step.

A leaf module (it imports nothing from the package): :class:`~vlmrb_torchrl.ClipSpec`, the
scoring transform and the scorer backends all read these rules from here, so a clip the
transform has subsampled is never subsampled again by a scorer with another rounding.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = ["evenly_spaced", "grid_shape", "step_owners", "tile_frames"]


def evenly_spaced(length: int, num: int | None) -> Tensor:
    """Positions of ``num`` frames evenly spread over ``length`` frames (first and last kept).

    All positions when ``num`` is ``None`` or ``num >= length``. One frame (``num=1``) is the
    *last* position, because the end of a clip is what shows whether progress was made.
    Otherwise ``torch.linspace(0, length - 1, num)`` rounded half to even (in float64, so
    long clips do not depend on float32 error): strictly increasing, ``0`` first and
    ``length - 1`` last.

    Args:
        length (int): number of frames to choose from, ``>= 1``.
        num (int or None): number of frames to keep, ``>= 1``.

    Returns:
        an int64 tensor of ``min(num, length)`` positions.

    Examples:
        >>> evenly_spaced(8, 3).tolist(), evenly_spaced(8, 1).tolist(), evenly_spaced(3, 5).tolist()
        ([0, 4, 7], [7], [0, 1, 2])
        >>> evenly_spaced(32, 8).tolist()
        [0, 4, 9, 13, 18, 22, 27, 31]
    """
    if num is None or num >= length:
        return torch.arange(length)
    if num == 1:
        return torch.tensor([length - 1])
    return torch.linspace(0, length - 1, num, dtype=torch.float64).round().long()


def step_owners(positions: Tensor, real_steps: Tensor, real_positions: Tensor) -> Tensor:
    """Which kept position stands for each step of each clip, when ``F`` of its frames are kept.

    A real step belongs to the first kept position at or after it that is real, else (no real
    kept position follows it) to the last real kept position. On clips without padding this is
    the segment rule "a kept position stands for the steps after the previous kept position, up
    to its own". On a padded tail clip a kept position can fall on padding while the steps it
    covers are real: they go to the next real kept position (the outcome, when the clip shows
    it) or back to the last real one, so their events are not hidden by the padding mask.
    Padded steps belong to no position (``F``, one past the last).

    Args:
        positions (Tensor): ``[F]`` strictly increasing kept positions (:func:`evenly_spaced`);
            a position ``>= S`` (the outcome frame, no step of its own) covers up to step
            ``S - 1``.
        real_steps (Tensor): ``[B, S]`` bool, ``True`` on real steps.
        real_positions (Tensor): ``[B, F]`` bool, ``True`` where the kept position is real.

    Returns:
        an int64 ``[B, S]`` tensor of kept-position indices in ``0 .. F`` (``F``: none).

    Examples:
        >>> positions = torch.tensor([0, 2, 4])  # 3 of 5 steps kept
        >>> real = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]).bool()
        >>> step_owners(positions, real, real[:, positions]).tolist()  # step 3 of row 1 -> 1
        [[0, 1, 1, 2, 2], [0, 1, 1, 1, 3], [0, 0, 3, 3, 3]]
        >>> outcome = torch.tensor([0, 2, 5])  # 3 of 5 steps + the outcome frame (position 5)
        >>> step_owners(outcome, real, torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 1]]).bool()).tolist()
        [[0, 1, 1, 2, 2], [0, 1, 1, 2, 3], [0, 2, 3, 3, 3]]
    """
    num, steps = positions.numel(), real_steps.shape[1]
    positions = positions.to(real_steps.device)
    ends = positions.clamp(max=steps - 1)  # the outcome position is no step
    at_or_after = ends[None, None, :] >= torch.arange(steps, device=ends.device)[None, :, None]
    candidates = at_or_after & real_positions[:, None, :]  # [B, S, F]
    first = candidates.long().argmax(-1)  # the first True (0 when none: replaced below)
    last_real = torch.where(real_positions.any(-1), num - 1 - real_positions.flip(-1).long().argmax(-1), num)
    owner = torch.where(candidates.any(-1), first, last_real[:, None])
    return torch.where(real_steps, owner, torch.full_like(owner, num))


def grid_shape(num: int) -> tuple[int, int]:
    """``(rows, cols)`` of the near-square grid holding ``num`` tiles: ``rows = ceil(sqrt(num))``.

    Examples:
        >>> grid_shape(1), grid_shape(4), grid_shape(5), grid_shape(8)
        ((1, 1), (2, 2), (3, 2), (3, 3))
    """
    rows = math.ceil(math.sqrt(num))
    return rows, math.ceil(num / rows)


def tile_frames(frames: Tensor | np.ndarray) -> Tensor | np.ndarray:
    """Tiles ``[..., T, H, W, C]`` frames row-major into one ``[..., rows*H, cols*W, C]`` image.

    Cells past the last frame are black (zeros). See :func:`grid_shape` for the grid. Takes a
    tensor (the scoring transform) or a NumPy array (the scorer backends) and returns the same
    kind, so both sides tile with this one function.

    Examples:
        >>> frames = torch.arange(1, 4, dtype=torch.uint8).view(3, 1, 1, 1)  # 3 one-pixel frames
        >>> tile_frames(frames)[..., 0].tolist()
        [[1, 2], [3, 0]]
        >>> tile_frames(frames.numpy())[..., 0].tolist()
        [[1, 2], [3, 0]]
    """
    *lead, t, h, w, c = frames.shape
    rows, cols = grid_shape(t)
    shape = (*lead, rows * cols, h, w, c)
    numpy = isinstance(frames, np.ndarray)
    canvas = np.zeros(shape, dtype=frames.dtype) if numpy else frames.new_zeros(shape)
    canvas[..., :t, :, :, :] = frames
    canvas = canvas.reshape(*lead, rows, cols, h, w, c)
    n = len(lead)
    axes = (*range(n), n, n + 2, n + 1, n + 3, n + 4)  # rows, H, cols, W: row-major tiles
    canvas = canvas.transpose(axes) if numpy else canvas.permute(*axes)
    return canvas.reshape(*lead, rows * h, cols * w, c)
