"""The two frame rules every clip consumer shares: which frames of a clip are shown, and how
several frames are tiled into one image.

Which frames a clip of ``L`` steps has: the frame *before* each step (positions ``0 .. L - 1``)
and, with the outcome frame on (:attr:`vlmrb_torchrl.ClipSpec.final_frame`, the default), the
frame *after* its last real step (position ``L``: the ``("next", <frame key>)`` frame of that
step), so ``L + 1`` frames in all. Events live in ``("next", ...)``: without the outcome frame,
what the last step did (reaching the goal, say) never appears in the clip. When fewer frames
are sent (``ClipSpec.frames=F``), they are :func:`evenly_spaced` over all of the clip's frames,
``evenly_spaced(L + 1, F)``, which always keeps the first frame and the last one, the outcome.

A leaf module (it imports nothing from the package): :class:`~vlmrb_torchrl.ClipSpec`, the
scoring transform and the scorer backends all read these rules from here, so a clip the
transform has subsampled is never subsampled again by a scorer with another rounding.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = ["evenly_spaced", "grid_shape", "tile_frames"]


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
