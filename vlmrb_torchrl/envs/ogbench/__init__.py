"""The OGBench Scene family: ``ogbench/scene-task1`` ... ``ogbench/scene-task5``, trained by the SAC recipe.

- ``env.py``: :class:`~vlmrb_torchrl.envs.SceneEnv` (OGBench's state for the agent, its camera's frames
  for the VLM, subgoal events for the oracle);
- ``policies.py``: OGBench's scripted oracles on subtasks, and the privileged state captions are made from;
- ``prompts.py``: ``builtin:scene``'s prompt set of each task;
- ``training.py``, ``domain.py``: what ``vlmrb build-scorer scene`` trains on;
- this module: the family's record, :data:`FAMILY`.
"""

from __future__ import annotations

import re
from typing import Any

from vlmrb_torchrl.envs.family import EnvFamily

__all__ = ["FAMILY", "OGBenchFamily", "scene_task"]


def scene_task(env_id: str) -> int:
    """The Scene task number of a recipe env id (``ogbench/scene-task3``, ``scene-task3`` or OGBench's
    ``scene-singletask-task3-v0``).

    Examples:
        >>> scene_task("ogbench/scene-task3"), scene_task("scene-singletask-task5-v0")
        (3, 5)
        >>> scene_task("ogbench/cube-task1")
        Traceback (most recent call last):
        ...
        ValueError: unknown OGBench env 'ogbench/cube-task1': use ogbench/scene-task1 ... ogbench/scene-task5.
    """
    match = re.fullmatch(r"(?:ogbench/)?scene(?:-singletask)?-task([1-5])(?:-v0)?", env_id)
    if match is None:
        raise ValueError(f"unknown OGBench env {env_id!r}: use ogbench/scene-task1 ... ogbench/scene-task5.")
    return int(match.group(1))


def _task(env_id: str) -> int | None:
    """The Scene task of an ``ogbench/scene-task<N>`` id, else ``None``."""
    try:
        return scene_task(env_id)
    except ValueError:
        return None


class OGBenchFamily(EnvFamily):
    """OGBench Scene (:class:`~vlmrb_torchrl.envs.SceneEnv`), the VLM-RB paper's robotic domain.

    The SAC recipe's defaults: OGBench's 750 steps, its ``front_pixels`` camera, its own reward (the
    subgoal count), ``builtin:scene`` with the task's prompt set (``builtin:scene-task<N>``).

    Examples:
        >>> FAMILY.default_scorer("ogbench/scene-task2"), FAMILY.resolve_scorer("builtin:scene", "ogbench/scene-task4")
        ('builtin:scene-task2', 'builtin:scene-task4')
    """

    name = "ogbench"
    title = "OGBench Scene"
    id_prefixes = ("ogbench/",)
    example_id = "ogbench/scene-task1"
    recipe = "sac"
    env_factory = "vlmrb_torchrl.envs.ogbench.env:make_ogbench_env"
    event_keys = "vlmrb_torchrl.envs.ogbench.env:OGBENCH_EVENT_KEYS"
    # a subgoal becomes satisfied (the cube on its target, a button in its goal state, the drawer or the window
    # at its goal position) | the task is solved
    oracles = {"ogbench": ("next", "progress_event")}
    builtin_scorers = ("scene",)
    training_domains = {"scene": "vlmrb_torchrl.envs.ogbench.domain:scene_domain"}
    frame_states = {"SceneState": "vlmrb_torchrl.envs.ogbench.policies"}
    policies = {"scripted": "vlmrb_torchrl.envs.ogbench.policies:ScenePolicy"}

    @property
    def id_help(self) -> str:
        return "ogbench/scene-task1 ... ogbench/scene-task5"

    def id_problem(self, env_id: str) -> str | None:
        return None if _task(env_id) is not None else self.id_help

    def check_id(self, env_id: str) -> None:
        scene_task(env_id)  # an unknown id fails here, not in a collector's worker

    def recipe_defaults(self, env_id: str) -> dict[str, Any]:
        return {"max_episode_steps": 750, "camera": "front_pixels", "reward_shaping": True}

    def default_scorer(self, env_id: str, *, seed: int = 0) -> str | None:
        return self.resolve_scorer("builtin:scene", env_id)

    def resolve_scorer(self, scorer: str, env_id: str) -> str:
        task = _task(env_id)
        return f"builtin:scene-task{task}" if scorer == "builtin:scene" and task is not None else scorer

    def config_checks(self, cfg: Any) -> list[tuple[str, bool, str]]:
        task = _task(cfg.env)
        scene = cfg.replay in ("vlm", "vlm_td") and str(cfg.scorer).startswith("builtin:scene")
        return [("scorer", not scene or cfg.scorer == f"builtin:scene-task{task}",
                 f"the scorer of this env's task (builtin:scene on ogbench/scene-task<N> is builtin:scene-task<N>; "
                 f"env={cfg.env!r}; pass scorer=oracle:ogbench, clip:<dir>, ... for another env)"),
                ("camera", not scene or cfg.camera == "front_pixels",
                 f"front_pixels with scorer={cfg.scorer} (the camera it was trained on)"),
                ("frame_size", not scene or cfg.frame_size == 64,
                 f"64 with scorer={cfg.scorer} (the frame size it was trained on)")]


#: The family's record (:func:`~vlmrb_torchrl.envs.family.family_of` finds it).
FAMILY = OGBenchFamily()
