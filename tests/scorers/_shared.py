"""Helpers the scorer tests share (the contract itself is :mod:`vlmrb_torchrl.testing`)."""

from __future__ import annotations


def mean_pixel_score(clips):
    """Module-level score function for python: specs: the clips' mean pixel value in [0, 1]."""
    return clips["pixels"].float().mean(dim=(1, 2, 3, 4)) / 255


__all__ = ["mean_pixel_score"]
