"""The scorer contract and clip builders of ``tests/test_scorers.py``, importable from this package."""

from __future__ import annotations

try:
    from test_scorers import ScorerContract, make_clips, mean_pixel_score
except ImportError:  # tests/ imported as a package
    from tests.test_scorers import ScorerContract, make_clips, mean_pixel_score

__all__ = ["ScorerContract", "make_clips", "mean_pixel_score"]
