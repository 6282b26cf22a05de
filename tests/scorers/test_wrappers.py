"""CachedScorer and ThresholdScorer (NoisyScorer is covered in test_base.py)."""

from __future__ import annotations

import pickle
import threading

import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl.scorers import CachedScorer, CallableScorer, OracleScorer, ThresholdScorer, prompt_hash

from vlmrb_torchrl.testing import ScorerContract, make_clips
from ._shared import mean_pixel_score


class CountingScorer:
    """Mean pixel brightness; records the batch size of every call."""

    def __init__(self, prompt: str = "bright?"):
        self.prompt = prompt
        self.in_keys = ["pixels"]
        self.provenance = {"backend": "counting", "prompt_hash": prompt_hash(prompt)}
        self.calls: list[int] = []
        self._lock = threading.Lock()

    def score(self, clips):
        with self._lock:
            self.calls.append(clips.batch_size[0])
        return mean_pixel_score(clips)


class TestCachedScorerContract(ScorerContract):
    def make_scorer(self):
        return CachedScorer(CallableScorer(mean_pixel_score, prompt="bright?"))


class TestThresholdScorerContract(ScorerContract):
    def make_scorer(self):
        return ThresholdScorer(OracleScorer())


class TestCachedScorer:
    def test_hits_and_misses(self):
        inner = CountingScorer()
        cached = CachedScorer(inner)
        clips = make_clips(5, 4)
        first = cached.score(clips)
        assert torch.equal(first, mean_pixel_score(clips))
        assert inner.calls == [5] and (cached.hits, cached.misses) == (0, 5) and len(cached) == 5
        assert torch.equal(cached.score(clips), first)
        assert inner.calls == [5] and (cached.hits, cached.misses) == (5, 5)
        # a batch mixing cached and new clips sends only the new ones
        mixed = torch.cat([clips[:2], make_clips(8, 4)[5:]], 0)
        out = cached.score(mixed)
        assert inner.calls == [5, 3]
        torch.testing.assert_close(out, mean_pixel_score(mixed))

    def test_duplicates_in_a_batch_are_scored_once(self):
        inner = CountingScorer()
        clips = make_clips(3, 2)
        batch = torch.cat([clips, clips, clips[:1]], 0)
        out = CachedScorer(inner).score(batch)
        assert inner.calls == [3]
        torch.testing.assert_close(out, mean_pixel_score(batch))

    def test_key_covers_frames_mask_and_prompt(self):
        cached = CachedScorer(CountingScorer())
        clips = make_clips(1, 4)
        base = cached.clip_keys(clips)[0]
        assert cached.clip_keys(clips.clone())[0] == base
        other_pixels = clips.clone()
        other_pixels["pixels"][0, 3, 0, 0, 0] += 1
        other_mask = clips.clone()
        other_mask["mask"][0, 3] = False
        assert cached.clip_keys(other_pixels)[0] != base
        assert cached.clip_keys(other_mask)[0] != base
        assert CachedScorer(CountingScorer(prompt="other")).clip_keys(clips)[0] != base
        # entries the scorer does not read do not split the cache
        other_events = clips.clone()
        other_events["success"][0] = ~other_events["success"][0]
        assert cached.clip_keys(other_events)[0] == base

    def test_lru_eviction(self):
        inner = CountingScorer()
        cached = CachedScorer(inner, max_size=3)
        clips = make_clips(5, 1)
        cached.score(clips[:3])  # table: 0 1 2
        cached.score(clips[0:1])  # 0 becomes most recent: 1 2 0
        cached.score(clips[3:4])  # evicts 1: 2 0 3
        assert len(cached) == 3
        inner.calls.clear()
        cached.score(clips[[0, 2, 3]])
        assert inner.calls == []
        cached.score(clips[1:2])
        assert inner.calls == [1]
        cached.clear()
        assert len(cached) == 0 and cached.hits == cached.misses == 0

    def test_threads(self):
        inner = CountingScorer()
        cached = CachedScorer(inner)
        clips = make_clips(16, 2)
        want = mean_pixel_score(clips)
        errors = []

        def work(seed):
            g = torch.Generator().manual_seed(seed)
            try:
                for _ in range(25):
                    index = torch.randint(0, 16, (6,), generator=g)
                    torch.testing.assert_close(cached.score(clips[index]), want[index])
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(err)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(cached) == 16
        assert cached.hits + cached.misses == 4 * 25 * 6

    def test_pickle_keeps_the_table(self):
        cached = CachedScorer(CallableScorer(mean_pixel_score, prompt="bright?"))
        clips = make_clips(4, 2)
        cached.score(clips)
        clone = pickle.loads(pickle.dumps(cached))
        assert len(clone) == 4 and clone.misses == 4
        assert torch.equal(clone.score(clips), cached.score(clips)) and clone.hits == 4

    def test_provenance_and_attributes(self):
        inner = CountingScorer()
        cached = CachedScorer(inner, max_size=10)
        assert cached.provenance == {
            "backend": "cached",
            "max_size": 10,
            "prompt_hash": prompt_hash("bright?"),
            "wrapped": inner.provenance,
        }
        assert cached.prompt == "bright?" and cached.in_keys == ["pixels"]
        assert repr(cached).startswith("CachedScorer(") and "max_size=10" in repr(cached)

    @pytest.mark.parametrize(
        "scorer, kwargs, error, match",
        [
            (mean_pixel_score, {}, TypeError, "CachedScorer wraps a Scorer"),
            (OracleScorer(), {"max_size": 0}, ValueError, "max_size must be an int >= 1, got max_size=0"),
            (OracleScorer(), {"max_size": 1.5}, ValueError, "max_size must be an int >= 1"),
        ],
    )
    def test_construction_errors(self, scorer, kwargs, error, match):
        with pytest.raises(error, match=match):
            CachedScorer(scorer, **kwargs)

    def test_bad_inner_scores_are_not_cached(self):
        bad = CallableScorer(lambda c: torch.full((c.batch_size[0],), 2.0), name="bad_fn")
        cached = CachedScorer(bad)
        with pytest.raises(ValueError, match="bad_fn returned scores outside"):
            cached.score(make_clips(2, 1))
        assert len(cached) == 0


