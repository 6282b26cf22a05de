"""A scripted OGBench Scene agent and a reader of the scene's state, for data generation and rollouts.

Two things live here, both reading the OGBench env behind a
:class:`~vlmrb_torchrl.envs.ogbench.env.SceneEnv` (``env.unwrapped``):

- :class:`ScenePolicy` plays Scene one *subtask* at a time (press a button, move the drawer or the
  window, carry the cube somewhere), each executed by OGBench's own scripted Markov oracles (the
  ones OGBench collects its datasets with), given targets of our choosing. A subtask is either
  the next step toward the task's goal (a small planner: unlock before moving, open the drawer
  before putting the cube in, lock last) or a random one; actions get per-episode Gaussian noise
  and random bursts, and a share of the episodes is random arm motion. Called with a TensorDict
  it is a TorchRL policy for the env (``env.rollout(n, policy)``).
- :func:`scene_state` reads what a caption needs to know: the task's subgoals (the cube on its
  target, each lock, the drawer and the window at their goal positions: what ``oracle:ogbench``
  watches), plus where the cube is and whether the gripper holds it.

OGBench is reached only through the env handed in: importing this module does not need it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from vlmrb_torchrl.envs._base import random_arm_action

__all__ = ["ScenePolicy", "SceneState", "scene_state", "DRAWER_OPEN", "WINDOW_OPEN", "GOAL_TOLERANCE"]

#: The drawer's open and the window's open slide positions (m): OGBench's goals; closed is 0 for both.
DRAWER_OPEN, WINDOW_OPEN = -0.16, 0.2
#: OGBench's tolerance for a slide at its goal position (m): the drawer is open within 4 cm of
#: :data:`DRAWER_OPEN`, closed within 4 cm of 0; in between it is half open.
GOAL_TOLERANCE = 0.04
# the cube's centre rests 2 cm above the table; in the closed drawer it rests at (0.33, -0.356, 0.066)
_CUBE_REST_Z = 0.02
_DRAWER_INSIDE_CLOSED = np.array([0.33, -0.356, 0.066])
_SUBTASK_STEPS = {"cube": 200, "button": 100, "drawer": 75, "window": 75}


def _slide(position: float, open_at: float) -> str:
    if abs(position - open_at) <= GOAL_TOLERANCE:
        return "open"
    if abs(position) <= GOAL_TOLERANCE:
        return "closed"
    return "half"


@dataclasses.dataclass(frozen=True)
class SceneState:
    """What a caption needs to know about one Scene state.

    Attributes:
        cube_on_target (bool): the cube is within 4 cm of the task's target for it (the cube
            subgoal; OGBench draws the cube lighter then).
        cube_place (str): ``"drawer"`` (inside the drawer), ``"air"`` (lifted off the table) or
            ``"table"``.
        cube_held (bool): the gripper's pads close on the cube.
        drawer (str): ``"open"``, ``"half"`` or ``"closed"`` (OGBench's 4 cm tolerance).
        window (str): ``"open"``, ``"half"`` or ``"closed"``.
        drawer_locked (bool): button 0 is in its locking state (the drawer's handle drawn red).
        window_locked (bool): button 1 is in its locking state.
        subgoals (tuple of bool): the five subgoals of the task
            (:data:`~vlmrb_torchrl.envs.ogbench.env.SCENE_SUBGOALS`), as the oracle sees them.
    """

    cube_on_target: bool
    cube_place: str
    cube_held: bool
    drawer: str
    window: str
    drawer_locked: bool
    window_locked: bool
    subgoals: tuple[bool, ...]


def _drawer_inside(raw) -> np.ndarray:
    """The centre of the drawer's inside (where a cube rests in it) for the drawer's current position."""
    joint = raw._model.joint("drawer_slide").id
    return _DRAWER_INSIDE_CLOSED + raw._data.joint("drawer_slide").qpos[0] * raw._data.xaxis[joint]


def scene_state(env: Any) -> SceneState:
    """The :class:`SceneState` of a :class:`~vlmrb_torchrl.envs.ogbench.env.SceneEnv`, now.

    Examples:
        >>> from vlmrb_torchrl.envs.ogbench.env import SceneEnv  # doctest: +SKIP
        >>> env = SceneEnv(1, seed=0); _ = env.reset()  # doctest: +SKIP
        >>> scene_state(env).drawer, scene_state(env).drawer_locked  # doctest: +SKIP
        ('closed', False)
    """
    raw = env.unwrapped
    data = raw._data
    cube = data.joint("object_joint_0").qpos[:3].copy()
    inside = _drawer_inside(raw)
    in_drawer = bool(np.all(np.abs(cube[:2] - inside[:2]) < (0.09, 0.08)) and 0.04 < cube[2] < 0.1)
    place = "drawer" if in_drawer else "air" if cube[2] > _CUBE_REST_Z + 0.015 else "table"
    pinch = data.site_xpos[raw._pinch_site_id]
    closed = data.qpos[raw._gripper_opening_joint_id] / 0.8 > 0.2  # the fingers moved in from fully open
    pads = np.linalg.norm(data.body("ur5e/robotiq/right_pad").cfrc_ext) > 1.0
    held = bool(closed and pads and np.linalg.norm(pinch - cube) < 0.025)
    buttons = raw._cur_button_states
    subgoals = tuple(bool(s) for s in env.satisfied())
    return SceneState(cube_on_target=subgoals[0], cube_place=place, cube_held=held,
                      drawer=_slide(float(data.joint("drawer_slide").qpos[0]), DRAWER_OPEN),
                      window=_slide(float(data.joint("window_slide").qpos[0]), WINDOW_OPEN),
                      drawer_locked=bool(buttons[0] == 0), window_locked=bool(buttons[1] == 0), subgoals=subgoals)


class ScenePolicy:
    """A scripted, noisy Scene agent: subtasks toward the task's goal or at random, run by OGBench's oracles.

    At :meth:`reset` (and at construction) it draws the episode's plan from its generator: with
    probability ``random_share`` the whole episode is random arm motion (an Ornstein-Uhlenbeck
    walk, the gripper toggled at random); otherwise subtasks, each the next step toward the task's
    goal with probability ``goal_share`` (the episode's value is drawn from ``goal_shares``) and a
    random one else: press a button, move the drawer or the window to open, closed or half open,
    carry the cube to a random spot on the table, into the open drawer or onto its target. Each
    subtask runs OGBench's Markov oracle for it until the oracle is done (or a time limit), with
    the episode's Gaussian action noise (``noise``) and random bursts.

    Args:
        env: the :class:`~vlmrb_torchrl.envs.ogbench.env.SceneEnv` it acts in.

    Keyword Args:
        seed (int, optional): seeds every random choice. Defaults to ``0``.
        noise (tuple of float, optional): per-episode action-noise levels to draw from. Defaults to
            ``(0.0, 0.1, 0.2)``.
        burst_prob (float, optional): probability per step of starting a burst of 3-15 random
            actions. Defaults to ``0.01``.
        random_share (float, optional): share of episodes of pure random motion. Defaults to ``0.1``.
        goal_shares (tuple of float, optional): per-episode shares of goal-directed subtasks to draw
            from. Defaults to ``(0.3, 0.6, 0.9)``.

    Examples:
        >>> from vlmrb_torchrl.envs.ogbench.env import SceneEnv  # doctest: +SKIP
        >>> env = SceneEnv(1, seed=0, max_episode_steps=300)  # doctest: +SKIP
        >>> policy = ScenePolicy(env, seed=0, random_share=0.0, goal_shares=(1.0,), noise=(0.0,))  # doctest: +SKIP
        >>> bool(env.rollout(300, policy)["next", "success"].any())  # doctest: +SKIP
        True
    """

    def __init__(self, env: Any, *, seed: int = 0, noise: tuple[float, ...] = (0.0, 0.1, 0.2),
                 burst_prob: float = 0.01, random_share: float = 0.1,
                 goal_shares: tuple[float, ...] = (0.3, 0.6, 0.9)) -> None:
        from ogbench.manipspace.oracles.markov.button_markov import ButtonMarkovOracle
        from ogbench.manipspace.oracles.markov.cube_markov import CubeMarkovOracle
        from ogbench.manipspace.oracles.markov.drawer_markov import DrawerMarkovOracle
        from ogbench.manipspace.oracles.markov.window_markov import WindowMarkovOracle

        self.env = env
        self.rng = np.random.default_rng(seed)
        self.noise_levels = tuple(noise)
        self.burst_prob = burst_prob
        self.random_share = random_share
        self.goal_shares = tuple(goal_shares)
        # OGBench's dataset settings for Scene: cube oracle capped at 100 steps, min_norm 0.4
        self._oracles = {"cube": CubeMarkovOracle(env=env, min_norm=0.4, max_step=100),
                         "button": ButtonMarkovOracle(env=env, min_norm=0.4),
                         "drawer": DrawerMarkovOracle(env=env, min_norm=0.4),
                         "window": WindowMarkovOracle(env=env, min_norm=0.4)}
        self._plan = self._new_plan()

    def reset(self) -> None:
        """Starts a new episode: draws its plan."""
        self._plan = self._new_plan()

    @property
    def mode(self) -> str:
        """The kind of the current episode: ``"subtasks"`` or ``"random"``."""
        return self._plan["mode"]

    @property
    def subtask(self) -> tuple | None:
        """The subtask under way: ``("button", b, state)``, ``("drawer", pos)``, ``("window", pos)``,
        ``("cube", xyz)``, or ``None``."""
        return self._plan["subtask"]

    def _new_plan(self) -> dict[str, Any]:
        rng = self.rng
        return {"mode": "random" if rng.random() < self.random_share else "subtasks",
                "noise": float(rng.choice(self.noise_levels)), "goal_share": float(rng.choice(self.goal_shares)),
                "subtask": None, "timer": 0, "burst": 0, "ou": np.zeros(5), "gripper": -1.0}

    # --------------------------------------------------------------------------------- subtasks
    def _goal_subtask(self) -> tuple | None:
        """The next step toward the task's goal (``None``: solved)."""
        raw = self.env.unwrapped
        state = scene_state(self.env)
        goal = raw.cur_task_info["goal"]
        buttons = raw._cur_button_states
        cube_ok, button0_ok, button1_ok, drawer_ok, window_ok = state.subgoals
        target = np.asarray(goal["block_xyzs"][0], dtype=np.float64)
        in_drawer_goal = target[2] > 0.04
        if not cube_ok and not (in_drawer_goal and state.cube_place == "drawer"):
            if in_drawer_goal:
                if state.drawer != "open":
                    return ("button", 0, 1) if buttons[0] == 0 else ("drawer", DRAWER_OPEN)
                return ("cube", _drawer_inside(raw))
            return ("cube", target)
        for name, ok, button, goal_pos in (("drawer", drawer_ok, 0, goal["drawer_pos"]),
                                           ("window", window_ok, 1, goal["window_pos"])):
            if not ok:
                return ("button", button, 1) if buttons[button] == 0 else (name, float(goal_pos))
        for button, ok in ((0, button0_ok), (1, button1_ok)):
            if not ok:
                return ("button", button, int(goal["button_states"][button]))
        return None

    def _random_subtask(self) -> tuple:
        raw, rng = self.env.unwrapped, self.rng
        kind = rng.choice(("button", "drawer", "window", "cube"), p=(0.25, 0.2, 0.2, 0.35))
        if kind == "button":
            button = int(rng.integers(2))
            return ("button", button, int(1 - raw._cur_button_states[button]))
        if kind in ("drawer", "window"):
            open_at = DRAWER_OPEN if kind == "drawer" else WINDOW_OPEN
            return (str(kind), float(rng.choice((open_at, 0.0, rng.uniform(0.2, 0.8) * open_at))))
        where = rng.random()
        if where < 0.25:
            return ("cube", np.asarray(raw.cur_task_info["goal"]["block_xyzs"][0], dtype=np.float64))
        if where < 0.6 and scene_state(self.env).drawer == "open":
            return ("cube", _drawer_inside(raw))
        return ("cube", np.array([*rng.uniform(*raw._object_sampling_bounds), _CUBE_REST_Z]))

    def _start(self, subtask: tuple) -> None:
        raw = self.env.unwrapped
        oracle = self._oracles[subtask[0]]
        oracle.reset(None, None)
        # OGBench's oracles draw where the arm goes afterwards from NumPy's global generator: ours instead
        oracle._final_pos = self.rng.uniform(*raw._arm_sampling_bounds)
        oracle._final_yaw = self.rng.uniform(-np.pi, np.pi)
        self._plan.update(subtask=subtask, timer=0)

    def _info(self, subtask: tuple) -> dict[str, Any]:
        """OGBench's observation info plus the targets its oracles read (as in its data collection)."""
        raw = self.env.unwrapped
        data, model = raw._data, raw._model
        info = raw.compute_ob_info()
        kind = subtask[0]
        if kind == "cube":
            info["privileged/target_block"] = 0
            info["privileged/target_block_pos"] = np.asarray(subtask[1], dtype=np.float64)
            info["privileged/target_block_yaw"] = info["privileged/block_0_yaw"]
        elif kind == "button":
            info["privileged/target_button"] = subtask[1]
            info["privileged/target_button_state"] = subtask[2]
            info["privileged/target_button_top_pos"] = data.site_xpos[raw._button_site_ids[subtask[1]]].copy()
        else:  # the handle where the slide puts it at the target position
            joint = f"{kind}_slide"
            shift = (subtask[1] - data.joint(joint).qpos[0]) * data.xaxis[model.joint(joint).id]
            info[f"privileged/target_{kind}_handle_pos"] = info[f"privileged/{kind}_handle_pos"] + shift
        return info

    # --------------------------------------------------------------------------------- acting
    def act(self) -> np.ndarray:
        """The next action (float64 ``[5]`` in ``[-1, 1]``) for the env's current state."""
        plan, rng = self._plan, self.rng
        action = random_arm_action(plan, rng, size=5, burst_prob=self.burst_prob)
        if action is not None:
            return action
        subtask = plan["subtask"]
        if subtask is None or self._oracles[subtask[0]].done or plan["timer"] >= _SUBTASK_STEPS[subtask[0]]:
            subtask = self._goal_subtask() if rng.random() < plan["goal_share"] else None
            self._start(subtask or self._random_subtask())
            subtask = plan["subtask"]
        plan["timer"] += 1
        action = np.asarray(self._oracles[subtask[0]].select_action(None, self._info(subtask)), dtype=np.float64)
        action = action + plan["noise"] * rng.normal(size=5)
        return np.clip(action, -1.0, 1.0)

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        return td.set("action", torch.as_tensor(self.act(), dtype=torch.float32))
