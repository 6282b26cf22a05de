"""Captioned MiniGrid frames: rollouts of scripted and random agents, perturbed, with their states.

Frames are rendered by the package's :class:`~vlmrb_torchrl.envs.MiniGridEnv` (``render=True``,
``frame_size=64``: the renderer and frame size the DQN recipe's scorer sees). Episodes come
from :class:`~vlmrb_torchrl.envs.minigrid.policies.DoorKeyPolicy` (ε-random, with random
bursts), :class:`~vlmrb_torchrl.envs.minigrid.policies.MissionPolicy` (follows the episode's
mission), :class:`~vlmrb_torchrl.envs.minigrid.policies.SubgoalPolicy` and uniform random
agents; a fraction start from a perturbed state (an object in hand, a door unlocked but closed
or open, the agent dropped next to the goal or facing an object, an object moved next to
another) so rare states are common enough to learn. Each frame is stored with its :class:`~vlmrb_torchrl.envs.minigrid.policies.MiniGridState`
(the privileged information captions are made from: used at training time only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from vlmrb_torchrl.envs.minigrid.policies import (
    DoorKeyPolicy,
    MiniGridState,
    MissionPolicy,
    SubgoalPolicy,
    minigrid_state,
)
from vlmrb_torchrl.scorer_training.domains import FrameSet

__all__ = ["Layout", "TRAIN_LAYOUTS", "HELD_OUT_LAYOUTS", "BENCHMARK_TRAIN_ENVS", "LARGE_GRID_ENVS", "generate_frames"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """One MiniGrid env id in the training mixture.

    Attributes:
        env_id (str): the MiniGrid id.
        weight (float): share of the frames (normalised over the mixture).
        scripted (str): the scripted agent, ``"doorkey"`` (:class:`DoorKeyPolicy`), ``"mission"``
            (:class:`MissionPolicy` three times in four, else :class:`SubgoalPolicy`) or
            ``"subgoal"`` (:class:`SubgoalPolicy`).
        max_steps (int): episode length cap.
    """

    env_id: str
    weight: float
    scripted: str = "doorkey"
    max_steps: int = 150


#: The training mixture: DoorKey of every size (the recipes' default task) and MiniGrid / BabyAI
#: layouts of every verb of the mission grammar (go to, pick up, open, put next to, reach the
#: goal), with keys, balls, boxes and doors of every colour, square and non-square grids. These
#: envs (and only these) were used to build the model and to tune the mission parser's checks.
TRAIN_LAYOUTS: tuple[Layout, ...] = (
    Layout("MiniGrid-DoorKey-5x5-v0", 0.07),
    Layout("MiniGrid-DoorKey-6x6-v0", 0.08),
    Layout("MiniGrid-DoorKey-8x8-v0", 0.08),
    Layout("MiniGrid-DoorKey-12x12-v0", 0.05, max_steps=200),
    Layout("MiniGrid-DoorKey-16x16-v0", 0.06, max_steps=250),
    Layout("MiniGrid-KeyCorridorS3R1-v0", 0.04, "mission"),
    Layout("MiniGrid-KeyCorridorS3R2-v0", 0.04, "mission"),
    Layout("MiniGrid-UnlockPickup-v0", 0.05, "mission"),
    Layout("MiniGrid-Fetch-5x5-N2-v0", 0.03, "mission"),
    Layout("MiniGrid-Fetch-8x8-N3-v0", 0.04, "mission"),
    Layout("MiniGrid-GoToObject-6x6-N2-v0", 0.03, "mission"),
    Layout("MiniGrid-GoToObject-8x8-N2-v0", 0.04, "mission"),
    Layout("MiniGrid-GoToDoor-5x5-v0", 0.02, "mission"),
    Layout("MiniGrid-GoToDoor-8x8-v0", 0.03, "mission"),
    Layout("MiniGrid-PutNear-6x6-N2-v0", 0.04, "mission"),
    Layout("MiniGrid-PutNear-8x8-N3-v0", 0.04, "mission"),
    Layout("MiniGrid-Empty-6x6-v0", 0.02, "mission"),
    Layout("MiniGrid-Empty-Random-5x5-v0", 0.02, "mission"),
    Layout("MiniGrid-LavaGapS6-v0", 0.02, "mission"),
    Layout("BabyAI-GoToLocal-v0", 0.05, "mission"),
    Layout("BabyAI-PickupLoc-v0", 0.05, "mission"),
    Layout("BabyAI-PutNextLocal-v0", 0.06, "mission"),
    Layout("BabyAI-OpenRedDoor-v0", 0.03, "mission"),
    Layout("BabyAI-OpenDoorsOrderN2-v0", 0.02, "mission", max_steps=100),
)

#: The envs of ``benchmarks/scorer_quality.py --env family-train``: training layouts measured
#: against the oracle (DoorKey of every size first: the recipes' task).
BENCHMARK_TRAIN_ENVS: tuple[str, ...] = (
    "MiniGrid-DoorKey-5x5-v0",
    "MiniGrid-DoorKey-6x6-v0",
    "MiniGrid-DoorKey-8x8-v0",
    "MiniGrid-DoorKey-12x12-v0",
    "MiniGrid-DoorKey-16x16-v0",
    "MiniGrid-KeyCorridorS3R2-v0",
    "MiniGrid-UnlockPickup-v0",
    "MiniGrid-Fetch-8x8-N3-v0",
    "MiniGrid-GoToObject-8x8-N2-v0",
    "MiniGrid-PutNear-6x6-N2-v0",
    "BabyAI-GoToLocal-v0",
    "BabyAI-PickupLoc-v0",
    "BabyAI-PutNextLocal-v0",
    "BabyAI-OpenRedDoor-v0",
)

#: Tasks never used to build the model or to tune the mission parser: the held-out envs of the
#: benchmark and of the model card's transfer metrics. Grids of at most 13 cells (5-pixel tiles
#: or more at 64 pixels) with missions of the grammar: a locked door and its key (Unlock), a
#: blocked locked door (BlockedUnlockPickup), a key behind a door and a ball behind a locked one
#: (KeyCorridorS3R3), "then" (RedBlueDoors, MoveTwoAcross), "after you" and "and" across rooms
#: (GoToSeqS5R2), put next to across two rooms (PutNextS5N2), go to among distractors in a
#: new room shape (GoToObjS6), lava crossings to the goal (LavaCrossingS9N1), and BabyAI's
#: mixed missions (MiniBossLevel).
HELD_OUT_LAYOUTS: tuple[str, ...] = (
    "MiniGrid-Unlock-v0",
    "MiniGrid-BlockedUnlockPickup-v0",
    "MiniGrid-KeyCorridorS3R3-v0",
    "MiniGrid-RedBlueDoors-6x6-v0",
    "MiniGrid-LavaCrossingS9N1-v0",
    "BabyAI-GoToObjS6-v1",
    "BabyAI-PutNextS5N2-v0",
    "BabyAI-MoveTwoAcrossS5N2-v0",
    "BabyAI-GoToSeqS5R2-v0",
    "BabyAI-MiniBossLevel-v0",
)

#: Grids of 19-25 cells: 64-pixel frames show 2.6-3.4-pixel tiles (measured, not a goal).
LARGE_GRID_ENVS: tuple[str, ...] = ("MiniGrid-LockedRoom-v0", "MiniGrid-MultiRoom-N2-S4-v0")

_EPSILONS = (0.0, 0.1, 0.2, 0.3, 0.5)


def _perturb(menv, rng: np.random.Generator) -> None:
    """Moves a fresh episode to a rarer state: an object in hand, a door unlocked or open, the
    agent next to (often facing) the goal or facing an object, an object next to another."""
    grid = menv.grid
    kind = rng.integers(6)
    doors = [o for o in grid.grid if o is not None and o.type == "door"]
    things = [(i, o) for i, o in enumerate(grid.grid) if o is not None and o.type in ("key", "ball", "box")]
    agent = (int(menv.agent_pos[0]), int(menv.agent_pos[1]))
    area = _inside(grid, agent, doors=True)
    # GoToDoor leaves empty cells outside its walls, beyond its doors: there doors stay shut and the
    # agent in its room (an open door would let it walk off the grid)
    enclosed = not any(x in (0, grid.width - 1) or y in (0, grid.height - 1) for x, y in area)
    if not enclosed:
        area = _inside(grid, agent, doors=False)
        doors = []
    free = [c for c in area if grid.get(*c) is None and c != agent]
    if kind == 0 and things:  # the agent holds an object taken from the floor (MiniGrid does not draw the
        # carried object: what the agent holds shows only as what is missing from the floor)
        i, thing = things[rng.integers(len(things))]
        grid.grid[i] = None
        menv.carrying = thing
        thing.cur_pos = np.array([-1, -1])
    elif kind == 1 and doors:  # a door unlocked but closed, or open
        door = doors[rng.integers(len(doors))]
        door.is_locked = False
        door.is_open = bool(rng.integers(2))
    elif kind == 2 and things and len(things) + len(doors) > 1:  # an object moved next to another one
        i, thing = things[rng.integers(len(things))]
        others = [j for j, o in enumerate(grid.grid) if o is not None and o.type in ("key", "ball", "box", "door")
                  and j != i]
        j = others[rng.integers(len(others))]
        ox, oy = j % grid.width, j // grid.width
        spots = [(ox + dx, oy + dy) for dx, dy in ((1, 0), (0, 1), (-1, 0), (0, -1)) if (ox + dx, oy + dy) in free]
        if spots:
            x, y = spots[rng.integers(len(spots))]
            grid.grid[i] = None
            grid.set(x, y, thing)
            thing.cur_pos = np.array([x, y])
    elif kind == 3 and (things or doors):  # the agent facing an object or a door
        targets = [(i % grid.width, i // grid.width) for i, o in enumerate(grid.grid)
                   if o is not None and o.type in ("key", "ball", "box", "door")]
        tx, ty = targets[rng.integers(len(targets))]
        spots = [((tx + dx, ty + dy), d) for d, (dx, dy) in enumerate(((-1, 0), (0, -1), (1, 0), (0, 1)))
                 if (tx + dx, ty + dy) in free]
        if spots:
            (x, y), d = spots[rng.integers(len(spots))]
            menv.agent_pos = (x, y)
            menv.agent_dir = d  # facing (tx, ty): direction d points from (x, y) to the target
    else:  # the agent somewhere else: next to the goal (facing it half of those times) or anywhere
        goals = [(i % grid.width, i // grid.width) for i, o in enumerate(grid.grid) if o is not None and o.type == "goal"]
        near = [c for c in free if any(abs(c[0] - g[0]) + abs(c[1] - g[1]) == 1 for g in goals)]
        pool = near if near and rng.random() < 0.7 else free
        if pool:
            x, y = pool[rng.integers(len(pool))]
            menv.agent_pos = (x, y)
            menv.agent_dir = int(rng.integers(4))
            facing = [d for d, (dx, dy) in enumerate(((1, 0), (0, 1), (-1, 0), (0, -1))) if (x + dx, y + dy) in goals]
            if facing and rng.random() < 0.5:
                menv.agent_dir = facing[0]


def _inside(grid, start: tuple[int, int], *, doors: bool) -> list[tuple[int, int]]:
    """The cells the agent's area reaches (through objects and, with ``doors``, doors; not walls)."""
    seen, todo = {start}, [start]
    while todo:
        x, y = todo.pop()
        for dx, dy in ((1, 0), (0, 1), (-1, 0), (0, -1)):
            nxt = (x + dx, y + dy)
            if nxt in seen or not (0 <= nxt[0] < grid.width and 0 <= nxt[1] < grid.height):
                continue
            obj = grid.get(*nxt)
            if obj is not None and (obj.type == "wall" or (obj.type == "door" and not doors)):
                continue
            seen.add(nxt)
            todo.append(nxt)
    return sorted(seen)


