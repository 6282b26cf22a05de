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
import heapq
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

__all__ = ["DoorKeyPolicy", "MissionPolicy", "SubgoalPolicy", "MiniGridState", "minigrid_state"]

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
        adjacent (tuple): the pairs of objects side by side (a key, ball or box next to another
            one or to a door; four-neighbourhood), each pair ``((colour, type), (colour, type))``
            in sorted order, the pairs sorted.
    """

    carrying: tuple[str, str] | None
    floor_objects: tuple[tuple[str, str], ...]
    doors: tuple[tuple[str, str], ...]
    front: tuple[str, str, str] | None
    on_goal: bool
    goal_distance: int | None
    room: str | None
    adjacent: tuple[tuple[tuple[str, str], tuple[str, str]], ...] = ()

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
    adjacent = set()
    for i, obj in enumerate(grid.grid):
        if obj is None:
            continue
        if obj.type in ("key", "ball", "box"):
            floor.append((obj.color, obj.type))
            x, y = i % grid.width, i // grid.width
            for dx, dy in ((1, 0), (0, 1)):  # right and below: each pair once...
                other = grid.get(x + dx, y + dy) if x + dx < grid.width and y + dy < grid.height else None
                if other is not None and other.type in ("key", "ball", "box", "door"):
                    adjacent.add(tuple(sorted(((obj.color, obj.type), (other.color, other.type)))))
            for dx, dy in ((-1, 0), (0, -1)):  # ...and doors left and above
                other = grid.get(x + dx, y + dy) if x + dx >= 0 and y + dy >= 0 else None
                if other is not None and other.type == "door":
                    adjacent.add(tuple(sorted(((obj.color, obj.type), (other.color, other.type)))))
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
    return MiniGridState(carrying, tuple(floor), tuple(doors), front, on_goal, goal_distance, room,
                         tuple(sorted(adjacent)))


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

    @staticmethod
    def _front_free(menv: Any) -> bool:
        fx, fy = int(menv.front_pos[0]), int(menv.front_pos[1])
        grid = menv.grid
        return 0 <= fx < grid.width and 0 <= fy < grid.height and grid.get(fx, fy) is None

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


class MissionPolicy(_ScriptedPolicy):
    """Scripted agent for any MiniGrid / BabyAI mission the parser reads: follows the mission.

    It parses the env's mission (:func:`~vlmrb_torchrl.envs.minigrid.missions.parse_mission`)
    at each new episode and follows it with its own
    :class:`~vlmrb_torchrl.envs.minigrid.missions.MissionTracker`: the next sub-goal of the
    mission (in its order) decides what it does. Go to: walk until it faces a matching object
    (then ``done``, which MiniGrid's GoTo tasks reward); pick up: put down what it holds, walk to
    the object, pick it up; open: fetch the key of a locked door first; put next to: carry the
    object to a free cell next to the fixed one and drop it; reach: walk onto the goal. Its paths
    (breadth-first, full view of the grid) go through closed doors (it opens them), through
    locked ones once it holds their key (it fetches it when a locked door is the only way), and
    past objects in the way (it picks them up and puts them down elsewhere). A mission it cannot
    parse, or a finished one, gives random actions. ``epsilon`` / ``burst_prob`` add random
    actions and bursts as for :class:`DoorKeyPolicy`.

    Args, Keyword Args: as :class:`DoorKeyPolicy`.

    Examples:
        >>> from vlmrb_torchrl.envs import MiniGridEnv
        >>> env = MiniGridEnv("BabyAI-PutNextLocal-v0", seed=1, render=False)
        >>> rollout = env.rollout(200, MissionPolicy(env, seed=0))
        >>> env.mission, bool(rollout["next", "success"][-1])
        ('put the yellow key next to the purple box', True)
    """

    def __init__(self, env: Any = None, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self._trackers: dict[int, tuple[Any, Any, Any]] = {}  # id(menv) -> (grid, tracker, step_count)
        self._dropping: dict[int, int] = {}  # id(menv) -> turns made while putting down what it holds

    def reset(self) -> None:
        super().reset()
        self._trackers.clear()
        self._dropping.clear()

    def _tracker(self, menv: Any):
        from vlmrb_torchrl.envs.minigrid.missions import MissionTracker, parse_mission

        entry = self._trackers.get(id(menv))
        if entry is None or entry[0] is not menv.grid or menv.step_count < entry[2]:  # a new episode
            mission = parse_mission(menv.mission)
            tracker = None if mission is None else MissionTracker(mission)
            if tracker is not None:
                tracker.reset(menv)
            entry = (menv.grid, tracker, menv.step_count)
        elif menv.step_count > entry[2] and entry[1] is not None:
            entry[1].step()  # what the last step did
            entry = (menv.grid, entry[1], menv.step_count)
        self._trackers[id(menv)] = entry
        return entry[1]

    def act(self, env: Any, allowed: Sequence[int] | None = None) -> int:
        self._tracker(_raw(env))  # follow every step, random ones included
        return super().act(env, allowed)

    # ------------------------------------------------------------------ planning
    def plan(self, menv: Any) -> int | None:
        tracker = self._tracker(menv)
        if tracker is None:
            return None
        if tracker.complete:  # MiniGrid's GoTo tasks reward "done" next to the target
            last = tracker.mission.steps[-1]
            cells = self._cells_of(menv, [o for s in last if s.verb == "go_to" for o in tracker._objs[id(s)]])
            return _DONE if self._facing(menv, cells) else None
        key = id(menv)
        if key in self._dropping:  # putting down what it holds: turn away from the way, then drop
            turns = self._dropping[key]
            if menv.carrying is None:
                del self._dropping[key]
            elif turns > 0 and self._front_free(menv):
                del self._dropping[key]
                return _DROP
            elif turns >= 4:  # no free cell around (a corridor): walk on and try again
                self._dropping[key] = 1
                fx, fy = int(menv.front_pos[0]), int(menv.front_pos[1])
                return _FORWARD if _passable(menv.grid.get(fx, fy)) else None
            else:
                self._dropping[key] = turns + 1
                return _LEFT
        sub = tracker.mission.steps[tracker._group][min(tracker._pending[tracker._group])]
        objs = [o for o in tracker._objs[id(sub)] if (id(sub), id(o)) not in tracker._done]
        if sub.verb == "reach":
            return self._go(menv, {(x, y) for x, y, _ in _find(menv, "goal")}, enter=True)
        if sub.verb == "go_to":
            cells = self._cells_of(menv, objs)
            if self._facing(menv, cells):
                return _DONE
            return self._go(menv, cells, enter=False)
        if sub.verb == "open":
            doors = [d for d in objs if not d.is_open]
            if not doors:
                return None
            door = doors[0]
            if door.is_locked and not self._holds_key(menv, door.color):
                return self._fetch(menv, [o for _, _, o in _find(menv, "key") if o.color == door.color])
            cells = self._cells_of(menv, doors)
            return _TOGGLE if self._facing(menv, cells) else self._go(menv, cells, enter=False)
        if sub.verb == "pick_up":
            return self._fetch(menv, objs)
        # put_next: carry the object to a free cell next to a fixed one, then drop it
        carrying = menv.carrying
        if carrying is None or not any(carrying is o for o in objs):
            return self._fetch(menv, objs)
        fixed = [o for o in tracker._fixed[id(sub)] if o is not carrying]
        spots = set()
        for fx, fy in self._cells_of(menv, fixed):
            for dx, dy in _DIR_VEC:
                x, y = fx + dx, fy + dy
                if 0 <= x < menv.grid.width and 0 <= y < menv.grid.height and menv.grid.get(x, y) is None:
                    spots.add((x, y))
        spots.discard((int(menv.agent_pos[0]), int(menv.agent_pos[1])))
        if self._facing(menv, spots):
            return _DROP
        return self._go(menv, spots, enter=False)

    @staticmethod
    def _cells_of(menv: Any, objs: list) -> set[tuple[int, int]]:
        ids = {id(o) for o in objs}
        return {(x, y) for kind in ("key", "ball", "box", "door", "goal") for x, y, o in _find(menv, kind) if id(o) in ids}

    @staticmethod
    def _facing(menv: Any, cells: set[tuple[int, int]]) -> bool:
        return (int(menv.front_pos[0]), int(menv.front_pos[1])) in cells

    @staticmethod
    def _holds_key(menv: Any, color: str) -> bool:
        c = menv.carrying
        return c is not None and c.type == "key" and c.color == color

    def _fetch(self, menv: Any, objs: list, depth: int = 0) -> int | None:
        """Pick up one of ``objs`` (putting down what it holds first, unless it is the key of a locked
        door on the way; opening a box that hides one)."""
        carrying = menv.carrying
        if carrying is not None and any(carrying is o for o in objs):
            return None
        cells = self._cells_of(menv, objs)
        if not cells:  # hidden in a box: open the box
            cells = {(x, y) for x, y, o in _find(menv, "box") if any(o.contains is b for b in objs)}
            if not cells:
                return None
            if carrying is not None and not self._key_needed(menv, cells):
                return self._put_down(menv)
            return _TOGGLE if self._facing(menv, cells) else self._go(menv, cells, enter=False, depth=depth)
        if carrying is not None and not self._key_needed(menv, cells):
            return self._put_down(menv)
        if self._facing(menv, cells):
            return _PICKUP if carrying is None else self._put_down(menv)
        return self._go(menv, cells, enter=False, depth=depth)

    def _key_needed(self, menv: Any, targets: set[tuple[int, int]]) -> bool:
        """Whether the agent holds the key of a locked door on its way to ``targets``."""
        carrying = menv.carrying
        if carrying is None or carrying.type != "key":
            return False
        path = self._path(menv, targets, enter=False, locked=False) or ()
        return any((o := menv.grid.get(x, y)) is not None and o.type == "door" and o.is_locked
                   and o.color == carrying.color for x, y in path)

    def _put_down(self, menv: Any) -> int:
        """Starts putting down what it holds: a turn first (the cell ahead is usually on its way), then
        a drop on the first free cell it faces."""
        self._dropping[id(menv)] = 1
        return _LEFT


    def _go(self, menv: Any, targets: set[tuple[int, int]], *, enter: bool, depth: int = 0) -> int | None:
        """The next action toward (``enter``: onto) a target cell, or facing one from a neighbour:
        a shortest path through closed doors, locked doors whose key it holds and movable objects;
        when only a locked door leads there, it fetches that door's key."""
        if not targets:
            return None
        path = self._path(menv, targets, enter=enter, locked=False)
        if path is None:
            path = self._path(menv, targets, enter=enter, locked=True)
            if path is None:
                return None
            for x, y in path:  # the first locked door on the way: its key, unless an object blocks the way first
                obj = menv.grid.get(x, y)
                if obj is not None and obj.type in ("key", "ball", "box"):
                    break
                if obj is not None and obj.type == "door" and obj.is_locked and not self._holds_key(menv, obj.color):
                    if depth >= 2:  # that key is itself behind locked doors (or behind this one): give up
                        return None
                    return self._fetch(menv, [o for _, _, o in _find(menv, "key") if o.color == obj.color], depth + 1)
        ax, ay = int(menv.agent_pos[0]), int(menv.agent_pos[1])
        if not path:  # next to a target (or on it): face it
            near = [(tx, ty) for tx, ty in targets if abs(tx - ax) + abs(ty - ay) == 1]
            return self._turn(int(menv.agent_dir), _DIR_VEC.index((near[0][0] - ax, near[0][1] - ay))) if near else None
        nxt = path[0]
        want = _DIR_VEC.index((nxt[0] - ax, nxt[1] - ay))
        d = int(menv.agent_dir)
        if want != d:
            return self._turn(d, want)
        obj = menv.grid.get(*nxt)
        if obj is None or _passable(obj):
            return _FORWARD
        if obj.type == "door":
            return _TOGGLE
        # an object in the way: pick it up (putting down what it holds first), it gets dropped later
        return _PICKUP if menv.carrying is None else self._put_down(menv)

    @staticmethod
    def _path(menv: Any, targets: set[tuple[int, int]], *, enter: bool, locked: bool) -> list | None:
        """Cells from the agent to a target (``enter``) or to a cell next to one, excluding the start;
        ``[]`` when already there; ``None`` when unreachable. Doors and objects cost more than floor."""
        grid = menv.grid
        start = (int(menv.agent_pos[0]), int(menv.agent_pos[1]))
        if enter:
            goals = set(targets)
        else:
            goals = {(tx + dx, ty + dy) for tx, ty in targets for dx, dy in _DIR_VEC}
        if start in goals:
            return []
        carrying = menv.carrying
        dist = {start: 0}
        parent = {start: None}
        frontier = [(0, start)]
        found = None
        while frontier:
            cost, cell = heapq.heappop(frontier)
            if cost > dist.get(cell, 1 << 30):
                continue
            if cell in goals:
                found = cell
                break
            for dx, dy in _DIR_VEC:
                nxt = (cell[0] + dx, cell[1] + dy)
                if not (0 <= nxt[0] < grid.width and 0 <= nxt[1] < grid.height):
                    continue
                if not enter and nxt in targets:
                    continue
                obj = grid.get(*nxt)
                step = 1
                if obj is not None and not _passable(obj):
                    if obj.type == "door":
                        if obj.is_locked and not locked and not (carrying is not None and carrying.type == "key"
                                                                 and carrying.color == obj.color):
                            continue
                        step = 3
                    elif obj.type in ("key", "ball", "box"):
                        step = 8
                    else:
                        continue
                new = cost + step
                if new < dist.get(nxt, 1 << 30):
                    dist[nxt] = new
                    parent[nxt] = cell
                    heapq.heappush(frontier, (new, nxt))
        if found is None:
            return None
        path = []
        while found != start:
            path.append(found)
            found = parent[found]
        return path[::-1]
