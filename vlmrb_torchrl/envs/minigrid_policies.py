"""Scripted MiniGrid agents and a reader of the grid's state, for data generation and rollouts.

Two things live here, both reading the *raw* MiniGrid env (``MiniGridEnv.unwrapped``):

- :class:`DoorKeyPolicy` plays DoorKey-like tasks by breadth-first search: fetch the key,
  open the locked door, walk onto the goal; :class:`SubgoalPolicy` wanders between random
  objects of any MiniGrid layout (picking them up, dropping them, toggling doors and boxes).
  Both take ε-random actions and random bursts from a seeded generator, so they produce the
  near-miss states a learning agent produces. Called with a TensorDict they are TorchRL
  policies for :class:`~vlmrb_torchrl.envs.MiniGridEnv` (``env.rollout(n, policy)``).
- :func:`minigrid_state` reads what a caption or an event detector needs to know: what the
  agent holds, where keys and doors are and in which state, what the agent faces, how far the
  goal is, which room it is in.

minigrid is imported only through the env objects handed in: importing this module needs
neither gymnasium nor minigrid.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

__all__ = ["DoorKeyPolicy", "SubgoalPolicy", "MiniGridState", "minigrid_state"]

# MiniGrid's action values (minigrid.core.actions.Actions), fixed by the library
_LEFT, _RIGHT, _FORWARD, _PICKUP, _DROP, _TOGGLE, _DONE = range(7)
_ACTION_NAMES = ("left", "right", "forward", "pickup", "drop", "toggle", "done")
# agent_dir -> (dx, dy): 0 east, 1 south, 2 west, 3 north (minigrid.core.constants.DIR_TO_VEC)
_DIR_VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))


def _raw(env: Any) -> Any:
    """The raw minigrid env behind a package MiniGridEnv, a gymnasium wrapper, or the raw env."""
    return getattr(env, "unwrapped", env)


def _passable(obj: Any) -> bool:
    # empty cells, goals, floors and open doors; lava can be overlapped but kills: not a path
    return obj is None or (obj.can_overlap() and obj.type != "lava")


def _find(menv: Any, kind: str) -> list[tuple[int, int, Any]]:
    grid = menv.grid
    return [(i % grid.width, i // grid.width, o) for i, o in enumerate(grid.grid) if o is not None and o.type == kind]


@dataclasses.dataclass(frozen=True)
class MiniGridState:
    """What a caption or an event detector needs to know about one MiniGrid state.

    Attributes:
        carrying (tuple of str or None): ``(colour, type)`` of the carried object, e.g.
            ``("yellow", "key")``; ``None`` when the agent's hands are empty.
        floor_objects (tuple): ``(colour, type)`` of every key, ball and box on the grid.
        doors (tuple): ``(colour, state)`` of every door, state ``"locked"``, ``"closed"``
            (closed, unlocked) or ``"open"``.
        front (tuple or None): ``(colour, type, state)`` of the cell the agent faces: type
            ``"wall"``, ``"door"``, ``"key"``, ``"ball"``, ``"box"``, ``"goal"``, ``"lava"``,
            ...; state is the door state for doors, else ``""``; ``None`` for an empty cell.
        on_goal (bool): the agent stands on a goal tile.
        goal_distance (int or None): Manhattan distance to the nearest goal tile (``None``
            without a goal).
        room (str or None): for layouts split by one wall column holding one door (DoorKey):
            ``"left"``, ``"doorway"`` or ``"right"``; ``None`` elsewhere.
    """

    carrying: tuple[str, str] | None
    floor_objects: tuple[tuple[str, str], ...]
    doors: tuple[tuple[str, str], ...]
    front: tuple[str, str, str] | None
    on_goal: bool
    goal_distance: int | None
    room: str | None

    @property
    def faces_goal(self) -> bool:
        """The agent faces a goal tile (one forward step reaches it)."""
        return self.front is not None and self.front[1] == "goal"

    @property
    def next_to_goal(self) -> bool:
        """A goal tile is one cell away (facing it or not)."""
        return self.goal_distance == 1


def _door_state(door: Any) -> str:
    return "open" if door.is_open else ("locked" if door.is_locked else "closed")


def minigrid_state(env: Any) -> MiniGridState:
    """Reads the state of a MiniGrid env (package :class:`~vlmrb_torchrl.envs.MiniGridEnv`, a
    gymnasium-wrapped or a raw minigrid env).

    Args:
        env: the env; its ``unwrapped`` attribute (if any) is the raw minigrid env.

    Returns:
        MiniGridState: the carried object, objects and doors on the floor, the faced cell,
        goal distance and room.

    Examples:
        >>> from vlmrb_torchrl.envs import MiniGridEnv
        >>> env = MiniGridEnv("MiniGrid-DoorKey-5x5-v0", seed=0, render=False)
        >>> _ = env.reset()
        >>> state = minigrid_state(env)
        >>> state.carrying, state.doors, state.floor_objects
        (None, (('yellow', 'locked'),), (('yellow', 'key'),))
        >>> state.on_goal, state.room
        (False, 'left')
    """
    menv = _raw(env)
    grid = menv.grid
    ax, ay = int(menv.agent_pos[0]), int(menv.agent_pos[1])
    carried = menv.carrying
    carrying = None if carried is None else (carried.color, carried.type)
    floor, doors, goals = [], [], []
    door_cells = []
    for i, obj in enumerate(grid.grid):
        if obj is None:
            continue
        if obj.type in ("key", "ball", "box"):
            floor.append((obj.color, obj.type))
        elif obj.type == "door":
            doors.append((obj.color, _door_state(obj)))
            door_cells.append((i % grid.width, i // grid.width))
        elif obj.type == "goal":
            goals.append((i % grid.width, i // grid.width))
    dx, dy = _DIR_VEC[int(menv.agent_dir)]
    fx, fy = ax + dx, ay + dy
    front = None
    if 0 <= fx < grid.width and 0 <= fy < grid.height:
        f = grid.get(fx, fy)
        if f is not None:
            front = (f.color, f.type, _door_state(f) if f.type == "door" else "")
    here = grid.get(ax, ay)
    on_goal = here is not None and here.type == "goal"
    goal_distance = min((abs(gx - ax) + abs(gy - ay) for gx, gy in goals), default=None)
    room = None
    if len(door_cells) == 1:
        door_x, door_y = door_cells[0]
        # a DoorKey-style splitting wall: the door's column is wall from top to bottom
        column = [grid.get(door_x, y) for y in range(grid.height)]
        if all(o is not None and o.type in ("wall", "door") for o in column):
            room = "left" if ax < door_x else ("doorway" if ax == door_x else "right")
    return MiniGridState(carrying, tuple(floor), tuple(doors), front, on_goal, goal_distance, room)


class _ScriptedPolicy:
    """Shared machinery: BFS navigation, ε-random actions and bursts, the TorchRL call."""

    def __init__(
        self,
        env: Any = None,
        *,
        epsilon: float = 0.0,
        burst_prob: float = 0.0,
        burst_len: tuple[int, int] = (2, 8),
        seed: int | None = None,
    ) -> None:
        if not 0.0 <= epsilon <= 1.0 or not 0.0 <= burst_prob <= 1.0:
            raise ValueError(
                f"{type(self).__name__}: epsilon and burst_prob must be in [0, 1], got epsilon={epsilon!r}, "
                f"burst_prob={burst_prob!r}."
            )
        lo, hi = burst_len
        if not 1 <= lo <= hi:
            raise ValueError(f"{type(self).__name__}.burst_len must be (lo, hi) with 1 <= lo <= hi, got {burst_len!r}.")
        self.envs = [] if env is None else (list(env) if isinstance(env, (list, tuple)) else [env])
        self.epsilon = float(epsilon)
        self.burst_prob = float(burst_prob)
        self.burst_len = (int(lo), int(hi))
        self.rng = np.random.default_rng(seed)
        self._burst: dict[int, int] = {}

    # ------------------------------------------------------------------ acting
    def plan(self, menv: Any) -> int | None:
        """The scripted (noise-free) MiniGrid action value, or ``None`` for "act randomly"."""
        raise NotImplementedError

    def act(self, env: Any, allowed: Sequence[int] | None = None) -> int:
        """One MiniGrid action value (``minigrid.core.actions.Actions``) for ``env``'s current state.

        Args:
            env: a package MiniGridEnv, a wrapped or a raw minigrid env.
            allowed (sequence of int, optional): action values random actions are drawn from
                (the scripted action is always one of left/right/forward/pickup/drop/toggle).
                Defaults to all six of them.
        """
        menv = _raw(env)
        allowed = list(allowed) if allowed is not None else [_LEFT, _RIGHT, _FORWARD, _PICKUP, _DROP, _TOGGLE]
        key = id(menv)
        left = self._burst.get(key, 0)
        if left == 0 and self.burst_prob > 0 and self.rng.random() < self.burst_prob:
            left = int(self.rng.integers(self.burst_len[0], self.burst_len[1] + 1))
        if left > 0:
            self._burst[key] = left - 1
            return int(allowed[self.rng.integers(len(allowed))])
        action = None
        if not (self.epsilon > 0 and self.rng.random() < self.epsilon):
            action = self.plan(menv)
        if action is None or action not in allowed:
            action = int(allowed[self.rng.integers(len(allowed))])
        return int(action)

    def reset(self) -> None:
        """Forgets ongoing random bursts (call between episodes for independent episodes)."""
        self._burst.clear()

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """TorchRL policy: writes ``"action"`` (the index into each env's ``action_names``).

        The policy reads the raw state of the env(s) given at construction, so ``tensordict``
        must be the current step of those env(s) (as in ``env.rollout(n, policy)``); a batch
        ``[N]`` maps to the ``N`` envs given in order.
        """
        if not self.envs:
            raise RuntimeError(
                f"{type(self).__name__} was built without env=: pass the MiniGridEnv(s) it acts in to use it as "
                "a TorchRL policy, or call act(env) yourself."
            )
        n = 1 if tensordict.batch_dims == 0 else tensordict.batch_size.numel()
        if n != len(self.envs):
            raise ValueError(f"{type(self).__name__}: a batch of {n} steps for {len(self.envs)} envs.")
        actions = []
        for env in self.envs:
            names = getattr(env, "action_names", list(_ACTION_NAMES))
            values = [_ACTION_NAMES.index(a) for a in names]
            actions.append(values.index(self.act(env, allowed=values)))
        action = torch.tensor(actions, dtype=torch.int64)
        tensordict.set("action", action.reshape(tensordict.batch_size) if tensordict.batch_dims else action[0])
        return tensordict

    # -------------------------------------------------------------- navigation
    def _toward(self, menv: Any, targets: set[tuple[int, int]], *, enter: bool) -> int | None:
        """The action that moves toward (``enter=True``: onto) one of ``targets``, or that
        faces it from a neighbouring cell (``enter=False``); ``0``-cost result ``None`` when
        already facing it (interaction is the caller's business) or unreachable."""
        grid = menv.grid
        start = (int(menv.agent_pos[0]), int(menv.agent_pos[1]))
        d = int(menv.agent_dir)
        front = (start[0] + _DIR_VEC[d][0], start[1] + _DIR_VEC[d][1])
        if not enter and front in targets:
            return None
        if not enter:
            goals = {
                (tx + dx, ty + dy)
                for tx, ty in targets
                for dx, dy in _DIR_VEC
                if 0 <= tx + dx < grid.width and 0 <= ty + dy < grid.height
            }
        else:
            goals = set(targets)
        if start in goals and not enter:
            # standing next to a target: turn toward it
            tx, ty = next((tx, ty) for tx, ty in targets if abs(tx - start[0]) + abs(ty - start[1]) == 1)
            return self._turn(d, _DIR_VEC.index((tx - start[0], ty - start[1])))
        parent = {start: None}
        queue = deque([start])
        found = None
        while queue:
            cell = queue.popleft()
            if cell in goals and cell != start:
                found = cell
                break
            for dx, dy in _DIR_VEC:
                nxt = (cell[0] + dx, cell[1] + dy)
                if nxt in parent or not (0 <= nxt[0] < grid.width and 0 <= nxt[1] < grid.height):
                    continue
                if not _passable(grid.get(*nxt)):
                    continue
                parent[nxt] = cell
                queue.append(nxt)
        if found is None:
            return None
        while parent[found] != start:
            found = parent[found]
        want = _DIR_VEC.index((found[0] - start[0], found[1] - start[1]))
        return _FORWARD if want == d else self._turn(d, want)

    def _turn(self, d: int, want: int) -> int:
        diff = (want - d) % 4
        if diff == 0:
            return _FORWARD
        if diff == 1:
            return _RIGHT
        if diff == 3:
            return _LEFT
        return _RIGHT if self.rng.random() < 0.5 else _LEFT


class DoorKeyPolicy(_ScriptedPolicy):
    """Scripted DoorKey agent: BFS to the key, pick it up, open the door, walk onto the goal.

    Works on any layout with keys, doors and a goal (DoorKey of every size, LockedRoom-like
    grids): it fetches a key when a locked door is on the grid and it holds none, opens the
    nearest closed or locked door when the goal is not reachable, then walks onto the goal.
    With ``epsilon`` it takes a uniformly random action instead of the scripted one; with
    ``burst_prob`` it starts a burst of ``burst_len`` random actions (uniform in the range),
    which gives the near misses a learning agent produces (walking away with the key, turning
    next to the goal, re-closing a door). All randomness comes from one seeded generator.

    Args:
        env (MiniGridEnv or list of them, optional): the env(s) it acts in as a TorchRL
            policy (``policy(td)`` writes ``"action"``). Not needed for :meth:`act`.

    Keyword Args:
        epsilon (float, optional): probability of a random action per step. Defaults to ``0``.
        burst_prob (float, optional): probability per step of starting a random burst.
            Defaults to ``0``.
        burst_len (tuple of int, optional): ``(min, max)`` burst length. Defaults to ``(2, 8)``.
        seed (int, optional): seed of the policy's generator. Defaults to ``None``.

    Examples:
        >>> from vlmrb_torchrl.envs import MiniGridEnv, DOORKEY_ACTIONS
        >>> env = MiniGridEnv("MiniGrid-DoorKey-6x6-v0", seed=3, render=False, actions=DOORKEY_ACTIONS)
        >>> rollout = env.rollout(100, DoorKeyPolicy(env, seed=0))
        >>> [int(rollout["next", k].nonzero()[0, 0]) for k in ("key_picked_up", "door_opened", "goal_reached")]
        [2, 9, 15]
        >>> bool(rollout["next", "success"][-1])
        True
    """

    def plan(self, menv: Any) -> int | None:
        carrying = menv.carrying
        locked = [(x, y, o) for x, y, o in _find(menv, "door") if o.is_locked]
        if locked and (carrying is None or carrying.type != "key"):
            keys = {(x, y) for x, y, o in _find(menv, "key")}
            if keys:
                if carrying is not None:  # hands full: put the object down first
                    return _DROP if self._front_free(menv) else _LEFT
                step = self._toward(menv, keys, enter=False)
                return _PICKUP if step is None else step
        goals = {(x, y) for x, y, _ in _find(menv, "goal")}
        if goals:
            step = self._toward(menv, goals, enter=True)
            if step is not None:
                return step
        doors = {(x, y) for x, y, o in _find(menv, "door") if not o.is_open}
        if doors:
            step = self._toward(menv, doors, enter=False)
            return _TOGGLE if step is None else step
        return None

    @staticmethod
    def _front_free(menv: Any) -> bool:
        fx, fy = menv.front_pos
        return menv.grid.get(int(fx), int(fy)) is None


class SubgoalPolicy(_ScriptedPolicy):
    """Wanders between random objects of any MiniGrid layout and interacts with them.

    Picks a random target among keys, balls, boxes, doors and goals; walks to it (BFS); picks
    up a key/ball (dropping what it holds first, sometimes), toggles a door or box, or steps
    onto a goal; then picks a new target. With ``epsilon``/``burst_prob`` it acts randomly as
    :class:`DoorKeyPolicy` does. Used to cover states of layouts without a scripted solution
    (holding a ball, facing a box, opening several doors).

    Args, Keyword Args: as :class:`DoorKeyPolicy`.

    Examples:
        >>> from vlmrb_torchrl.envs import MiniGridEnv
        >>> env = MiniGridEnv("MiniGrid-Fetch-5x5-N2-v0", seed=0, render=False)
        >>> policy = SubgoalPolicy(env, seed=0)
        >>> rollout = env.rollout(40, policy, break_when_any_done=False)
        >>> rollout.batch_size
        torch.Size([40])
    """

    def __init__(self, env: Any = None, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self._target: dict[int, tuple[int, int] | None] = {}

    def reset(self) -> None:
        super().reset()
        self._target.clear()

    def plan(self, menv: Any) -> int | None:
        key = id(menv)
        target = self._target.get(key)
        grid = menv.grid
        if target is not None:
            obj = grid.get(*target)
            if obj is None or (obj.type == "door" and obj.is_open and self.rng.random() < 0.5):
                target = None
        if target is None:
            candidates = [
                (x, y)
                for kind in ("key", "ball", "box", "door", "goal")
                for x, y, _ in _find(menv, kind)
            ]
            if not candidates:
                return None
            target = candidates[self.rng.integers(len(candidates))]
            self._target[key] = target
        obj = grid.get(*target)
        enter = obj.type == "goal"
        step = self._toward(menv, {target}, enter=enter)
        if step is not None:
            return step
        if enter:  # on the goal or unreachable: pick another target next time
            self._target[key] = None
            return None
        self._target[key] = None
        if obj.type in ("key", "ball"):
            if menv.carrying is not None:
                return None  # random action: sometimes a drop, sometimes a turn
            return _PICKUP
        if obj.type == "door" and obj.is_locked and (menv.carrying is None or menv.carrying.type != "key"):
            return None
        return _TOGGLE
