"""Hydra dataclass configs for the sampler, the scoring transform and the one-call buffer, as TorchRL's own.

TorchRL ships structured configs for its replay pieces (``torchrl.trainers.algorithms.configs``:
``PrioritizedSamplerConfig``, ``TensorDictReplayBufferConfig``, ... with a ``_target_``) and stores them in
Hydra's ``ConfigStore`` by group. This module does the same for this package's pieces, on TorchRL's base
classes and in TorchRL's groups:

============================== ================================ ===============================================
config                          group / name                     builds
============================== ================================ ===============================================
:class:`VLMPrioritizedSamplerConfig` ``sampler`` / ``vlm_prioritized``   :class:`~vlmrb_torchrl.VLMPrioritizedSampler`
:class:`VLMScoreTransformConfig`     ``transform`` / ``vlm_score``        :class:`~vlmrb_torchrl.VLMScoreTransform`
:class:`VLMReplayBufferConfig`       ``replay_buffer`` / ``vlm``          :func:`~vlmrb_torchrl.make_vlm_replay_buffer`
:class:`ScorerConfig`                ``scorer`` / ``make_scorer``         :func:`~vlmrb_torchrl.scorers.make_scorer`
:class:`ClipSpecConfig`              ``clip_spec`` / ``clip_spec``        :class:`~vlmrb_torchrl.ClipSpec`
============================== ================================ ===============================================

Each config's fields are its target's keyword arguments, read from the target's signature (with its
defaults; a required one is ``???``), so a config never drifts from the code. YAML has no tuples: where a
target takes nested keys (``traj_key``, ``in_keys``, ...) the config's ``_target_`` is a function of this
module that reads a list of strings as the nested key it stands for (``[collector, traj_ids]`` ->
``("collector", "traj_ids")``) and calls the real one. Importing the module registers the configs
(:func:`register_configs`); it needs ``hydra-core`` (the ``examples`` extra).

Examples:
    >>> from hydra.utils import instantiate
    >>> cfg = VLMPrioritizedSamplerConfig(max_capacity=1_000, lambda_max=0.3)
    >>> sampler = instantiate(cfg)
    >>> type(sampler).__name__, sampler.lambda_max
    ('VLMPrioritizedSampler', 0.3)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING
from torchrl.trainers.algorithms.configs.common import ConfigBase
from torchrl.trainers.algorithms.configs.data import ReplayBufferBaseConfig, SamplerConfig
from torchrl.trainers.algorithms.configs.transforms import TransformConfig

__all__ = ["ClipSpecConfig", "ScorerConfig", "VLMPrioritizedSamplerConfig", "VLMReplayBufferConfig",
           "VLMScoreTransformConfig", "register_configs"]


def _nested(name: str, value: Any) -> Any:
    """``value`` of the argument ``name`` with each list of strings that stands for a nested key as a tuple."""
    def key(k: Any) -> Any:
        return tuple(k) if isinstance(k, (list, tuple)) and all(isinstance(p, str) for p in k) else k

    if name.endswith("_key"):
        return key(value)
    if name.endswith("_keys") and isinstance(value, (list, tuple)):
        return [key(k) if isinstance(k, (list, tuple)) else k for k in value]
    return value


def _reading_yaml_keys(target: Any) -> Any:
    """``target`` called with the nested keys of a YAML config as tuples (:func:`_nested`)."""
    @functools.wraps(target)
    def build(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **{name: _nested(name, value) for name, value in kwargs.items()})

    return build


def make_vlm_replay_buffer(*args: Any, **kwargs: Any) -> Any:
    """:func:`vlmrb_torchrl.make_vlm_replay_buffer`, nested keys given as lists (:class:`VLMReplayBufferConfig`'s target)."""
    from vlmrb_torchrl.replay.buffer import make_vlm_replay_buffer as make

    return _reading_yaml_keys(make)(*args, **kwargs)


def vlm_score_transform(*args: Any, **kwargs: Any) -> Any:
    """:class:`vlmrb_torchrl.VLMScoreTransform`, keys given as lists (:class:`VLMScoreTransformConfig`'s target)."""
    from vlmrb_torchrl.scoring.transform import VLMScoreTransform

    return _reading_yaml_keys(VLMScoreTransform)(*args, **kwargs)


class _Config(ConfigBase):
    def __post_init__(self) -> None:
        """Nothing to check here: the target checks its arguments when it is built."""


def _config(name: str, target: str, base: type, doc: str, *, via: str | None = None) -> type:
    """A dataclass on ``base`` with ``_target_`` (``via``, else ``target``) and one field per keyword argument of
    ``target`` (its default, ``???`` where it has none); ``*args`` and ``**kwargs`` are left out."""
    module, _, attribute = target.rpartition(".")
    obj = getattr(importlib.import_module(module), attribute)
    fields: list[tuple[str, Any, Any]] = [("_target_", str, dataclasses.field(default=via or target))]
    for parameter in inspect.signature(obj).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        default = MISSING if parameter.default is parameter.empty else parameter.default
        fields.append((parameter.name, Any, dataclasses.field(default=default)))
    cls = dataclasses.make_dataclass(name, fields, bases=(base,), namespace={"__module__": __name__})
    cls.__doc__ = doc
    return cls


ScorerConfig = _config(
    "ScorerConfig", "vlmrb_torchrl.scorers.make_scorer", _Config,
    """``make_scorer(spec)``: a scorer from its spec (``oracle:minigrid``, ``builtin:minigrid``, ``clip:<dir>``, ...).""")
ClipSpecConfig = _config(
    "ClipSpecConfig", "vlmrb_torchrl.ClipSpec", _Config,
    """:class:`~vlmrb_torchrl.ClipSpec`: the clip geometry (``clip_len``, ``stride``, ``frames``, ...).""")
VLMPrioritizedSamplerConfig = _config(
    "VLMPrioritizedSamplerConfig", "vlmrb_torchrl.VLMPrioritizedSampler", SamplerConfig,
    """:class:`~vlmrb_torchrl.VLMPrioritizedSampler`, in TorchRL's ``sampler`` group beside ``prioritized``.""")
VLMScoreTransformConfig = _config(
    "VLMScoreTransformConfig", "vlmrb_torchrl.VLMScoreTransform", TransformConfig,
    """:class:`~vlmrb_torchrl.VLMScoreTransform` (``scorer``: a :class:`ScorerConfig`), in TorchRL's ``transform``
    group.""", via=f"{__name__}.vlm_score_transform")
VLMReplayBufferConfig = _config(
    "VLMReplayBufferConfig", "vlmrb_torchrl.make_vlm_replay_buffer", ReplayBufferBaseConfig,
    """:func:`~vlmrb_torchrl.make_vlm_replay_buffer` (``scorer``: a :class:`ScorerConfig`, ``clip_spec``: a
    :class:`ClipSpecConfig`), in TorchRL's ``replay_buffer`` group.""", via=f"{__name__}.make_vlm_replay_buffer")

#: (group, name, config): where :func:`register_configs` stores each config.
CONFIGS = (("sampler", "vlm_prioritized", VLMPrioritizedSamplerConfig),
           ("transform", "vlm_score", VLMScoreTransformConfig),
           ("replay_buffer", "vlm", VLMReplayBufferConfig),
           ("scorer", "make_scorer", ScorerConfig),
           ("clip_spec", "clip_spec", ClipSpecConfig))


def register_configs() -> None:
    """Stores the configs in Hydra's ``ConfigStore`` (:data:`CONFIGS`; run at import, idempotent), as
    ``torchrl.trainers.algorithms.configs`` stores TorchRL's.

    Examples:
        >>> from hydra.core.config_store import ConfigStore
        >>> register_configs()
        >>> "vlm_prioritized.yaml" in ConfigStore.instance().repo["sampler"]
        True
    """
    store = ConfigStore.instance()
    for group, name, node in CONFIGS:
        store.store(group=group, name=name, node=node)


register_configs()
