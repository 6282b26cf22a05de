"""The contract every scorer meets, and the tiny clips it is checked on.

Shared by ``tests/test_scorers.py`` and the backend tests under ``tests/scorers/``: subclass
:class:`ScorerContract` and give it ``make_scorer()``; the test module (or its conftest) provides
a ``tiny_clips`` fixture returning :func:`make_clips`.
"""

from __future__ import annotations

import threading

import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl.scorers import Scorer

__all__ = ["B", "T", "ScorerContract", "make_clips", "mean_pixel_score"]

B, T = 5, 4


def make_clips(batch: int = B, steps: int = T, *, events=None, mask=None) -> TensorDict:
    """Tiny clips whose pixel values encode the clip index (clip b is filled with b * 10)."""
    pixels = (torch.arange(batch, dtype=torch.uint8) * 10).view(batch, 1, 1, 1, 1).expand(batch, steps, 6, 6, 3)
    if events is None:
        events = torch.zeros(batch, steps, dtype=torch.bool)
        events[::2, -1] = True
    if mask is None:
        mask = torch.ones(batch, steps, dtype=torch.bool)
    return TensorDict(
        {
            "pixels": pixels.contiguous(),
            "mask": mask,
            ("next", "progress_event"): events.unsqueeze(-1),
            "success": events,
        },
        batch_size=[batch, steps],
    )


def mean_pixel_score(clips):
    """Module-level score function for python: specs."""
    return clips["pixels"].float().mean(dim=(1, 2, 3, 4)) / 255


class ScorerContract:
    """Behaviour every scorer must have; subclasses provide make_scorer()."""

    def make_scorer(self) -> Scorer:
        raise NotImplementedError

    def test_is_scorer(self):
        scorer = self.make_scorer()
        assert isinstance(scorer, Scorer)
        assert isinstance(scorer.prompt, str)
        assert isinstance(scorer.in_keys, list) and scorer.in_keys
        assert isinstance(scorer.provenance, dict)
        assert "backend" in scorer.provenance and "prompt_hash" in scorer.provenance

    def test_scores_shape_dtype_range(self, tiny_clips):
        s = self.make_scorer().score(tiny_clips)
        assert s.shape == tiny_clips.shape[:1] and s.dtype == torch.float32
        assert ((s >= 0) & (s <= 1)).all()

    def test_missing_key_raises(self, tiny_clips):
        scorer = self.make_scorer()
        key = scorer.in_keys[0]
        with pytest.raises(KeyError, match="needs"):
            scorer.score(tiny_clips.exclude(key))

    def test_flat_clips_rejected(self, tiny_clips):
        with pytest.raises(ValueError, match=r"batch size \[B, T\]"):
            self.make_scorer().score(tiny_clips.reshape(-1))

    def test_threads(self, tiny_clips):
        scorer = self.make_scorer()
        results, errors = [], []

        def work():
            try:
                for _ in range(20):
                    results.append(scorer.score(tiny_clips))
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(err)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(results) == 80 and all(r.shape == (B,) for r in results)
