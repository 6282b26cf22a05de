"""SoftValueCeiling: the soft Q-value the replayed rewards can back up, and the divergence report."""

from __future__ import annotations

import math

import pytest
import torch

from vlmrb_torchrl.recipes.value_ceiling import SoftValueCeiling


def test_ceiling_is_the_largest_soft_return():
    ceiling = SoftValueCeiling(gamma=0.9, max_entropy=2.0, tolerance=0.5)
    assert ceiling.ceiling(alpha=0.3) == math.inf  # no reward seen: nothing to bound by
    ceiling.observe(torch.tensor([[0.5], [2.0], [-4.0]]))
    assert (ceiling.reward_min, ceiling.reward_max) == (-4.0, 2.0)
    assert ceiling.ceiling(alpha=0.3) == pytest.approx((2.0 + 0.3 * 2.0) / 0.1)
    assert ceiling.margin() == pytest.approx(0.5 * 4.0 / 0.1)  # tolerance x the largest reward magnitude
    ceiling.observe(torch.tensor([float("nan"), float("inf"), 3.0]))  # non-finite rewards are left out
    assert (ceiling.reward_min, ceiling.reward_max) == (-4.0, 3.0)


def test_negative_rewards_keep_zero_allowed():
    # critics start near 0 and come down slowly to what rewards of -5 .. -1 give: that is not divergence
    ceiling = SoftValueCeiling(gamma=0.99, max_entropy=5 * math.log(2), patience=1)
    ceiling.observe(torch.tensor([-3.0, -1.0]))
    assert ceiling.ceiling(alpha=0.2) == pytest.approx(0.2 * 5 * math.log(2) / 0.01)
    assert ceiling.check(-11.0, alpha=0.2, env_steps=10_000) is None
    assert ceiling.check(410.6, alpha=0.224, env_steps=50_000) is not None  # Scene, VLM-RB without a ceiling


def test_reports_once_after_patience_checks_in_a_row():
    ceiling = SoftValueCeiling(gamma=0.5, max_entropy=0.0, tolerance=0.0, patience=3)
    ceiling.observe(torch.tensor([1.0]))  # ceiling 2, no margin
    values = [3.0, 3.0, 1.0, 3.0, float("nan"), 3.0, 3.0, 2.5, 3.0, 3.0]
    reports = [ceiling.check(q, alpha=1.0, env_steps=step) for step, q in enumerate(values)]
    # a value at or below the ceiling, or a NaN, restarts the count; the third in a row (step 7) reports
    assert [step for step, r in enumerate(reports) if r is not None] == [7]
    assert ceiling.exceeded_at == 7
    assert "above 2" in reports[7] and "max_oversampling=4" in reports[7] and "at 7 frames" in reports[7]


@pytest.mark.parametrize("kwargs, match", [({"gamma": 1.0}, "gamma"), ({"gamma": -0.1}, "gamma"),
                                           ({"gamma": 0.9, "patience": 0}, "patience"),
                                           ({"gamma": 0.9, "tolerance": -1.0}, "tolerance")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SoftValueCeiling(max_entropy=1.0, **kwargs)
