"""The MiniGrid / BabyAI family: ``MiniGrid-*`` and ``BabyAI-*`` ids, trained by the DQN recipe.

This folder is everything the package knows about it:

- ``env.py``: :class:`~vlmrb_torchrl.envs.MiniGridEnv` (partial, full or both observations; grid or
  agent-centred frames; privileged events), its batched env and collector;
- ``missions.py``: the mission grammar (:func:`~vlmrb_torchrl.envs.parse_mission`) and the
  ``"subgoal"`` oracle flag (:class:`~vlmrb_torchrl.envs.MissionTracker`);
- ``policies.py``: scripted agents (key -> door -> goal, any parsed mission, random sub-goals) and
  the privileged state captions are made from;
- ``prompts.py``: a mission -> the built-in models' checks, and their default prompt sets;
- ``captions.py``, ``training.py``, ``domain.py``: what ``vlmrb build-scorer minigrid`` (and
  ``minigrid_agent``) trains on;
- this module: the family's record, :data:`FAMILY` (the recipe's choices for these envs).
"""

from __future__ import annotations

import re
from typing import Any

from vlmrb_torchrl.envs.family import EnvFamily, rendered_frames

__all__ = ["FAMILY", "MINIGRID_MODEL_VIEWS", "MISSION_KEY", "MiniGridFamily", "minigrid_actions",
           "minigrid_builtin_scorer", "scorer_frame_view"]

_ENV = "vlmrb_torchrl.envs.minigrid.env"
_POLICIES = "vlmrb_torchrl.envs.minigrid.policies"

#: Where the envs write each step's mission (uint8) when the scorer reads it, and what the recipe tells
#: ``builtin:minigrid`` to read (``mission_key=``).
MISSION_KEY = "mission"

#: The frames each built-in MiniGrid model was trained on: ``"grid"`` (the whole grid) or ``"agent"`` (the
#: agent-centred view, ``MiniGridEnv(frame_view="agent")``).
MINIGRID_MODEL_VIEWS = {"minigrid": "grid", "minigrid_goal": "grid", "minigrid_agent": "agent"}


def minigrid_builtin_scorer(env_id: str, *, seed: int = 0) -> str:
    """The built-in scorer ``scorer=auto`` picks for a MiniGrid / BabyAI env, from its missions
    (:func:`~vlmrb_torchrl.envs.minigrid.env.minigrid_missions`): ``builtin:minigrid`` (frames of the whole
    grid) when a mission is about reaching the goal (DoorKey, LavaCrossing, MultiRoom, LockedRoom, ...:
    where the agent stands in the grid is what counts, and the agent-centred view does not show the cell
    the agent stands on), else ``builtin:minigrid_agent`` (frames of the agent-centred view: what the agent
    faces, holds and has next to it, which whole-grid frames of 64 px do not show; go to / pick up / open
    / put next to). Measured on the family (the models' cards), the model it picks has the better mean F1
    of random and mission play on every held-out env and every training env but GoToObject-8x8 and PutNear.

    Examples:
        >>> minigrid_builtin_scorer("MiniGrid-DoorKey-5x5-v0"), minigrid_builtin_scorer("BabyAI-GoToLocal-v0")
        ('builtin:minigrid', 'builtin:minigrid_agent')
    """
    from vlmrb_torchrl.envs.minigrid.env import minigrid_missions

    goal = any(re.search(r"\bgoal\b", mission) for mission in minigrid_missions(env_id, seed=seed))
    return "builtin:minigrid" if goal else "builtin:minigrid_agent"