class TestThresholdScorer:
    def test_strictly_above(self):
        inner = CallableScorer(lambda c: torch.tensor([0.0, 0.3, 0.5, 0.50001, 1.0]), in_keys=["mask"])
        clips = TensorDict(mask=torch.ones(5, 1, dtype=torch.bool), batch_size=[5, 1])
        assert ThresholdScorer(inner).score(clips).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
        assert ThresholdScorer(inner, threshold=0.0).score(clips).tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]

    def test_provenance(self):
        inner = OracleScorer(prompt="p")
        scorer = ThresholdScorer(inner, threshold=0.25)
        assert scorer.provenance == {
            "backend": "threshold",
            "threshold": 0.25,
            "prompt_hash": prompt_hash("p"),
            "wrapped": inner.provenance,
        }
        assert scorer.prompt == "p" and scorer.in_keys == inner.in_keys

    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"threshold": 1.0}, ValueError, r"threshold must be in \[0, 1\), got threshold=1.0"),
            ({"threshold": -0.1}, ValueError, r"threshold must be in \[0, 1\)"),
            ({"threshold": "0.5"}, TypeError, "threshold must be a float"),
        ],
    )
    def test_construction_errors(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            ThresholdScorer(OracleScorer(), **kwargs)

    def test_wraps_only_scorers(self):
        with pytest.raises(TypeError, match="ThresholdScorer wraps a Scorer"):
            ThresholdScorer(mean_pixel_score)

    def test_composes_with_cache(self):
        inner = CountingScorer()
        scorer = ThresholdScorer(CachedScorer(inner), threshold=0.1)
        clips = make_clips(5, 2)  # brightness b * 10 / 255: 0, .04, .08, .12, .16
        assert scorer.score(clips).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
        assert scorer.score(clips).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
        assert inner.calls == [5]
