"""Deprecated: the recipes' shared code now lives in one module per concern.

| old ``common.<name>`` | new home |
|---|---|
| ``Run``, ``start_run``, ``RunStart``, ``seed_everything``, ``resolve_device``, ``METRIC_COLUMNS``, ``SAC_METRIC_COLUMNS``, checkpoints (``save_checkpoint``, ``load_checkpoint``, ``latest_checkpoint``, ``truncate_metrics``, ``resume_counters``) | :mod:`vlmrb_torchrl.recipes.run` |
| ``evaluate``, ``maybe_evaluate`` (the sampled-positive bookkeeping moved to ``Replay.logged``) | :mod:`vlmrb_torchrl.recipes.evaluate` |
| ``clip_gallery`` | :mod:`vlmrb_torchrl.recipes.gallery` |
| ``make_scorer_from_config``, ``make_replay`` (now returns a ``Replay``), ``store``/``replay_stats`` (now ``Replay.store``/``Replay.stats``) | :mod:`vlmrb_torchrl.recipes.replay` |
| ``env_factory``, ``minigrid_actions``, ``make_collector`` | :mod:`vlmrb_torchrl.recipes.envs` |
| ``n_step_returns`` | :mod:`vlmrb_torchrl.recipes.dqn` |
| ``fmt``, the loop (``finish`` is now ``Run.write_summary`` plus closing) | :mod:`vlmrb_torchrl.recipes.loop` (``Training``) |
| ``checkpoint_now``, ``maybe_checkpoint`` (take a ``Replay``; the latter returns the checkpoint written, or ``None``) | :mod:`vlmrb_torchrl.recipes.run` |

Names that kept their behaviour still resolve here, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED = {
    **dict.fromkeys(("METRIC_COLUMNS", "SAC_METRIC_COLUMNS", "seed_everything", "resolve_device", "Run",
                     "save_checkpoint", "load_checkpoint", "latest_checkpoint", "truncate_metrics",
                     "resume_counters"), "vlmrb_torchrl.recipes.run"),
    "evaluate": "vlmrb_torchrl.recipes.evaluate",
    "clip_gallery": "vlmrb_torchrl.recipes.gallery",
    "make_scorer_from_config": "vlmrb_torchrl.recipes.replay",
    **dict.fromkeys(("env_factory", "minigrid_actions", "make_collector"), "vlmrb_torchrl.recipes.envs"),
    "n_step_returns": "vlmrb_torchrl.recipes.dqn",
    "fmt": "vlmrb_torchrl.recipes.loop",
}


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (the recipes' shared code moved: "
                             "see this module's docstring)")
    warnings.warn(f"vlmrb_torchrl.recipes.common.{name} moved to {module}.{name}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(_MOVED)