def scorer_frame_view(scorer: str) -> str | None:
    """The MiniGrid frames a ``builtin:`` or ``clip:<dir>`` scorer's model was trained on: ``"agent"``
    (the agent-centred view) for ``builtin:minigrid_agent`` and for models whose ``training.json``
    says so (``vlmrb build-scorer minigrid_agent``), ``"grid"`` for the other MiniGrid models, ``None``
    when it cannot tell (another domain's model, a hub id).

    Examples:
        >>> scorer_frame_view("builtin:minigrid_agent"), scorer_frame_view("builtin:minigrid"), scorer_frame_view("builtin:atari")
        ('agent', 'grid', None)
    """
    kind, _, rest = scorer.partition(":")
    if kind == "builtin":
        return MINIGRID_MODEL_VIEWS.get(rest or "minigrid")
    return rendered_frames(scorer).get("frame_view")


def minigrid_actions(env_id: str, actions: str) -> tuple[str, ...] | None:
    """The ``actions=`` of a MiniGrid env for the config value ``actions`` (auto | all | a,b,c);
    ``None`` (all actions) means the env's full action set.

    Examples:
        >>> minigrid_actions("MiniGrid-Empty-5x5-v0", "left, right,forward")
        ('left', 'right', 'forward')
        >>> minigrid_actions("MiniGrid-DoorKey-6x6-v0", "auto"), minigrid_actions("MiniGrid-Empty-5x5-v0", "auto")
        (('left', 'right', 'forward', 'pickup', 'toggle'), None)
    """
    if actions == "all":
        return None
    if actions == "auto":
        from vlmrb_torchrl.envs.minigrid.env import DOORKEY_ACTIONS

        return DOORKEY_ACTIONS if "DoorKey" in env_id else None
    return tuple(name.strip() for name in actions.split(",") if name.strip())


def _reads_mission(scorer: Any) -> bool:
    return scorer is not None and MISSION_KEY in list(getattr(scorer, "in_keys", []))