def generate_frames(
    n_frames: int,
    *,
    seed: int = 0,
    layouts: Sequence[Layout] = TRAIN_LAYOUTS,
    frame_size: int = 64,
    random_share: float = 0.3,
    perturb_share: float = 0.3,
    workers: int = 1,
    frame_view: str = "grid",
) -> FrameSet:
    """Rolls out scripted, perturbed and random episodes until ``n_frames`` frames are collected.

    Every frame an agent sees is kept, including the last one of an episode (the agent on the
    goal). Episode ``i`` draws everything it needs (its layout, with probabilities
    ``layout.weight``, the env's seed, the agent, the perturbation) from a generator seeded by
    ``(seed, i)`` alone: a seed gives the same frames, whichever process plays which episode.
    The frames are episodes ``0, 1, ...`` in order, cut at ``n_frames``.

    Args:
        n_frames (int): frames to collect.

    Keyword Args:
        seed (int, optional): the seed. Defaults to ``0``.
        layouts (sequence of Layout, optional): the mixture. Defaults to :data:`TRAIN_LAYOUTS`.
        frame_size (int, optional): the env's ``frame_size``. Defaults to ``64`` (the recipes').
        random_share (float, optional): share of episodes played by a uniform random agent.
        perturb_share (float, optional): share of episodes started from a perturbed state.
        workers (int, optional): processes that play the episodes (spawned); the frames do not
            depend on it. Defaults to ``1`` (this process).
        frame_view (str, optional): the env's ``frame_view``: ``"grid"`` (the whole grid) or
            ``"agent"`` (the agent-centred view). The episodes and states do not depend on it.
            Defaults to ``"grid"``.

    Returns:
        FrameSet: the frames with their states.

    Examples:
        >>> data = generate_frames(50, seed=0)
        >>> len(data), data.frames[0].dtype, len(data.states)
        (50, dtype('uint8'), 50)
    """
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"generate_frames: workers must be an int >= 1, got workers={workers!r}.")
    args = (seed, tuple(layouts), frame_size, random_share, perturb_share, frame_view)
    played: list[tuple[int, list[np.ndarray], list[MiniGridState]]] = []
    total = 0
    if workers == 1:
        try:
            while total < n_frames:
                played.append(_episode(len(played), *args))
                total += len(played[-1][1])
        finally:
            _close_envs()
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # episodes are played in waves of about the frames still missing (with a margin): the
        # frames are episodes 0, 1, ... in order, so the extra episodes of the last wave are dropped
        mean_len = float(np.mean([lay.max_steps for lay in layouts])) / 2
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_worker_init) as pool:
            while total < n_frames:
                wave = max(2 * workers, int(1.2 * (n_frames - total) / mean_len) + 1)
                for result in pool.map(_episode, range(len(played), len(played) + wave), *([a] * wave for a in args),
                                       chunksize=max(1, wave // (8 * workers))):
                    if total < n_frames:
                        played.append(result)
                        total += len(result[1])
                lengths = [len(p[1]) for p in played]
                mean_len = float(np.mean(lengths)) if lengths else mean_len
    frames: list[np.ndarray] = []
    states: list[MiniGridState] = []
    layout_ids: list[int] = []
    episodes: list[int] = []
    for index, (li, ep_frames, ep_states) in enumerate(played):
        frames += ep_frames
        states += ep_states
        layout_ids += [li] * len(ep_frames)
        episodes += [index] * len(ep_frames)
    return FrameSet(frames[:n_frames], states[:n_frames], np.asarray(layout_ids[:n_frames], dtype=np.int64),
                    np.asarray(episodes[:n_frames], dtype=np.int64), [lay.env_id for lay in layouts])


#: A process's envs, one per (env id, frame size, frame view): built once, reset per episode.
_ENVS: dict[tuple[str, int, str], object] = {}


def _close_envs() -> None:
    while _ENVS:
        _ENVS.popitem()[1].close()


def _worker_init() -> None:
    torch.set_num_threads(1)  # the env's tensors are tiny: one thread per worker process


def _episode(index: int, seed: int, layouts: tuple[Layout, ...], frame_size: int, random_share: float,
             perturb_share: float, frame_view: str = "grid") -> tuple[int, list[np.ndarray], list[MiniGridState]]:
    """Plays episode ``index`` of ``seed``'s frames: its layout's index, its frames and their states."""
    from vlmrb_torchrl.envs.minigrid.env import MiniGridEnv

    rng = np.random.default_rng((seed, index))
    weights = np.array([lay.weight for lay in layouts], dtype=np.float64)
    li = int(rng.choice(len(layouts), p=weights / weights.sum()))
    lay = layouts[li]
    env = _ENVS.get((lay.env_id, frame_size, frame_view))
    if env is None:
        env = _ENVS[lay.env_id, frame_size, frame_view] = MiniGridEnv(lay.env_id, render=True, frame_size=frame_size,
                                                                      frame_view=frame_view)
    env.set_seed(int(rng.integers(2**31)))
    td = env.reset()
    menv = env.unwrapped
    if rng.random() < perturb_share:
        _perturb(menv, rng)
        frame = _render(env)
    else:
        frame = td["pixels"].numpy()
    agent_seed = int(rng.integers(2**31))
    if rng.random() < random_share:
        policy = None
    elif lay.scripted == "doorkey":
        policy = DoorKeyPolicy(seed=agent_seed, epsilon=float(rng.choice(_EPSILONS)),
                               burst_prob=float(rng.choice((0.0, 0.03, 0.08))))
    elif lay.scripted == "mission" and rng.random() < 0.75:
        policy = MissionPolicy(seed=agent_seed, epsilon=float(rng.choice(_EPSILONS)),
                               burst_prob=float(rng.choice((0.0, 0.03, 0.08))))
    else:
        policy = SubgoalPolicy(seed=agent_seed, epsilon=float(rng.choice((0.05, 0.2))), burst_prob=0.03)
    actions = list(range(6))
    steps = int(rng.integers(lay.max_steps // 3, lay.max_steps + 1)) if policy is None else lay.max_steps
    frames: list[np.ndarray] = []
    states: list[MiniGridState] = []
    for _ in range(steps):
        frames.append(frame)
        states.append(minigrid_state(menv))
        action = int(rng.choice(actions)) if policy is None else policy.act(menv, allowed=actions)
        td["action"] = torch.tensor(action)
        td = env.step(td)
        frame = td["next", "pixels"].numpy()
        if bool(td["next", "done"]):
            frames.append(frame)  # the outcome: e.g. the agent on the goal
            states.append(minigrid_state(menv))
            break
        td = td["next"]
    return li, frames, states


def _render(env) -> np.ndarray:
    # a perturbed state is not the frame reset() rendered: render it again with the env's renderer
    return env._renderer(env.unwrapped)
