"""Frames of a clip as the scorer backends show them: real frames only, at most ``max_frames``,
as RGB NumPy arrays, optionally tiled into one image.

A leaf of the scorers package (it imports nothing from it) shared by the Hugging Face and the
OpenAI-compatible backends. The subsampling and tiling rules are the clip pipeline's own
(:mod:`vlmrb_torchrl._frames`): a clip the scoring transform already cut to ``frames`` frames
holds no more real frames than that, so a backend whose ``max_frames`` is at least
``ClipSpec.frames`` shows it as is, never re-subsampled.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from tensordict.utils import NestedKey

from vlmrb_torchrl._frames import evenly_spaced, tile_frames

__all__ = ["FrameInput", "clip_frame_indices", "clip_frames", "frames_to_numpy", "grid_image", "subsample"]


def frames_to_numpy(frames: torch.Tensor) -> np.ndarray:
    """uint8 ``[..., H, W, C]`` frames with C in (1, 3, 4) → contiguous RGB uint8 NumPy ``[..., H, W, 3]``."""
    if frames.dtype != torch.uint8 or frames.ndim < 3 or frames.shape[-1] not in (1, 3, 4):
        raise ValueError(
            f"frames must be uint8 [..., H, W, C] with C in (1, 3, 4), got dtype {frames.dtype} and shape "
            f"{tuple(frames.shape)}."
        )
    if frames.shape[-1] == 1:
        frames = frames.expand(*frames.shape[:-1], 3)
    elif frames.shape[-1] == 4:
        frames = frames[..., :3]
    return np.ascontiguousarray(frames.detach().cpu().numpy())


def subsample(n: int, max_frames: int | None) -> list[int]:
    """Evenly spaced indices of at most ``max_frames`` out of ``n`` (first and last kept).

    The rule of :meth:`vlmrb_torchrl.ClipSpec.frame_indices`; ``n <= max_frames`` keeps all.

    Examples:
        >>> subsample(8, 3), subsample(8, 1), subsample(3, 8)
        ([0, 4, 7], [7], [0, 1, 2])
    """
    return evenly_spaced(n, max_frames).tolist()


def grid_image(frames: np.ndarray) -> np.ndarray:
    """Tiles ``[T, H, W, 3]`` frames row-major into one ``[rows*H, cols*W, 3]`` image (black filler).

    The layout of the scoring transform's ``grid=True`` (:func:`vlmrb_torchrl._frames.tile_frames`).
    """
    return np.ascontiguousarray(tile_frames(frames))


def clip_frame_indices(clips, frame_key, mask_key: NestedKey = "mask", *, max_frames: int | None = None) -> list[np.ndarray]:
    """Per clip, the positions (along ``T``) of the frames :func:`clip_frames` shows: the real ones
    (``mask`` True; the last position for a fully padded clip), at most ``max_frames`` of them,
    evenly spaced (:func:`subsample`).

    Examples:
        >>> from tensordict import TensorDict
        >>> clips = TensorDict(pixels=torch.zeros(2, 5, 4, 4, 3, dtype=torch.uint8),
        ...                    mask=torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]).bool(), batch_size=[2, 5])
        >>> [i.tolist() for i in clip_frame_indices(clips, "pixels", max_frames=3)]
        [[0, 2, 4], [0, 1]]
    """
    frames = clips.get(frame_key)
    if frames.ndim != 5:
        raise ValueError(f"expected {frame_key!r} as uint8 frames [B, T, H, W, C], got shape {tuple(frames.shape)}.")
    batch, steps = frames.shape[:2]
    mask = clips.get(mask_key, None)
    whole = np.arange(steps)  # a clip without padding (most of them): its positions computed once
    if max_frames is not None and steps > max_frames:
        whole = whole[subsample(steps, max_frames)]
    if mask is None:
        return [whole] * batch
    mask = mask.to(torch.bool).cpu()
    padded = (~mask.all(1)).tolist()
    out = []
    for b in range(batch):
        if not padded[b]:
            out.append(whole)
            continue
        keep = torch.nonzero(mask[b]).flatten().numpy()
        if keep.size == 0:  # a fully padded clip: show its last frame
            keep = np.array([steps - 1])
        if max_frames is not None and keep.size > max_frames:
            keep = keep[subsample(keep.size, max_frames)]
        out.append(keep)
    return out


def clip_frames(clips, frame_key, mask_key: NestedKey = "mask", *, max_frames: int | None = None) -> list[np.ndarray]:
    """Per clip, its real frames (``mask`` True; at least one) as RGB uint8 ``[T_b, H, W, 3]``, at
    most ``max_frames`` of them, evenly spaced (:func:`subsample`; clips with at most
    ``max_frames`` real frames are shown whole). Their positions: :func:`clip_frame_indices`."""
    indices = clip_frame_indices(clips, frame_key, mask_key, max_frames=max_frames)
    array = frames_to_numpy(clips.get(frame_key))
    return [array[b, keep] for b, keep in enumerate(indices)]


@dataclasses.dataclass(frozen=True)
class FrameInput:
    """Which clip entries a frame-reading backend shows, and how many frames at most.

    Examples:
        >>> from tensordict import TensorDict
        >>> clips = TensorDict(pixels=torch.zeros(2, 5, 4, 4, 3, dtype=torch.uint8),
        ...                    mask=torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]).bool(), batch_size=[2, 5])
        >>> inputs = FrameInput(max_frames=3)
        >>> inputs.in_keys, [f.shape[0] for f in inputs.frames(clips)]
        (['pixels', 'mask'], [3, 2])
    """

    frame_key: NestedKey = "pixels"
    mask_key: NestedKey = "mask"
    max_frames: int | None = None

    @property
    def in_keys(self) -> list[NestedKey]:
        """``[frame_key, mask_key]``: what the backend reads."""
        return [self.frame_key, self.mask_key]

    def frames(self, clips) -> list[np.ndarray]:
        """Per clip, the real frames shown (see :func:`clip_frames`)."""
        return clip_frames(clips, self.frame_key, self.mask_key, max_frames=self.max_frames)

    def indices(self, clips) -> list[np.ndarray]:
        """Per clip, the positions of the frames shown (see :func:`clip_frame_indices`)."""
        return clip_frame_indices(clips, self.frame_key, self.mask_key, max_frames=self.max_frames)
