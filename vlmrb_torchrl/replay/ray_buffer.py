"""A VLM-RB replay buffer that Ray actors share: TorchRL's ``RayReplayBuffer`` around a buffer whose
clients reach the :class:`~vlmrb_torchrl.VLMPrioritizedSampler`'s score API.

- :class:`VLMRemoteReplayBuffer` is the ``replay_buffer_cls`` that makes a ``RayReplayBuffer``
  with a :class:`~vlmrb_torchrl.VLMPrioritizedSampler` expose ``update_scores`` / ``generations``
  to its Ray clients (TorchRL's proxy forwards buffer methods, not sampler ones);
- :func:`make_ray_vlm_replay_buffer` builds one;
- :class:`RemoteSampler` lets an :class:`~vlmrb_torchrl.AsyncScorer` (any backend, the Ray pool of
  :mod:`vlmrb_torchrl.scoring.ray_pool` included) write scores into it.

Ray is imported only when a buffer is built (``pip install 'vlmrb-torchrl[ray]'``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from vlmrb_torchrl._signature import init_signature
from vlmrb_torchrl.replay.sampler import VLMPrioritizedSampler
from vlmrb_torchrl.scoring.ray_pool import _import_ray

__all__ = ["RemoteSampler", "VLMRemoteReplayBuffer", "make_ray_vlm_replay_buffer"]


@init_signature
class VLMRemoteReplayBuffer(TensorDictReplayBuffer):
    """A ``TensorDictReplayBuffer`` that exposes its :class:`~vlmrb_torchrl.VLMPrioritizedSampler`'s
    score API as buffer methods, for TorchRL's ``RayReplayBuffer(replay_buffer_cls=...)``.

    A ``RayReplayBuffer`` runs the buffer in a Ray actor; its clients (``rb.client()``, picklable,
    what collector actors hold) forward buffer methods only, so the sampler's ``update_scores`` and
    ``generations`` are unreachable with a plain buffer class. This one adds them, plus
    :meth:`extend_with_generations` (one round trip for a collector that cuts clips) and
    :meth:`vlm_stats`. Build it with :func:`make_ray_vlm_replay_buffer`.
    """

    def extend_with_generations(self, data: TensorDictBase, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``extend(data)``, and the written slots' generations (what ``ClipStream.push`` needs)."""
        index = self.extend(data, **kwargs)
        return index, self.sampler.generations(index)

    def update_scores(self, index, scores, generation=None, *, reduce: str = "replace") -> int:
        """The sampler's :meth:`~vlmrb_torchrl.VLMPrioritizedSampler.update_scores` (stale writes dropped)."""
        return self.sampler.update_scores(index, scores, generation, reduce=reduce)

    def generations(self, index) -> torch.Tensor:
        return self.sampler.generations(index)

    def scores(self, index) -> torch.Tensor:
        return self.sampler.scores(index)

    def vlm_stats(self) -> dict[str, float | int]:
        """The sampler's ``stats()``."""
        return self.sampler.stats()


def make_ray_vlm_replay_buffer(
    capacity: int,
    *,
    batch_size: int | None = None,
    sampler_kwargs: dict[str, Any] | None = None,
    remote_config: dict[str, Any] | None = None,
    **kwargs: Any,
):
    """A TorchRL ``RayReplayBuffer`` holding a :class:`VLMRemoteReplayBuffer` with a
    ``LazyTensorStorage(capacity)`` and a ``VLMPrioritizedSampler(capacity, **sampler_kwargs)``.

    Collectors running as Ray actors take ``rb.client()`` and store with
    ``client.extend_with_generations(batch)``; their clips go to an ``AsyncScorer`` (any backend)
    built with ``sampler=RemoteSampler(rb)``, which writes scores into the remote sampler; the
    learner samples with ``rb.sample()``. ``rb.close()`` kills the buffer actor.

    Args:
        capacity (int): storage size.

    Keyword Args:
        batch_size (int, optional): default ``sample()`` batch size.
        sampler_kwargs (dict, optional): :class:`~vlmrb_torchrl.VLMPrioritizedSampler` arguments.
        remote_config (dict, optional): Ray options of the buffer actor. Defaults to
            ``{"num_cpus": 0}`` (TorchRL's default reserves a CPU and 2 GiB).
        **kwargs: other ``RayReplayBuffer`` arguments (``ray_init_config``, ...).
    """
    _import_ray()
    from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer

    return RayReplayBuffer(
        replay_buffer_cls=VLMRemoteReplayBuffer,
        storage=partial(LazyTensorStorage, capacity),
        sampler=partial(VLMPrioritizedSampler, capacity, **(sampler_kwargs or {})),
        batch_size=batch_size,
        remote_config={"num_cpus": 0} if remote_config is None else remote_config,
        **kwargs,
    )


class RemoteSampler:
    """The part of a sampler an :class:`~vlmrb_torchrl.AsyncScorer` writes to, forwarded to a
    VLM-RB buffer served by Ray.

    Args:
        buffer: a ``RayReplayBuffer`` from :func:`make_ray_vlm_replay_buffer` or one of its
            clients (``rb.client()``; picklable, so a Ray actor can hold one).
    """

    def __init__(self, buffer) -> None:
        self.buffer = buffer.client() if callable(getattr(type(buffer), "client", None)) else buffer

    def update_scores(self, index, scores, generation=None, *, reduce: str = "replace") -> int:
        return self.buffer.update_scores(index, scores, generation, reduce=reduce)

    def generations(self, index) -> torch.Tensor:
        return self.buffer.generations(index)

    def scores(self, index) -> torch.Tensor:
        return self.buffer.scores(index)

    def stats(self) -> dict[str, float | int]:
        return self.buffer.vlm_stats()
