"""Environment families, one folder each: MiniGrid / BabyAI, Atari, robosuite, OGBench Scene.

Each family's folder (``vlmrb_torchrl/envs/<family>/``) holds its TorchRL env (``env.py``: symbolic
or state observations for the agent, rendered frames for a scorer, privileged progress events for
the oracle), its scripted policies, its scorers' prompt sets and what ``vlmrb build-scorer`` trains
on it; its ``__init__.py`` is the family's record (:class:`EnvFamily`), which the recipes and the
scorers look up (:func:`family_of`). See :mod:`vlmrb_torchrl.envs.family`.

The names below are imported on first use, and each backend imports its simulator only when an env
is built: importing this package needs neither gymnasium nor minigrid (``pip install
'vlmrb-torchrl[minigrid]'`` when building a MiniGrid env) nor ale-py (``pip install
'vlmrb-torchrl[atari]'``) nor robosuite (``pip install 'vlmrb-torchrl[robosuite]'``) nor OGBench
(``pip install 'vlmrb-torchrl[ogbench]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vlmrb_torchrl._lazy import lazy_exports

_MINIGRID, _ATARI = "vlmrb_torchrl.envs.minigrid.env", "vlmrb_torchrl.envs.atari.env"
_ROBOSUITE, _OGBENCH = "vlmrb_torchrl.envs.robosuite.env", "vlmrb_torchrl.envs.ogbench.env"
_FAMILY = "vlmrb_torchrl.envs.family"

#: Public name -> the module that defines it.
_EXPORTS = {
    "ATARI_PROMPTS": _ATARI, "AtariEnv": _ATARI, "BatchedAtariEnv": _ATARI, "atari_prompt": _ATARI,
    "make_atari_env": _ATARI,
    "DOORKEY_ACTIONS": _MINIGRID, "FRAME_VIEWS": _MINIGRID, "MINIGRID_EVENT_KEYS": _MINIGRID,
    "BatchedMiniGridCollector": _MINIGRID, "BatchedMiniGridEnv": _MINIGRID, "MiniGridEnv": _MINIGRID,
    "FRAME_STATE_KEY": "vlmrb_torchrl.envs._base", "MiniGridStateRenderer": _MINIGRID, "make_minigrid_env": _MINIGRID, "register_extra_envs": _MINIGRID,
    "MissionTracker": "vlmrb_torchrl.envs.minigrid.missions", "parse_mission": "vlmrb_torchrl.envs.minigrid.missions",
    "OGBENCH_EVENT_KEYS": _OGBENCH, "SCENE_SUBGOALS": _OGBENCH, "SCENE_TASKS": _OGBENCH, "SceneEnv": _OGBENCH,
    "SceneStateRenderer": _OGBENCH, "make_ogbench_env": _OGBENCH,
    "ROBOSUITE_EVENT_KEYS": _ROBOSUITE, "ROBOSUITE_VIEWS": _ROBOSUITE, "CameraView": _ROBOSUITE,
    "PanelView": _ROBOSUITE, "RobosuiteEnv": _ROBOSUITE, "RobosuiteStateRenderer": _ROBOSUITE, "SplitView": _ROBOSUITE, "make_robosuite_env": _ROBOSUITE,
    "ClipRenderSteps": "vlmrb_torchrl.envs._base",
    "EnvFamily": _FAMILY, "FAMILY_MODULES": _FAMILY, "families": _FAMILY, "family_of": _FAMILY,
    "get_family": _FAMILY, "register_family": _FAMILY, "unregister_family": _FAMILY,
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from vlmrb_torchrl.envs._base import FRAME_STATE_KEY, ClipRenderSteps
    from vlmrb_torchrl.envs.atari.env import ATARI_PROMPTS, AtariEnv, BatchedAtariEnv, atari_prompt, make_atari_env
    from vlmrb_torchrl.envs.family import (FAMILY_MODULES, EnvFamily, families, family_of, get_family,
                                           register_family, unregister_family)
    from vlmrb_torchrl.envs.minigrid.env import (DOORKEY_ACTIONS, FRAME_VIEWS, MINIGRID_EVENT_KEYS,
                                                 BatchedMiniGridCollector, BatchedMiniGridEnv, MiniGridEnv,
                                                 MiniGridStateRenderer, make_minigrid_env, register_extra_envs)
    from vlmrb_torchrl.envs.minigrid.missions import MissionTracker, parse_mission
    from vlmrb_torchrl.envs.ogbench.env import (OGBENCH_EVENT_KEYS, SCENE_SUBGOALS, SCENE_TASKS, SceneEnv,
                                                SceneStateRenderer, make_ogbench_env)
    from vlmrb_torchrl.envs.robosuite.env import (ROBOSUITE_EVENT_KEYS, ROBOSUITE_VIEWS, CameraView, PanelView,
                                                  RobosuiteEnv, RobosuiteStateRenderer, SplitView, make_robosuite_env)


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
