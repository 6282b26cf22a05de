"""Scorer wrappers: :class:`CachedScorer` (LRU of scores by clip content),
:class:`ThresholdScorer` (binary scores) and :class:`NoisyScorer` (an imperfect VLM emulated
from a perfect scorer)."""

from __future__ import annotations

import hashlib
import math
import numbers
import threading
from collections import OrderedDict

import torch
from tensordict import TensorDictBase

from vlmrb_torchrl.scorers.base import Scorer, check_clips, prompt_hash, scorer_stats, validate_scores

__all__ = ["CachedScorer", "NoisyScorer", "ThresholdScorer"]


def _check_scorer(owner: str, scorer: object) -> None:
    if not isinstance(scorer, Scorer):
        raise TypeError(
            f"{owner} wraps a Scorer (score(clips), prompt, in_keys, provenance), got {type(scorer).__name__}."
        )


class _ScorerWrapper:
    """Base of the wrappers: they read what the wrapped scorer reads, with its prompt, and report
    its stats merged with their own (:meth:`own_stats`)."""

    scorer: Scorer

    def stats(self) -> dict[str, float]:
        """The wrapped scorer's :func:`~vlmrb_torchrl.scorers.scorer_stats` merged with this wrapper's own."""
        return {**scorer_stats(self.scorer), **self.own_stats()}

    def own_stats(self) -> dict[str, float]:
        """This wrapper's counters (none by default)."""
        return {}

    @property
    def prompt(self) -> str:
        """The wrapped scorer's prompt."""
        return self.scorer.prompt

    @property
    def in_keys(self) -> list:
        """The wrapped scorer's ``in_keys``."""
        return self.scorer.in_keys


class NoisyScorer(_ScorerWrapper):
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


class CachedScorer(_ScorerWrapper):
    """Caches another scorer's scores by clip content: identical clips are scored once.

    Each clip is keyed by a BLAKE2 hash of the wrapped scorer's prompt and of the clip's data for
    every entry in its ``in_keys`` plus ``"mask"`` (bytes, dtype and shape), i.e. the packed
    frames the scorer would see. On :meth:`score`, cached clips are answered from an LRU table of
    at most ``max_size`` entries; the misses (de-duplicated within the batch) go to the wrapped
    scorer in one call. Useful when the same clips are re-scored: replayed slices, re-scoring a
    dataset under the same prompt, static scenes in padded tails.

    The table is guarded by a lock; the wrapped scorer is called outside it, so two threads may
    occasionally both score the same new clip (the results agree for deterministic scorers).

    Args:
        scorer (Scorer): the scorer to cache.

    Keyword Args:
        max_size (int, optional): entries kept (least recently used evicted). Defaults to
            ``100_000`` (about 10 MB of keys).

    Attributes:
        hits, misses (int): clips answered without / with a call to the wrapped scorer
            (a clip repeated within a batch is scored once: its repeats count as hits).
        provenance (dict): ``{"backend": "cached", "max_size", "prompt_hash", "wrapped": ...}``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.scorers import CallableScorer
        >>> calls = []
        >>> def brightness(clips):
        ...     calls.append(clips.batch_size[0])
        ...     return clips["pixels"].float().mean((1, 2, 3, 4)) / 255
        >>> cached = CachedScorer(CallableScorer(brightness, in_keys=["pixels"]))
        >>> px = torch.tensor([0, 255, 0], dtype=torch.uint8).view(3, 1, 1, 1, 1).expand(3, 2, 4, 4, 3)
        >>> clips = TensorDict(pixels=px.clone(), mask=torch.ones(3, 2, dtype=torch.bool), batch_size=[3, 2])
        >>> cached.score(clips), cached.score(clips)
        (tensor([0., 1., 0.]), tensor([0., 1., 0.]))
        >>> calls, cached.hits, cached.misses  # 2 distinct clips scored once; 4 hits
        ([2], 4, 2)
    """

    def __init__(self, scorer: Scorer, *, max_size: int = 100_000) -> None:
        _check_scorer("CachedScorer", scorer)
        if isinstance(max_size, bool) or not isinstance(max_size, numbers.Integral) or max_size < 1:
            raise ValueError(f"CachedScorer.max_size must be an int >= 1, got max_size={max_size!r}.")
        self.scorer = scorer
        self.max_size = int(max_size)
        self.name = f"CachedScorer({getattr(scorer, 'name', type(scorer).__name__)})"
        self.hits = 0
        self.misses = 0
        self._table: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def provenance(self) -> dict:
        """Cache settings plus the wrapped scorer's provenance under ``"wrapped"``."""
        inner = dict(self.scorer.provenance)
        return {
            "backend": "cached",
            "max_size": self.max_size,
            "prompt_hash": inner.get("prompt_hash"),
            "wrapped": inner,
        }

    def clip_keys(self, clips: TensorDictBase) -> list[bytes]:
        """The cache key of every clip (16-byte BLAKE2b digests)."""
        keys = list(dict.fromkeys([*self.in_keys, "mask"]))
        arrays = []
        for key in keys:
            value = clips.get(key, None)
            if value is None:
                continue
            value = value.detach().cpu().contiguous()
            meta = f"{key}|{value.dtype}|{tuple(value.shape[1:])}".encode()
            flat = value.reshape(value.shape[0], -1)
            arrays.append((meta, flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)))
        prefix = prompt_hash(self.prompt).encode()
        out = []
        for b in range(clips.batch_size[0]):
            digest = hashlib.blake2b(prefix, digest_size=16)
            for meta, flat in arrays:
                digest.update(meta)
                digest.update(flat[b].numpy().tobytes())
            out.append(digest.digest())
        return out

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """Cached or freshly computed scores: float32 ``[B]`` in ``[0, 1]``."""
        batch = check_clips(clips, self.in_keys, scorer=self)
        keys = self.clip_keys(clips)
        scores = torch.empty(batch, dtype=torch.float32)
        missing: dict[bytes, list[int]] = {}
        with self._lock:
            for i, key in enumerate(keys):
                value = self._table.get(key)
                if value is None:
                    missing.setdefault(key, []).append(i)
                else:
                    self._table.move_to_end(key)
                    scores[i] = value
            self.misses += len(missing)  # distinct new clips; repeats within the batch count as hits
            self.hits += batch - len(missing)
        if missing:
            first = torch.tensor([rows[0] for rows in missing.values()])
            fresh = validate_scores(self.scorer.score(clips[first]), len(first), scorer=self.scorer).cpu()
            with self._lock:
                for (key, rows), value in zip(missing.items(), fresh.tolist(), strict=True):
                    scores[rows] = value
                    self._table[key] = value
                    self._table.move_to_end(key)
                while len(self._table) > self.max_size:
                    self._table.popitem(last=False)
        return validate_scores(scores, batch, scorer=self)

    def __getstate__(self) -> dict:
        with self._lock:
            state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
            state["_table"] = OrderedDict(self._table)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def own_stats(self) -> dict[str, float]:
        """``score_cache_hits``, ``score_cache_misses`` (clips) and ``score_cache_size`` (entries)."""
        with self._lock:
            return {"score_cache_hits": self.hits, "score_cache_misses": self.misses,
                    "score_cache_size": len(self._table)}

    def clear(self) -> None:
        """Empties the table and resets the counters."""
        with self._lock:
            self._table.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.scorer!r}, max_size={self.max_size}, size={len(self._table)})"


