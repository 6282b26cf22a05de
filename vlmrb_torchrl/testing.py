"""The scorer contract: the checks every scorer of the package passes, for the scorers you write.

:func:`check_scorer` runs them on one scorer and raises an ``AssertionError`` naming the rule
that failed; :class:`ScorerContract` runs them as pytest tests (subclass it and give it
``make_scorer()``); :func:`make_clips` builds the tiny clips they use. See
``docs/custom_scorers.md``.
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from vlmrb_torchrl.scorers import Scorer, scorer_stats

__all__ = ["B", "T", "make_clips", "check_scorer", "ScorerContract"]

#: clips and steps of the default :func:`make_clips`.
B, T = 5, 4


def make_clips(batch: int = B, steps: int = T, *, events: torch.Tensor | None = None,
               mask: torch.Tensor | None = None, size: int = 6) -> TensorDict:
    """Tiny clips ``[batch, steps]``: ``"pixels"`` (clip ``b`` filled with ``10 * b``), ``"mask"``,
    ``("next", "progress_event")`` and ``"success"`` (an event on the last step of every other clip).

    Examples:
        >>> clips = make_clips()
        >>> clips.batch_size, clips["pixels"].shape, clips["pixels"][1].unique().tolist()
        (torch.Size([5, 4]), torch.Size([5, 4, 6, 6, 3]), [10])
    """
    pixels = (torch.arange(batch, dtype=torch.uint8) * 10).view(batch, 1, 1, 1, 1).expand(batch, steps, size, size, 3)
    if events is None:
        events = torch.zeros(batch, steps, dtype=torch.bool)
        events[::2, -1] = True
    if mask is None:
        mask = torch.ones(batch, steps, dtype=torch.bool)
    return TensorDict(
        {"pixels": pixels.contiguous(), "mask": mask, ("next", "progress_event"): events.unsqueeze(-1),
         "success": events},
        batch_size=[batch, steps],
    )


def _fail(rule: str, scorer: Any, detail: str = "") -> AssertionError:
    return AssertionError(f"{type(scorer).__name__} breaks the scorer contract: {rule}" + (f" ({detail})" if detail else ""))


def check_scorer(scorer: Any, clips: TensorDictBase | None = None, *, threads: int = 4, calls: int = 5,
                 picklable: bool = False) -> torch.Tensor:
    """Checks ``scorer`` against the contract of :class:`~vlmrb_torchrl.scorers.Scorer`; returns its scores
    of ``clips``.

    The rules: it is a :class:`~vlmrb_torchrl.scorers.Scorer` (``score``, a ``str`` ``prompt``, a non-empty
    list ``in_keys``, a ``provenance`` dict with ``"backend"`` and ``"prompt_hash"``); ``score(clips)`` is
    float32 ``[B]`` in ``[0, 1]``; clips without its first ``in_keys`` entry raise a ``KeyError`` and flat
    ``[B * T]`` clips a ``ValueError`` (what :func:`~vlmrb_torchrl.scorers.check_clips` raises); ``threads``
    threads calling ``score`` at once (what the ``"thread"`` backend and the learner may do) all succeed;
    with ``picklable=True``, a pickled copy scores the clips too (the ``"process"`` and ``"ray"`` backends
    send the scorer to other processes).

    Args:
        scorer: the scorer to check.
        clips (TensorDictBase, optional): ``[B, T]`` clips holding what it reads. Defaults to
            :func:`make_clips` (``"pixels"``, ``"mask"``, ``("next", "progress_event")``, ``"success"``).

    Keyword Args:
        threads (int): threads scoring at once. Defaults to 4.
        calls (int): calls per thread. Defaults to 5.
        picklable (bool): also check a pickle round trip. Defaults to ``False``.

    Raises:
        AssertionError: naming the rule the scorer breaks.

    Examples:
        >>> import torch
        >>> from vlmrb_torchrl.scorers import CallableScorer, make_scorer
        >>> def brightness(clips):
        ...     return clips["pixels"].float().mean(dim=(1, 2, 3, 4)) / 255
        >>> check_scorer(CallableScorer(brightness))
        tensor([0.0000, 0.0392, 0.0784, 0.1176, 0.1569])
        >>> check_scorer(make_scorer("oracle:minigrid"), picklable=True)  # events on clips 0, 2, 4
        tensor([1., 0., 1., 0., 1.])
        >>> check_scorer(CallableScorer(lambda clips: torch.ones(clips.shape[0])), picklable=True)
        Traceback (most recent call last):
        ...
        AssertionError: CallableScorer breaks the scorer contract: a pickled copy must score the clips ...
    """
    clips = make_clips() if clips is None else clips
    if not isinstance(scorer, Scorer):
        raise _fail("it needs score(clips), prompt, in_keys and provenance", scorer)
    if not isinstance(scorer.prompt, str):
        raise _fail("prompt must be a str", scorer, f"got {type(scorer.prompt).__name__}")
    if not isinstance(scorer.in_keys, list) or not scorer.in_keys:
        raise _fail("in_keys must be a non-empty list of the clip entries it reads", scorer, f"got {scorer.in_keys!r}")
    if not isinstance(scorer.provenance, dict) or not {"backend", "prompt_hash"} <= set(scorer.provenance):
        raise _fail("provenance must be a dict with 'backend' and 'prompt_hash'", scorer, f"got {scorer.provenance!r}")
    scores = scorer.score(clips)
    if not isinstance(scores, torch.Tensor) or scores.shape != clips.shape[:1] or scores.dtype != torch.float32:
        raise _fail(f"score(clips) must return float32 [B] = {list(clips.shape[:1])}", scorer,
                    f"got {type(scores).__name__} {getattr(scores, 'dtype', '')} {list(getattr(scores, 'shape', []))}")
    if not bool(((scores >= 0) & (scores <= 1)).all()):
        raise _fail("scores must lie in [0, 1]", scorer, f"got {scores.tolist()}")
    key = scorer.in_keys[0]
    try:
        scorer.score(clips.exclude(key))
    except KeyError:
        pass
    else:
        raise _fail(f"clips without {key!r} (its in_keys[0]) must raise a KeyError (use check_clips)", scorer)
    try:
        scorer.score(clips.reshape(-1))
    except ValueError:
        pass
    else:
        raise _fail("flat [B * T] clips must raise a ValueError (use check_clips)", scorer)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(calls):
                out = scorer.score(clips)
                if out.shape != scores.shape:
                    raise AssertionError(f"a concurrent call returned shape {list(out.shape)}")
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise _fail(f"score must be safe to call from {threads} threads at once", scorer, repr(errors[0])) from errors[0]
    if picklable:
        try:
            copy = pickle.loads(pickle.dumps(scorer))
        except Exception as err:  # noqa: BLE001 - reported with the rule
            raise _fail("a pickled copy must score the clips (backend='process' or 'ray')", scorer, repr(err)) from err
        again = copy.score(clips)
        if again.shape != scores.shape:
            raise _fail("a pickled copy must score the clips (backend='process' or 'ray')", scorer,
                        f"shape {list(again.shape)}")
    return scores


class ScorerContract:
    """The contract as pytest tests: subclass it (``class TestMyScorer(ScorerContract)``) and define
    ``make_scorer()``; set ``picklable = True`` to test the pickle round trip too, and override the
    ``tiny_clips`` fixture for a scorer that reads other entries than :func:`make_clips` has.

    Examples:
        >>> issubclass(ScorerContract, object), ScorerContract.picklable
        (True, False)
    """

    #: also check a pickle round trip (the ``"process"`` and ``"ray"`` backends).
    picklable = False

    def make_scorer(self) -> Scorer:
        raise NotImplementedError

    def _clips(self, request) -> TensorDictBase:
        try:
            return request.getfixturevalue("tiny_clips")
        except Exception:  # noqa: BLE001 - pytest's FixtureLookupError: no such fixture
            return make_clips()

    def test_is_scorer(self):
        scorer = self.make_scorer()
        assert isinstance(scorer, Scorer)
        assert isinstance(scorer.prompt, str)
        assert isinstance(scorer.in_keys, list) and scorer.in_keys
        assert isinstance(scorer.provenance, dict)
        assert "backend" in scorer.provenance and "prompt_hash" in scorer.provenance

    def test_scores_shape_dtype_range(self, request):
        clips = self._clips(request)
        s = self.make_scorer().score(clips)
        assert s.shape == clips.shape[:1] and s.dtype == torch.float32
        assert ((s >= 0) & (s <= 1)).all()

    def test_missing_key_raises(self, request):
        import pytest

        scorer = self.make_scorer()
        with pytest.raises(KeyError, match="needs"):
            scorer.score(self._clips(request).exclude(scorer.in_keys[0]))

    def test_flat_clips_rejected(self, request):
        import pytest

        with pytest.raises(ValueError, match=r"batch size \[B, T\]"):
            self.make_scorer().score(self._clips(request).reshape(-1))

    def test_stats_are_numbers(self, request):
        """``stats()`` is optional; when there, a dict of str keys whose numeric values are what the recipes log."""
        scorer = self.make_scorer()
        scorer.score(self._clips(request))
        stats = getattr(scorer, "stats", None)
        if stats is None:
            return
        raw = stats()
        assert isinstance(raw, dict) and all(isinstance(k, str) for k in raw)
        assert set(scorer_stats(scorer)) == {k for k, v in raw.items() if isinstance(v, (int, float))}

    def test_threads(self, request):
        check_scorer(self.make_scorer(), self._clips(request), threads=4, calls=20)

    def test_pickles(self, request):
        if not self.picklable:
            import pytest

            pytest.skip("picklable = False: the scorer is not meant for the process / ray backends")
        check_scorer(self.make_scorer(), self._clips(request), threads=1, calls=1, picklable=True)
