"""The contract every scorer meets, and the tiny clips it is checked on.

The contract itself ships with the package (:mod:`vlmrb_torchrl.testing`), so scorers written
outside it are checked the same way. Shared by ``tests/test_scorers.py`` and the backend tests under
``tests/scorers/``: subclass :class:`ScorerContract` and give it ``make_scorer()``; the test module
(or its conftest) provides a ``tiny_clips`` fixture returning :func:`make_clips`.
"""

from __future__ import annotations

from vlmrb_torchrl.testing import B, T, ScorerContract, make_clips

__all__ = ["B", "T", "ScorerContract", "make_clips", "mean_pixel_score"]


def mean_pixel_score(clips):
    """Module-level score function for python: specs."""
    return clips["pixels"].float().mean(dim=(1, 2, 3, 4)) / 255