class ThresholdScorer(_ScorerWrapper):
    """Binarises another scorer: 1.0 where its score is ``> threshold``, else 0.0.

    The same rule :class:`~vlmrb_torchrl.VLMPrioritizedSampler` applies with its ``threshold``
    (the paper's binary priorities); wrapping the scorer instead makes the binary scores visible
    in logs and clip galleries, or feeds a sampler run with ``threshold=None``.

    Args:
        scorer (Scorer): the scorer to binarise.

    Keyword Args:
        threshold (float, optional): in ``[0, 1)``. Defaults to ``0.5``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from vlmrb_torchrl.scorers import CallableScorer
        >>> inner = CallableScorer(lambda c: torch.tensor([0.2, 0.5, 0.9]), in_keys=["mask"])
        >>> clips = TensorDict(mask=torch.ones(3, 2, dtype=torch.bool), batch_size=[3, 2])
        >>> ThresholdScorer(inner, threshold=0.5).score(clips)
        tensor([0., 0., 1.])
    """

    def __init__(self, scorer: Scorer, *, threshold: float = 0.5) -> None:
        _check_scorer("ThresholdScorer", scorer)
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
            raise TypeError(f"ThresholdScorer.threshold must be a float, got threshold={threshold!r}.")
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"ThresholdScorer.threshold must be in [0, 1), got threshold={threshold!r}.")
        self.scorer = scorer
        self.threshold = float(threshold)
        self.name = f"ThresholdScorer({getattr(scorer, 'name', type(scorer).__name__)})"

    @property
    def provenance(self) -> dict:
        """The threshold plus the wrapped scorer's provenance under ``"wrapped"``."""
        inner = dict(self.scorer.provenance)
        return {
            "backend": "threshold",
            "threshold": self.threshold,
            "prompt_hash": inner.get("prompt_hash"),
            "wrapped": inner,
        }

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        """1.0 where the wrapped score exceeds ``threshold``, else 0.0: float32 ``[B]``."""
        batch = check_clips(clips, self.in_keys, scorer=self)
        scores = validate_scores(self.scorer.score(clips), batch, scorer=self.scorer)
        return (scores > self.threshold).to(torch.float32)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.scorer!r}, threshold={self.threshold})"
