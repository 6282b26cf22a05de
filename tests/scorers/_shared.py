"""The scorer contract and clip builders (``tests/scorer_contract.py``), importable from this package."""

from __future__ import annotations

try:
    from scorer_contract import ScorerContract, make_clips, mean_pixel_score
except ImportError:  # tests/ imported as a package
    from tests.scorer_contract import ScorerContract, make_clips, mean_pixel_score

__all__ = ["ScorerContract", "make_clips", "mean_pixel_score"]
