"""Which class runs an :class:`~vlmrb_torchrl.AsyncScorer` backend: a small registry and a factory.

``make_async_scorer(transform, sampler, backend=...)`` builds the scorer worker for a backend
name: ``"thread"`` and ``"process"`` are :class:`~vlmrb_torchrl.AsyncScorer` itself,
``"ray"`` is :class:`~vlmrb_torchrl.scoring.ray_pool.RayAsyncScorer` (a subclass in its own module:
Ray is an optional extra, imported only when that backend is built). Classes are named here
by import path and imported on first use, so :mod:`vlmrb_torchrl.scoring.worker` and
:mod:`vlmrb_torchrl.scoring.ray_pool` never import each other for the choice, and constructing
``AsyncScorer(...)`` always gives an ``AsyncScorer``.

Examples:
    >>> scoring_backends()
    ('thread', 'process', 'ray')
    >>> scoring_backend_class("thread").__name__
    'AsyncScorer'
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

__all__ = ["make_async_scorer", "register_scoring_backend", "scoring_backend_class", "scoring_backends"]

# backend name -> "module:Class" (imported on first use) or the class itself
_BACKENDS: dict[str, Any] = {
    "thread": "vlmrb_torchrl.scoring.worker:AsyncScorer",
    "process": "vlmrb_torchrl.scoring.worker:AsyncScorer",
    "ray": "vlmrb_torchrl.scoring.ray_pool:RayAsyncScorer",
}
_LOCK = threading.Lock()


def scoring_backends() -> tuple[str, ...]:
    """The backend names :func:`make_async_scorer` accepts."""
    with _LOCK:
        return tuple(_BACKENDS)


def register_scoring_backend(name: str, target: str | type, *, overwrite: bool = False) -> None:
    """Adds a backend: ``target`` is an :class:`~vlmrb_torchrl.AsyncScorer` subclass or its
    ``"module:Class"`` path (imported when the backend is first built). The class is called as
    ``cls(transform, sampler, backend=name, **kwargs)``.

    Raises:
        ValueError: ``name`` is taken (pass ``overwrite=True``) or not a plain name.
        TypeError: ``target`` is neither a class nor a ``"module:Class"`` string.
    """
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise ValueError(f"register_scoring_backend: name must be a plain name (letters, digits, _), got {name!r}.")
    if not (isinstance(target, type) or (isinstance(target, str) and target.count(":") == 1)):
        raise TypeError(f"register_scoring_backend: target must be a class or 'module:Class', got {target!r}.")
    with _LOCK:
        if name in _BACKENDS and not overwrite:
            raise ValueError(f"register_scoring_backend: {name!r} is already a backend; pass overwrite=True.")
        _BACKENDS[name] = target


def scoring_backend_class(backend: str) -> type:
    """The class that runs ``backend`` (imported now if it was registered by path).

    Raises:
        ValueError: an unknown backend, naming the known ones.
    """
    with _LOCK:
        target = _BACKENDS.get(backend)
    if target is None:
        raise ValueError(f"backend must be one of {scoring_backends()}, got backend={backend!r}.")
    if isinstance(target, str):
        module, _, name = target.partition(":")
        target = getattr(importlib.import_module(module), name)
    return target


def make_async_scorer(transform, sampler, *, backend: str = "thread", **kwargs: Any):
    """The scorer worker for ``backend``: ``scoring_backend_class(backend)(transform, sampler, backend=backend, **kwargs)``.

    Examples:
        >>> import torch
        >>> from vlmrb_torchrl import AsyncScorer, VLMPrioritizedSampler, VLMScoreTransform
        >>> from vlmrb_torchrl.scorers import CallableScorer
        >>> transform = VLMScoreTransform(CallableScorer(lambda c: torch.zeros(c.shape[0]), in_keys=["obs"]),
        ...                               clip_len=2, in_keys=())
        >>> with make_async_scorer(transform, VLMPrioritizedSampler(8), backend="thread") as worker:
        ...     type(worker) is AsyncScorer
        True
    """
    return scoring_backend_class(backend)(transform, sampler, backend=backend, **kwargs)