class MiniGridFamily(EnvFamily):
    """MiniGrid and BabyAI (:class:`~vlmrb_torchrl.envs.MiniGridEnv`): any ``MiniGrid-*`` or ``BabyAI-*`` id.

    Examples:
        >>> family = FAMILY
        >>> family.owns("BabyAI-GoToLocal-v0"), family.default_scorer("MiniGrid-DoorKey-5x5-v0")
        (True, 'builtin:minigrid')
    """

    name = "minigrid"
    title = "MiniGrid or BabyAI"
    id_prefixes = ("MiniGrid-", "BabyAI-")
    example_id = "MiniGrid-DoorKey-6x6-v0"
    recipe = "dqn"
    env_factory = f"{_ENV}:make_minigrid_env"
    batched_env = f"{_ENV}:BatchedMiniGridEnv"
    batched_collector = f"{_ENV}:BatchedMiniGridCollector"
    event_keys = f"{_ENV}:MINIGRID_EVENT_KEYS"
    # oracle:minigrid_goal: the VLM-RB paper's labels: its prompt asks for "a clear instance of goal
    # satisfaction", so only clips in which the agent reaches the goal are positive
    oracles = {"minigrid": ("next", "progress_event"), "minigrid_goal": ("next", "goal_reached")}
    builtin_scorers = ("minigrid", "minigrid_goal", "minigrid_agent")
    training_domains = {"minigrid": "vlmrb_torchrl.envs.minigrid.domain:minigrid_domain",
                        "minigrid_agent": "vlmrb_torchrl.envs.minigrid.domain:minigrid_agent_domain"}
    frame_states = {"MiniGridState": _POLICIES}
    policies = {"scripted": f"{_POLICIES}:DoorKeyPolicy", "mission": f"{_POLICIES}:MissionPolicy",
                "subgoal": f"{_POLICIES}:SubgoalPolicy"}
    # the DQN keys only MiniGrid reads, and what another family's run keeps them at
    owned_keys = {"actions": ("auto", "all"), "view": ("partial",)}
    frame_views = ("grid", "agent")
    has_missions = True

    def env_kwargs(self, cfg: Any, *, scorer: Any = None) -> dict[str, Any]:
        """The action subset, the observation's encoding and view, the scorer's frames, and the mission of each
        step when the scorer reads it (``builtin:minigrid`` on envs whose mission changes every episode)."""
        kwargs: dict[str, Any] = {"observation": cfg.observation, "view": cfg.view, "frame_view": cfg.frame_view}
        actions = minigrid_actions(cfg.env, cfg.actions)
        if actions is not None:
            kwargs = {"actions": actions, **kwargs}
        if _reads_mission(scorer):
            kwargs["write_mission"] = True
        return kwargs

    def scripted_policy(self, env: Any, name: str = "scripted", *, seed: int = 0, epsilon: float = 0.0,
                        burst_prob: float = 0.0) -> Any:
        """``scripted``: key -> door -> goal (layouts with a goal tile only: on others it has no task, and this
        raises instead of acting at random); ``mission``: follows the episode's mission; ``subgoal``: walks
        between random objects and interacts with them. ``epsilon`` / ``burst_prob`` go to all three."""
        policy = self.policy_class(name)
        if name == "scripted":
            env.reset()  # the layout decides: DoorKeyPolicy plays toward a goal tile
            if not any(obj is not None and obj.type == "goal" for obj in env.unwrapped.grid.grid):
                raise ValueError(f"the scripted policy (DoorKeyPolicy: key -> door -> goal) does not support env "
                                 f"{env.env_id!r}: its layout has no goal tile. Use the random or subgoal policy.")
        return policy(env, epsilon=epsilon, burst_prob=burst_prob, seed=seed)

    def known_ids(self) -> list[str] | None:
        from vlmrb_torchrl.envs.minigrid.env import _import_minigrid

        try:
            gymnasium, _ = _import_minigrid()
        except ImportError:
            return None
        return [env_id for env_id in gymnasium.registry if self.owns(env_id)]

    def default_scorer(self, env_id: str, *, seed: int = 0) -> str | None:
        try:
            return minigrid_builtin_scorer(env_id, seed=seed)
        except (ValueError, ImportError):  # an unknown id (or no minigrid): the env check says so
            return "builtin:minigrid"

    def scorer_frame_view(self, scorer: str) -> str | None:
        return scorer_frame_view(scorer)

    def scorer_task_kwargs(self, cfg: Any) -> dict[str, Any]:
        """What the recipe tells ``builtin:minigrid`` (and ``builtin:minigrid_agent``) about its task, so that its
        checks follow it (:mod:`vlmrb_torchrl.envs.minigrid.prompts`):

        - the env's mission as ``task=`` when every episode has the same one (DoorKey, Unlock, Empty,
          ...: one prompt set, derived from it);
        - ``mission_key="mission"`` when the mission changes from episode to episode (GoToObject,
          Fetch, most BabyAI levels, ...): the envs then write each step's mission (:meth:`env_kwargs`)
          and each clip is scored with its own mission's checks,

        plus ``doors=False`` when no layout of those episodes has a door (single rooms: GoToObj, PutNext,
        Fetch, LavaCrossing, ...), so that the door checks a mission only implies are left out. Nothing
        for other scorers, or when the config gives the scorer a prompt, a prompt set, a task or a mission
        key itself (or ``doors``). The first 8 episodes decide (seeds from ``cfg.seed``).
        """
        from vlmrb_torchrl.envs.minigrid.env import minigrid_has_doors, minigrid_missions
        from vlmrb_torchrl.envs.minigrid.prompts import MISSION_MODELS

        given = dict(cfg.scorer_kwargs or {})
        if cfg.scorer not in [f"builtin:{name}" for name in MISSION_MODELS] or cfg.prompt is not None or any(
                k in given for k in ("task", "prompt", "prompt_set", "mission_key")):
            return {}
        missions = minigrid_missions(cfg.env, seed=cfg.seed)
        told: dict[str, Any] = {"task": missions[0]} if len(missions) == 1 else {"mission_key": MISSION_KEY}
        if "doors" not in given and not minigrid_has_doors(cfg.env, seed=cfg.seed):
            told["doors"] = False
        return told


#: The family's record (:func:`~vlmrb_torchrl.envs.family.family_of` finds it).
FAMILY = MiniGridFamily()
