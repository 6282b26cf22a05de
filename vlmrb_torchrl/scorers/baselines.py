"""Baseline scorers for controls: random judgements that carry no task information."""

from __future__ import annotations

import threading

import torch
from tensordict import TensorDictBase

from vlmrb_torchrl.scorers.base import prompt_hash

__all__ = ["RandomScorer"]


class RandomScorer:
    """Scores each clip 1 with probability ``p`` (else 0), from its own seeded generator.

    The control arm of a VLM-RB study: it prioritizes as much of the buffer as a real
    scorer would, but at random, so learning should match uniform replay.

    Keyword Args:
        p (float): probability of a positive score, in [0, 1]. Defaults to 0.1.
        seed (int): generator seed. Defaults to 0.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> clips = TensorDict(mask=torch.ones(1000, 4, dtype=torch.bool), batch_size=[1000, 4])
        >>> scores = RandomScorer(p=0.25, seed=0).score(clips)
        >>> scores.shape, round(scores.mean().item(), 2)
        (torch.Size([1000]), 0.25)
    """

    prompt = ""

    def __init__(self, *, p: float = 0.1, seed: int = 0) -> None:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"RandomScorer.p must be a number in [0, 1], got p={p!r}.")
        self.p = float(p)
        self.in_keys = ["mask"]
        self.provenance = {"backend": "random", "p": self.p, "seed": seed, "prompt_hash": prompt_hash("")}
        self._generator = torch.Generator().manual_seed(seed)
        self._lock = threading.Lock()

    def score(self, clips: TensorDictBase) -> torch.Tensor:
        with self._lock:
            return (torch.rand(clips.shape[0], generator=self._generator) < self.p).float()
