"""A scripted robosuite Lift agent and a reader of the scene's state, for data generation and rollouts.

Two things live here, both reading the robosuite env behind a
:class:`~vlmrb_torchrl.envs.RobosuiteEnv` (``env.unwrapped``):

- :class:`LiftPolicy` plays Lift with the default OSC pose controller (7-dim action: end-effector
  translation, rotation, gripper): it moves above the cube, descends, closes the gripper, lifts to
  a random height, holds, sometimes puts the cube down or drops it and starts again; per episode it
  draws a grasp offset (so some grasps miss and close beside the cube, some put a finger on its
  edge), a noise level and random bursts, and a share of its episodes wander at random (smoothed random actions, random gripper
  toggles). Called with a TensorDict it is a TorchRL policy for the env (``env.rollout(n, policy)``).
- :func:`lift_state` reads what a caption or an event detector needs to know: whether the gripper
  is open, whether it is near the cube, whether it grasps it (robosuite's ``_check_grasp``, the
  oracle's ``grasping``) and whether the cube is off the table (the oracle's ``lifted`` or
  ``success``).

robosuite is reached only through the env handed in: importing this module does not need it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from vlmrb_torchrl.envs._base import random_arm_action

__all__ = ["LiftPolicy", "LiftState", "lift_state", "GRIPPER_OPEN_WIDTH", "NEAR_DISTANCE"]

#: The gripper counts as open when its two fingers are this far apart (m): fully open is ~0.078, a
#: finger pair closed on the cube ~0.058, the reset pose ~0.042.
GRIPPER_OPEN_WIDTH = 0.065
#: The gripper counts as near the cube when its grip site is within this distance of the cube's centre (m).
NEAR_DISTANCE = 0.05

# OSC pose: an action of 1 moves the end effector by this much per control step (robosuite's default
# output_max of the position part)
_OSC_POS_STEP = 0.05
# (min, max) distance (m) of an off-centre grasp's aim from the cube's centre, per episode kind: "miss" closes
# beside the cube on nothing, "edge" puts a finger on its edge; other scripted episodes aim at the centre
_AIM_OFF_CENTRE = {"miss": (0.02, 0.04), "edge": (0.01, 0.02)}


@dataclasses.dataclass(frozen=True)
class LiftState:
    """What a caption or an event detector needs to know about one Lift state.

    Attributes:
        gripper_open (bool): the fingers are at least :data:`GRIPPER_OPEN_WIDTH` apart.
        near (bool): the grip site is within :data:`NEAR_DISTANCE` of the cube's centre.
        grasped (bool): robosuite's ``_check_grasp`` of the cube (the oracle's ``grasping``).
        lifted (bool): the cube is off the table: robosuite's success height (1 cm above its resting
            height) or the env's ``lifted`` flag (the oracle's ``success`` / ``lifted``).
    """

    gripper_open: bool
    near: bool
    grasped: bool
    lifted: bool

    @property
    def progress(self) -> bool:
        """The oracle's ``progress_event`` for this state: grasped or off the table."""
        return self.grasped or self.lifted


