"""The contract every scorer meets, as a pytest base class: check your own scorer against it.

.. code-block:: python

    # test_my_scorer.py
    from vlmrb_torchrl.testing import ScorerContract

    class TestMyScorer(ScorerContract):
        def make_scorer(self):
            return MyScorer()

pytest then runs every ``test_*`` method of :class:`ScorerContract` on ``MyScorer``: the
:class:`~vlmrb_torchrl.scorers.Scorer` protocol, score shape, dtype and range, clear errors on
a missing entry or flat clips, calls from several threads at once, and ``stats()`` (optional)
returning numbers. The clips it uses come from :func:`make_clips` (override the ``tiny_clips``
fixture for a scorer that reads other entries). Needs pytest (``pip install 'vlmrb-torchrl[dev]'``).
"""

from __future__ import annotations

import threading

import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl.scorers import Scorer, scorer_stats

__all__ = ["B", "T", "ScorerContract", "make_clips"]

#: the clips :func:`make_clips` builds by default: ``B`` clips of ``T`` steps
B, T = 5, 4


def make_clips(batch: int = B, steps: int = T, *, events=None, mask=None) -> TensorDict:
    """Tiny clips: 6x6 RGB ``"pixels"`` (clip ``b`` is filled with ``b * 10``), ``"mask"``, and event
    flags (``("next", "progress_event")``, ``"success"``: by default every other clip's last step).

    Examples:
        >>> clips = make_clips(3, 2)
        >>> clips.batch_size, clips["pixels"][:, 0, 0, 0, 0].tolist()
        (torch.Size([3, 2]), [0, 10, 20])
    """
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


class ScorerContract:
    """Behaviour every scorer must have; a subclass provides :meth:`make_scorer`."""

    def make_scorer(self) -> Scorer:
        raise NotImplementedError

    @pytest.fixture
    def tiny_clips(self) -> TensorDict:
        """The clips the contract scores (:func:`make_clips`); override for other entries."""
        return make_clips()

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

    def test_stats_are_numbers(self, tiny_clips):
        scorer = self.make_scorer()
        scorer.score(tiny_clips)
        stats = getattr(scorer, "stats", None)
        if stats is None:
            return  # optional
        raw = stats()
        assert isinstance(raw, dict) and all(isinstance(k, str) for k in raw)
        assert set(scorer_stats(scorer)) == {k for k, v in raw.items() if isinstance(v, (int, float))}

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
        assert len(results) == 80 and all(r.shape == tiny_clips.shape[:1] for r in results)
