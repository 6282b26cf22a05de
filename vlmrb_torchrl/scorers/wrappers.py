"""Scorer wrappers: :class:`NoisyScorer` (an imperfect VLM emulated from a perfect scorer)."""

from __future__ import annotations

import math
import numbers
import threading

import torch
from tensordict import TensorDictBase

from vlmrb_torchrl.scorers.base import Scorer, validate_scores

__all__ = ["NoisyScorer"]


class NoisyScorer:
    """Emulates an imperfect VLM by corrupting another scorer's outputs.

    Each clip's score ``s`` is flipped to ``1 - s`` with probability ``flip_prob`` (for binary
    scores: a false positive or false negative), then Gaussian noise of standard deviation
    ``noise_std`` is added and the result is clipped to ``[0, 1]``. Wrapping
    :class:`~vlmrb_torchrl.scorers.OracleScorer` gives a detector of known accuracy for
    robustness ablations.

    Randomness comes from the wrapper's own :class:`torch.Generator` seeded with ``seed``,
    guarded by a lock (safe from several threads; a fixed seed and call order give the same
    corruption).

    Args:
        scorer (Scorer): the scorer to corrupt.

    Keyword Args:
        flip_prob (float, optional): probability in ``[0, 1]`` of replacing ``s`` by ``1 - s``.
            Defaults to ``0.0``.
        noise_std (float, optional): standard deviation ``>= 0`` of the additive Gaussian noise
            (applied after flips, then clipped to ``[0, 1]``). Defaults to ``0.0``.
        seed (int, optional): seed of the noise generator. Defaults to ``0``.

    Attributes:
        prompt, in_keys: those of the wrapped scorer.
        provenance (dict): ``{"backend": "noisy", "flip_prob", "noise_std", "seed",
            "prompt_hash", "wrapped": <the wrapped scorer's provenance>}``.

    Raises:
        TypeError: ``scorer`` is not a :class:`Scorer`, or a setting has the wrong type.
        ValueError: ``flip_prob`` outside ``[0, 1]`` or ``noise_std`` negative / not finite.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.scorers import OracleScorer
        >>> clips = TensorDict({"success": torch.ones(6, 2, dtype=torch.bool),
        ...                     "mask": torch.ones(6, 2, dtype=torch.bool)}, batch_size=[6, 2])
        >>> noisy = NoisyScorer(OracleScorer("success"), flip_prob=1.0)
        >>> noisy.score(clips)  # every score flipped
        tensor([0., 0., 0., 0., 0., 0.])
        >>> noisy.provenance["wrapped"]["backend"], noisy.provenance["flip_prob"]
        ('oracle', 1.0)
    """

    def __init__(self, scorer: Scorer, *, flip_prob: float = 0.0, noise_std: float = 0.0, seed: int = 0) -> None:
        if not isinstance(scorer, Scorer):
            raise TypeError(
                f"NoisyScorer wraps a Scorer (score(clips), prompt, in_keys, provenance), got {type(scorer).__name__}."
            )
        for name, value in (("flip_prob", flip_prob), ("noise_std", noise_std)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"NoisyScorer.{name} must be a float, got {name}={value!r}.")
        if not 0.0 <= flip_prob <= 1.0:
            raise ValueError(f"NoisyScorer.flip_prob must be in [0, 1], got flip_prob={flip_prob!r}.")
        if not math.isfinite(noise_std) or noise_std < 0:
            raise ValueError(f"NoisyScorer.noise_std must be a finite float >= 0, got noise_std={noise_std!r}.")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"NoisyScorer.seed must be an int, got seed={seed!r}.")
        self.scorer = scorer
        self.flip_prob = float(flip_prob)
        self.noise_std = float(noise_std)
        self.seed = int(seed)
        self.name = f"NoisyScorer({getattr(scorer, 'name', type(scorer).__name__)})"
        self._generator = torch.Generator(device="cpu").manual_seed(self.seed)
        self._lock = threading.Lock()

    @property
    def prompt(self) -> str:
        """The wrapped scorer's prompt."""
        return self.scorer.prompt

    @property
    def in_keys(self) -> list:
        """The wrapped scorer's ``in_keys``."""
        return self.scorer.in_keys

    @property
    def provenance(self) -> dict:
        """Noise settings plus the wrapped scorer's provenance under ``"wrapped"``."""
        inner = dict(self.scorer.provenance)
        return {
            "backend": "noisy",
            "flip_prob": self.flip_prob,
            "noise_std": self.noise_std,
            "seed": self.seed,
            "prompt_hash": inner.get("prompt_hash"),
            "wrapped": inner,
        }

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """The wrapped scorer's scores, flipped and noised: float32 ``[B]`` in ``[0, 1]``."""
        scores = validate_scores(self.scorer.score(clips), clips.batch_size[0], scorer=self.scorer)
        n = scores.shape[0]
        with self._lock:
            flips = torch.rand(n, generator=self._generator) < self.flip_prob if self.flip_prob > 0 else None
            noise = torch.randn(n, generator=self._generator) * self.noise_std if self.noise_std > 0 else None
        if flips is not None:
            scores = torch.where(flips.to(scores.device), 1.0 - scores, scores)
        if noise is not None:
            scores = (scores + noise.to(scores.device)).clamp_(0.0, 1.0)
        return validate_scores(scores, n, scorer=self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.scorer!r}, flip_prob={self.flip_prob}, noise_std={self.noise_std})"
