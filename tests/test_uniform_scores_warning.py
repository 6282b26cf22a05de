"""The sampler says once when its first scores make replay uniform (issue 63: a continuous custom scorer
under the default threshold 0.5 silently gave uniform replay)."""

from __future__ import annotations

import warnings

import pytest
import torch

from vlmrb_torchrl.replay.sampler import SCORE_CHECK_AFTER, UniformScoresWarning, VLMPrioritizedSampler


def feed(sampler, scores, chunks=4):
    n = len(scores)
    sampler.mark_update(torch.arange(n))
    for part in torch.arange(n).chunk(chunks):
        sampler.update_scores(part, scores[part])


def caught(threshold, scores):
    sampler = VLMPrioritizedSampler(len(scores), threshold=threshold)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        feed(sampler, scores)
        feed(sampler, scores)  # more scores later: never a second warning
    return [str(w.message) for w in seen if issubclass(w.category, UniformScoresWarning)]


def test_continuous_scores_all_below_the_threshold_warn_once_with_what_was_seen():
    scores = torch.full((SCORE_CHECK_AFTER,), 0.09)
    scores[0] = 0.12
    (message,) = caught(0.5, scores)
    assert f"none of the first {SCORE_CHECK_AFTER} scores is above threshold=0.5" in message
    assert "min 0.09, mean 0.09, max 0.12" in message and "priority eps=0.01" in message
    assert "replay is uniform" in message and "threshold=None" in message


def test_every_score_above_the_threshold_warns():
    (message,) = caught(0.5, torch.full((SCORE_CHECK_AFTER,), 0.9))
    assert "all of the first 1000 scores are above threshold=0.5" in message


def test_equal_raw_scores_warn_without_a_threshold():
    (message,) = caught(None, torch.full((SCORE_CHECK_AFTER,), 0.3))
    assert "are equal" in message and "threshold=None" in message


@pytest.mark.parametrize("threshold, scores", [
    (0.5, torch.zeros(SCORE_CHECK_AFTER)),  # binary and all 0: a sparse task before its first success
    (0.5, torch.linspace(0, 1, SCORE_CHECK_AFTER)),  # both sides of the threshold
    (None, torch.linspace(0, 1, SCORE_CHECK_AFTER)),
    (0.05, torch.full((SCORE_CHECK_AFTER,), 0.09).index_fill_(0, torch.tensor([3]), 0.01)),
])
def test_scores_that_rank_transitions_do_not_warn(threshold, scores):
    assert caught(threshold, scores) == []


def test_nothing_is_said_before_enough_scores_arrived():
    assert caught(0.5, torch.full((SCORE_CHECK_AFTER // 2 - 1,), 0.09)) == []