def _scene(env: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """(grip site position, cube position, finger opening) of the robosuite Lift env."""
    raw = env.unwrapped
    data, robot = raw.sim.data, raw.robots[0]
    eef = np.array(data.site_xpos[robot.eef_site_id["right"]])
    cube = np.array(data.body_xpos[raw.cube_body_id])
    fingers = data.qpos[robot._ref_gripper_joint_pos_indexes["right"]]
    return eef, cube, float(fingers[0] - fingers[1])


def lift_state(env: Any) -> LiftState:
    """The :class:`LiftState` of a :class:`~vlmrb_torchrl.envs.RobosuiteEnv` on Lift, now.

    Examples:
        >>> from vlmrb_torchrl.envs import RobosuiteEnv  # doctest: +SKIP
        >>> env = RobosuiteEnv("Lift", seed=0)  # doctest: +SKIP
        >>> _ = env.reset(); lift_state(env)  # doctest: +SKIP
        LiftState(gripper_open=False, near=False, grasped=False, lifted=False)
    """
    eef, cube, width = _scene(env)
    grasping, lifted, success = env.events()
    return LiftState(gripper_open=width >= GRIPPER_OPEN_WIDTH, near=bool(np.linalg.norm(eef - cube) < NEAR_DISTANCE),
                     grasped=grasping, lifted=lifted or success)

#: The random-motion episodes' scale of each action: the rotations (3-5) a fifth, translation and gripper whole.
_RANDOM_SCALE = np.array([1.0, 1.0, 1.0, 0.2, 0.2, 0.2, 1.0])


class LiftPolicy:
    """A scripted, noisy Lift agent: approach, descend, grasp, lift, hold, put down or drop, repeat.

    At :meth:`reset` (and at construction) it draws the episode's plan from its generator: with probability ``random_share`` the whole episode is random
    motion (an Ornstein-Uhlenbeck walk of the arm, the gripper toggled at random); otherwise the
    scripted cycle, with a grasp offset (``miss_share`` of the episodes aim 2-4 cm beside the
    cube and close on nothing, ``edge_share`` aim 1-2 cm off its centre, a finger on its edge),
    an action-noise level from ``noise`` and random bursts. Within
    the cycle the lift height (1-12 cm above the cube's start), the hold time and what follows
    (put the cube down and open, or open in the air and drop it) are drawn at each grasp.

    Args:
        env: the :class:`~vlmrb_torchrl.envs.RobosuiteEnv` (Lift) it acts in.

    Keyword Args:
        seed (int, optional): seeds every random choice. Defaults to ``0``.
        noise (tuple of float, optional): per-episode Gaussian action-noise levels to draw from.
            Defaults to ``(0.0, 0.1, 0.3)``.
        burst_prob (float, optional): probability per step of starting a burst of 3-15 random
            actions. Defaults to ``0.02``.
        random_share (float, optional): share of episodes of pure random motion. Defaults to ``0.2``.
        miss_share (float, optional): share of scripted episodes whose grasps aim beside the cube.
            Defaults to ``0.2``.
        edge_share (float, optional): share of scripted episodes whose grasps aim 1-2 cm off the
            cube's centre: a finger lands on the cube's edge, and the grasp pinches a corner, tilts
            the cube or slips off after a few steps, the brief, awkward grasps a noisy agent makes.
            Defaults to ``0.0``; ``miss_share + edge_share`` must be at most 1.

    Examples:
        >>> from vlmrb_torchrl.envs import RobosuiteEnv  # doctest: +SKIP
        >>> env = RobosuiteEnv("Lift", seed=0, max_episode_steps=80, terminate_on_success=False)  # doctest: +SKIP
        >>> rollout = env.rollout(80, LiftPolicy(env, seed=0, random_share=0.0, miss_share=0.0))  # doctest: +SKIP
        >>> bool(rollout["next", "grasping"].any())  # doctest: +SKIP
        True
    """

    def __init__(self, env: Any, *, seed: int = 0, noise: tuple[float, ...] = (0.0, 0.1, 0.3),
                 burst_prob: float = 0.02, random_share: float = 0.2, miss_share: float = 0.2,
                 edge_share: float = 0.0) -> None:
        if not (0.0 <= miss_share and 0.0 <= edge_share and miss_share + edge_share <= 1.0):
            raise ValueError(f"LiftPolicy: miss_share and edge_share must be >= 0 with a sum <= 1, got "
                             f"miss_share={miss_share!r}, edge_share={edge_share!r}.")
        self.env = env
        self.rng = np.random.default_rng(seed)
        self.noise_levels = tuple(noise)
        self.burst_prob = burst_prob
        self.random_share = random_share
        self.miss_share = miss_share
        self.edge_share = edge_share
        self._plan = self._new_plan()

    def reset(self) -> None:
        """Starts a new episode: draws its plan."""
        self._plan = self._new_plan()

    @property
    def mode(self) -> str:
        """The kind of the current episode as drawn at :meth:`reset`: ``"scripted"``, ``"miss"``
        (scripted, grasps aimed beside the cube), ``"edge"`` (scripted, grasps aimed at the cube's
        edge) or ``"random"``."""
        return self._plan["mode"]

    def _new_plan(self) -> dict[str, Any]:
        rng = self.rng
        mode = "random" if rng.random() < self.random_share else "scripted"
        if mode == "scripted":  # one draw for both: edge_share=0 leaves the draws (and episodes) as they were
            kind = rng.random()
            if kind < self.miss_share:
                mode = "miss"
            elif kind < self.miss_share + self.edge_share:
                mode = "edge"
        if mode in _AIM_OFF_CENTRE:
            angle = rng.uniform(0, 2 * np.pi)
            radius = rng.uniform(*_AIM_OFF_CENTRE[mode])
            offset = np.array([radius * np.cos(angle), radius * np.sin(angle), 0.0])
        else:
            offset = np.append(rng.normal(0.0, 0.004, 2), 0.0)
        return {"mode": mode, "offset": offset, "noise": float(rng.choice(self.noise_levels)),
                "phase": "approach", "timer": 0, "burst": 0, "ou": np.zeros(7), "gripper": -1.0,
                "height": 0.0, "z0": None}

    def _enter(self, phase: str, timer: int = 0) -> None:
        self._plan["phase"], self._plan["timer"] = phase, timer

    def act(self) -> np.ndarray:
        """The next action (float64 ``[7]`` in ``[-1, 1]``) for the env's current state."""
        plan, rng = self._plan, self.rng
        eef, cube, width = _scene(self.env)
        if plan["z0"] is None:
            plan["z0"] = float(cube[2])
        # mostly translation: large rotations turn the gripper away from the table
        action = random_arm_action(plan, rng, size=7, burst_prob=self.burst_prob, scale=_RANDOM_SCALE)
        if action is not None:
            return action
        target, gripper = self._scripted_target(eef, cube, width)
        action = np.zeros(7)
        action[:3] = np.clip((target - eef) / _OSC_POS_STEP * 2.0, -1.0, 1.0)
        action[6] = gripper
        action[:6] += plan["noise"] * rng.normal(size=6)
        return np.clip(action, -1.0, 1.0)

    def _scripted_target(self, eef: np.ndarray, cube: np.ndarray, width: float) -> tuple[np.ndarray, float]:
        plan, rng = self._plan, self.rng
        plan["timer"] += 1
        phase, grasp_point = plan["phase"], cube + plan["offset"] + np.array([0.0, 0.0, -0.005])
        if phase == "approach":  # above the cube, gripper open
            target = grasp_point + np.array([0.0, 0.0, 0.07])
            if np.linalg.norm(target - eef) < 0.015 or plan["timer"] > 60:
                self._enter("descend")
            return target, -1.0
        if phase == "descend":
            if np.linalg.norm(grasp_point - eef) < 0.01 or plan["timer"] > 40:
                self._enter("close")
            return grasp_point, -1.0
        if phase == "close":
            if plan["timer"] > 8:
                plan["height"] = float(rng.uniform(0.01, 0.12))
                self._enter("lift")
            return grasp_point, 1.0
        if phase == "lift":
            target = np.array([eef[0], eef[1], plan["z0"] + plan["height"]])
            if abs(target[2] - eef[2]) < 0.01 or plan["timer"] > 40:
                self._enter("hold", -int(rng.integers(0, 30)))
            return target, 1.0
        if phase == "hold":
            if plan["timer"] >= 0:
                self._enter("down" if rng.random() < 0.5 else "release")
            return eef, 1.0
        if phase == "down":  # put it back on the table, then open
            target = np.array([eef[0], eef[1], plan["z0"] - 0.005])
            if abs(target[2] - eef[2]) < 0.01 or plan["timer"] > 40:
                self._enter("release")
            return target, 1.0
        if phase == "release":
            if plan["timer"] > 8:
                self._enter("retreat")
            return eef, -1.0
        # retreat: up and somewhere else, then the next attempt (a new offset: some hit, some miss)
        if plan["timer"] == 1:
            plan["retreat"] = eef + np.array([*rng.uniform(-0.1, 0.1, 2), rng.uniform(0.05, 0.15)])
            plan["retreat_gripper"] = float(rng.choice((-1.0, 1.0)))
        if np.linalg.norm(plan["retreat"] - eef) < 0.02 or plan["timer"] > 30:
            if rng.random() < 0.5:  # a new aim for the next attempt
                fresh = self._new_plan()
                plan["offset"] = fresh["offset"] if fresh["mode"] != "random" else plan["offset"]
            self._enter("approach")
        return plan["retreat"], plan["retreat_gripper"]

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        return td.set("action", torch.as_tensor(self.act(), dtype=torch.float32))
