"""Runs TorchRL's own replay-buffer tests with VLMPrioritizedSampler in place of PrioritizedSampler.

Set VLMRB_SUBSTITUTE=0 for the baseline (TorchRL's own sampler, same selection).
"""
from __future__ import annotations

import inspect
import os
import re

import numpy as np
import pytest
import torch

SUBSTITUTE = os.environ.get("VLMRB_SUBSTITUTE", "1") != "0"
_PRIORITIZED = re.compile(r"Prioritized(Sampler|ReplayBuffer)|TensorDictPrioritizedReplayBuffer|\bprb\b|PRB")

if SUBSTITUTE:
    import torchrl.data
    import torchrl.data.replay_buffers as replay_buffers
    import torchrl.data.replay_buffers.replay_buffers.prioritized as _prb
    import torchrl.data.replay_buffers.replay_buffers.prioritized_tensordict as _tdprb
    import torchrl.data.replay_buffers.samplers as samplers
    from vlmrb_torchrl import VLMPrioritizedSampler

    class PrioritizedSampler(VLMPrioritizedSampler):
        """PrioritizedSampler's signature onto the VLM sampler in the setting where it follows PER's law
        (no VLM scores, lambda_max=1, warmup=0, td_boost=True): P(i) ~ (|td_i| + eps) ** alpha."""

        def __init__(self, max_capacity, alpha, beta, eps=1e-8, dtype=torch.float, reduction="max",
                     max_priority_within_buffer=False, device=None):
            unsupported = [name for name, given, ours in [("dtype", dtype, torch.float),
                                                          ("max_priority_within_buffer", max_priority_within_buffer, False)]
                           if given != ours]
            if device is not None and torch.device(device).type != "cpu":  # (the VLM sampler's trees are on the CPU)
                unsupported.append(f"device={device}")
            if unsupported:
                raise NotImplementedError(f"VLMPrioritizedSampler has no {unsupported}")
            super().__init__(max_capacity, lambda_max=1.0, warmup=0, td_boost=True, alpha=alpha, beta=beta,
                             eps=eps, reduction=reduction)

        # Read-only views of the VLM sampler's state under the private names TorchRL's tests read (they
        # check PrioritizedSampler's leaves, (p + eps) ** alpha, and its running raw max priority).
        @property
        def _sum_tree(self):
            return _Leaves(self, neutral=0.0)

        @property
        def _min_tree(self):
            return _Leaves(self, neutral=float("inf"))

        @property
        def _eps(self):
            return self._state.config.eps

        @property
        def _alpha(self):
            return self._state.config.alpha

        @property
        def _max_priority(self):
            return (self._state.max_td, None)

    class _Leaves:
        """``tree[i]`` and ``tree.query(start, end)`` as TorchRL's float32 sum (min) segment tree:
        ``(td + eps) ** alpha`` of the filled slots, ``neutral`` (0, or inf for the min tree) elsewhere."""

        def __init__(self, sampler, neutral):
            state = sampler._state
            self._leaves = np.where(state.filled, state.config.td_factor(state.td), neutral).astype(np.float32)
            self._neutral = neutral

        def __getitem__(self, index):
            return float(self._leaves[index])

        def query(self, start, end):
            part = self._leaves[start:end]
            return float(part.sum() if self._neutral == 0.0 else part.min())

    for module in (torchrl.data, replay_buffers, samplers, _prb, _tdprb):
        module.PrioritizedSampler = PrioritizedSampler


def _touches_prioritized(item) -> bool:
    if _PRIORITIZED.search(item.nodeid):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and _PRIORITIZED.search(repr(callspec.params)):
        return True
    try:
        return bool(_PRIORITIZED.search(inspect.getsource(item.function)))
    except (OSError, TypeError):
        return False


def pytest_collection_modifyitems(config, items):
    """Keeps the tests that build or name a prioritized sampler or buffer (the rest do not reach ours)."""
    keep = [item for item in items if _touches_prioritized(item)]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep
