"""Environment factories with rendering and privileged progress events.

Each backend imports its simulator lazily: importing this package needs neither gymnasium nor
minigrid (``pip install 'vlmrb-torchrl[minigrid]'`` when building a MiniGrid env) nor ale-py
(``pip install 'vlmrb-torchrl[atari]'`` when building an Atari env) nor robosuite
(``pip install 'vlmrb-torchrl[robosuite]'``) nor OGBench (``pip install 'vlmrb-torchrl[ogbench]'``).
"""

from __future__ import annotations

from vlmrb_torchrl.envs.atari.env import ATARI_PROMPTS, AtariEnv, BatchedAtariEnv, atari_prompt, make_atari_env
from vlmrb_torchrl.envs.minigrid.env import (
    DOORKEY_ACTIONS,
    FRAME_VIEWS,
    MINIGRID_EVENT_KEYS,
    BatchedMiniGridCollector,
    BatchedMiniGridEnv,
    MiniGridEnv,
    make_minigrid_env,
    register_extra_envs,
)
from vlmrb_torchrl.envs.minigrid.missions import MissionTracker, parse_mission
from vlmrb_torchrl.envs.ogbench.env import OGBENCH_EVENT_KEYS, SCENE_SUBGOALS, SCENE_TASKS, SceneEnv, make_ogbench_env
from vlmrb_torchrl.envs.robosuite.env import (
    ROBOSUITE_EVENT_KEYS,
    ROBOSUITE_VIEWS,
    CameraView,
    ClipRenderSteps,
    PanelView,
    RobosuiteEnv,
    SplitView,
    make_robosuite_env,
)

__all__ = [
    "ATARI_PROMPTS",
    "AtariEnv",
    "BatchedAtariEnv",
    "BatchedMiniGridCollector",
    "BatchedMiniGridEnv",
    "CameraView",
    "ClipRenderSteps",
    "DOORKEY_ACTIONS",
    "FRAME_VIEWS",
    "MINIGRID_EVENT_KEYS",
    "MiniGridEnv",
    "MissionTracker",
    "OGBENCH_EVENT_KEYS",
    "ROBOSUITE_EVENT_KEYS",
    "ROBOSUITE_VIEWS",
    "RobosuiteEnv",
    "SCENE_SUBGOALS",
    "SCENE_TASKS",
    "SceneEnv",
    "SplitView",
    "PanelView",
    "atari_prompt",
    "make_atari_env",
    "make_minigrid_env",
    "make_ogbench_env",
    "make_robosuite_env",
    "parse_mission",
    "register_extra_envs",
]
