"""Captioned MiniGrid frames: rollouts of scripted and random agents, perturbed, with their states.

Frames are rendered by the package's :class:`~vlmrb_torchrl.envs.MiniGridEnv` (``render=True``,
``frame_size=64``: the renderer and frame size the DQN recipe's scorer sees). Episodes come
from :class:`~vlmrb_torchrl.envs.minigrid_policies.DoorKeyPolicy` (ε-random, with random
bursts), :class:`~vlmrb_torchrl.envs.minigrid_policies.SubgoalPolicy` and uniform random
agents; a fraction start from a perturbed state (the key already in hand, the door unlocked
but closed or open, the agent dropped next to the goal) so rare states are common enough to
learn. Each frame is stored with its :class:`~vlmrb_torchrl.envs.minigrid_policies.MiniGridState`
(the privileged information captions are made from: used at training time only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from vlmrb_torchrl.envs.minigrid_policies import DoorKeyPolicy, MiniGridState, SubgoalPolicy, minigrid_state

__all__ = ["Layout", "TRAIN_LAYOUTS", "HELD_OUT_LAYOUTS", "FrameSet", "generate_frames"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """One MiniGrid env id in the training mixture.

    Attributes:
        env_id (str): the MiniGrid id.
        weight (float): share of the frames (normalised over the mixture).
        scripted (str): the scripted agent, ``"doorkey"`` or ``"subgoal"``.
        max_steps (int): episode length cap.
    """

    env_id: str
    weight: float
    scripted: str = "doorkey"
    max_steps: int = 150


#: The training mixture: DoorKey of every size (the default task) and other key / door / object
#: layouts, so captions cover objects, colours and door states beyond DoorKey's.
TRAIN_LAYOUTS: tuple[Layout, ...] = (
    Layout("MiniGrid-DoorKey-5x5-v0", 0.16),
    Layout("MiniGrid-DoorKey-6x6-v0", 0.18),
    Layout("MiniGrid-DoorKey-8x8-v0", 0.18),
    Layout("MiniGrid-DoorKey-16x16-v0", 0.08, max_steps=250),
    Layout("MiniGrid-KeyCorridorS3R1-v0", 0.06, "subgoal"),
    Layout("MiniGrid-KeyCorridorS3R2-v0", 0.05, "subgoal"),
    Layout("MiniGrid-UnlockPickup-v0", 0.07, "subgoal"),
    Layout("MiniGrid-Fetch-5x5-N2-v0", 0.04, "subgoal"),
    Layout("MiniGrid-Fetch-6x6-N2-v0", 0.04, "subgoal"),
    Layout("MiniGrid-GoToObject-6x6-N2-v0", 0.04, "subgoal"),
    Layout("MiniGrid-GoToObject-8x8-N2-v0", 0.04, "subgoal"),
    Layout("MiniGrid-Empty-6x6-v0", 0.03, "subgoal"),
    Layout("MiniGrid-Empty-Random-5x5-v0", 0.03, "subgoal"),
)

#: Tasks never seen in training, for measuring how the model transfers.
HELD_OUT_LAYOUTS: tuple[str, ...] = (
    "MiniGrid-Unlock-v0",
    "MiniGrid-MultiRoom-N2-S4-v0",
    "MiniGrid-LockedRoom-v0",
    "MiniGrid-BlockedUnlockPickup-v0",
    "MiniGrid-RedBlueDoors-6x6-v0",
)

_EPSILONS = (0.0, 0.1, 0.2, 0.3, 0.5)


@dataclasses.dataclass
class FrameSet:
    """Frames and their states.

    Attributes:
        frames (list of np.ndarray): uint8 ``[H, W, 3]`` frames as the env renders them.
        states (list of MiniGridState): the state shown by each frame.
        layout (np.ndarray): int64 ``[N]``, index of the frame's layout in ``layouts``.
        episode (np.ndarray): int64 ``[N]``, a global episode number.
        layouts (list of str): env ids.
    """

    frames: list[np.ndarray]
    states: list[MiniGridState]
    layout: np.ndarray
    episode: np.ndarray
    layouts: list[str]

    def __len__(self) -> int:
        return len(self.frames)


def _perturb(menv, rng: np.random.Generator) -> None:
    """Moves a fresh episode to a rarer state: an object in hand, a door unlocked or open, the
    agent next to (often facing) the goal."""
    grid = menv.grid
    kind = rng.integers(4)
    doors = [o for o in grid.grid if o is not None and o.type == "door"]
    if kind == 0:  # the agent holds an object taken from the floor (MiniGrid does not draw the
        # carried object: what the agent holds shows only as what is missing from the floor)
        things = [(i, o) for i, o in enumerate(grid.grid) if o is not None and o.type in ("key", "ball", "box")]
        if things:
            i, thing = things[rng.integers(len(things))]
            grid.grid[i] = None
            menv.carrying = thing
    elif kind == 1 and doors:  # a door unlocked but closed, or open
        door = doors[rng.integers(len(doors))]
        door.is_locked = False
        door.is_open = bool(rng.integers(2))
    else:  # the agent somewhere else: next to the goal (facing it half of those times) or anywhere
        free = [
            (i % grid.width, i // grid.width)
            for i, o in enumerate(grid.grid)
            if o is None and (i % grid.width, i // grid.width) != tuple(menv.agent_pos)
        ]
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


def generate_frames(
    n_frames: int,
    *,
    seed: int = 0,
    layouts: Sequence[Layout] = TRAIN_LAYOUTS,
    frame_size: int = 64,
    random_share: float = 0.3,
    perturb_share: float = 0.3,
) -> FrameSet:
    """Rolls out scripted, perturbed and random episodes until ``n_frames`` frames are collected.

    Every frame an agent sees is kept, including the last one of an episode (the agent on the
    goal). Episodes are drawn layout by layout with probabilities ``layout.weight``; everything
    is seeded from ``seed`` (env layouts, agents, perturbations), so a seed gives the same frames.

    Args:
        n_frames (int): frames to collect.

    Keyword Args:
        seed (int, optional): the seed. Defaults to ``0``.
        layouts (sequence of Layout, optional): the mixture. Defaults to :data:`TRAIN_LAYOUTS`.
        frame_size (int, optional): the env's ``frame_size``. Defaults to ``64`` (the recipes').
        random_share (float, optional): share of episodes played by a uniform random agent.
        perturb_share (float, optional): share of episodes started from a perturbed state.

    Returns:
        FrameSet: the frames with their states.

    Examples:
        >>> data = generate_frames(50, seed=0)
        >>> len(data), data.frames[0].dtype, len(data.states)
        (50, dtype('uint8'), 50)
    """
    from vlmrb_torchrl.envs.minigrid import MiniGridEnv

    rng = np.random.default_rng(seed)
    envs: dict[str, MiniGridEnv] = {}
    weights = np.array([lay.weight for lay in layouts], dtype=np.float64)
    weights /= weights.sum()
    frames: list[np.ndarray] = []
    states: list[MiniGridState] = []
    layout_ids: list[int] = []
    episodes: list[int] = []
    episode = 0
    while len(frames) < n_frames:
        li = int(rng.choice(len(layouts), p=weights))
        lay = layouts[li]
        env = envs.get(lay.env_id)
        if env is None:
            env = envs[lay.env_id] = MiniGridEnv(lay.env_id, render=True, frame_size=frame_size)
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
        else:
            policy = SubgoalPolicy(seed=agent_seed, epsilon=float(rng.choice((0.05, 0.2))), burst_prob=0.03)
        actions = list(range(6))
        steps = int(rng.integers(lay.max_steps // 3, lay.max_steps + 1)) if policy is None else lay.max_steps
        for _ in range(steps):
            frames.append(frame)
            states.append(minigrid_state(menv))
            layout_ids.append(li)
            episodes.append(episode)
            if len(frames) >= n_frames:
                break
            action = int(rng.choice(actions)) if policy is None else policy.act(menv, allowed=actions)
            td["action"] = torch.tensor(action)
            td = env.step(td)
            frame = td["next", "pixels"].numpy()
            if bool(td["next", "done"]):
                frames.append(frame)  # the outcome: e.g. the agent on the goal
                states.append(minigrid_state(menv))
                layout_ids.append(li)
                episodes.append(episode)
                break
            td = td["next"]
        episode += 1
    for env in envs.values():
        env.close()
    return FrameSet(frames[:n_frames], states[:n_frames], np.asarray(layout_ids[:n_frames], dtype=np.int64),
                    np.asarray(episodes[:n_frames], dtype=np.int64), [lay.env_id for lay in layouts])


def _render(env) -> np.ndarray:
    # a perturbed state is not the frame reset() rendered: render it again with the env's renderer
    return env._renderer(env.unwrapped)
