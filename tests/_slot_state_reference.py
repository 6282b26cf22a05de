"""SlotState's statistics as they were before issue 38: scans over every slot (the tests' reference).

The sampler's statistics (logged with every metrics row) now read the slots below the highest
filled one only; the tests check that they return the very same values as these scans.
"""

from __future__ import annotations

import numpy as np

from vlmrb_torchrl.replay._slot_state import SlotState


def score_summary(state: SlotState) -> tuple[float, float]:
    scores = state.score[state.scored & state.filled]
    if not scores.size:
        return float("nan"), float("nan")
    return float(scores.mean()), float((scores > state.config.cut).mean())


def max_leaf_scan(state: SlotState, p_bar: float) -> float:
    """``max_leaf`` without the max trees: the scan over every slot."""
    p, g, is_scored, is_unscored = state.leaves(slice(None))
    v = np.where(is_scored, p * g, np.where(is_unscored, p_bar * g, 0.0))
    return float(v.max()) if v.size else 0.0
