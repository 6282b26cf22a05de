"""Captioned OGBench Scene frames: statements about the cube, the drawer, the window and their locks.

Statements come in groups of mutually exclusive ones, each decided by the simulator's state
(:class:`~vlmrb_torchrl.envs.ogbench_policies.SceneState`): the cube on its target or off it; in
the drawer, on the table or in the air; held by the gripper or not; the drawer open, half open
or closed (OGBench's 4 cm tolerance around its goal positions), the same for the window; the
drawer locked or unlocked (button 0: its handle and button drawn red or white), the same for the
window (button 1). Exactly one statement of each group is true in a frame, so every statement not
in a frame's set is false there (the contrastive loss's negatives are exact). The task's
subgoals, what ``oracle:ogbench`` watches, are among them: ``builtin:scene`` scores a clip by
whether one of them becomes true in it (:data:`~vlmrb_torchrl.scorers.builtin.SCENE_PROMPT_SETS`).

Frames are rendered by :class:`~vlmrb_torchrl.envs.ogbench.SceneEnv` exactly as the SAC recipe
renders them for its scorer (``camera="front_pixels"``, ``frame_size=64``, the arm transparent,
shadows and reflections off), in episodes of all five tasks played by
:class:`~vlmrb_torchrl.envs.ogbench_policies.ScenePolicy` (subtasks toward the task's goal or at
random, run by OGBench's scripted oracles, with noise and random bursts) and of random arm motion.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from vlmrb_torchrl.envs.ogbench_policies import SceneState, scene_state
from vlmrb_torchrl.scorer_training.data import FrameSet

__all__ = ["SCENE_STATEMENTS", "SCENE_QUESTIONS", "SCENE_EPISODE_KINDS", "true_statements", "wordings",
           "all_statements", "vocabulary", "generate_scene_frames"]

Statement = tuple[str, ...]

#: Frame-level validation questions: groups of mutually exclusive statements (one is true in every frame).
SCENE_QUESTIONS: dict[str, tuple[Statement, ...]] = {
    "cube_target": (("cube", "on_target"), ("cube", "off_target")),
    "cube_place": (("cube", "in_drawer"), ("cube", "on_table"), ("cube", "in_air")),
    "cube_held": (("cube", "held"), ("cube", "not_held")),
    "drawer": (("drawer", "open"), ("drawer", "half"), ("drawer", "closed")),
    "window": (("window", "open"), ("window", "half"), ("window", "closed")),
    "drawer_lock": (("drawer", "locked"), ("drawer", "unlocked")),
    "window_lock": (("window", "locked"), ("window", "unlocked")),
}

#: Every statement, in a fixed order.
SCENE_STATEMENTS: tuple[Statement, ...] = tuple(s for group in SCENE_QUESTIONS.values() for s in group)

_WORDINGS: dict[Statement, tuple[str, ...]] = {
    ("cube", "on_target"): ("the cube is on its target", "the cube sits on the target", "the red cube is at its target"),
    ("cube", "off_target"): ("the cube is off its target", "the cube is away from the target",
                             "the red cube is not at its target"),
    ("cube", "in_drawer"): ("the cube is in the drawer", "the red cube is inside the drawer"),
    ("cube", "on_table"): ("the cube is on the table", "the red cube rests on the table"),
    ("cube", "in_air"): ("the cube is in the air", "the red cube is lifted"),
    ("cube", "held"): ("the robot holds the cube", "the gripper holds the red cube"),
    ("cube", "not_held"): ("the robot does not hold the cube", "the gripper holds nothing"),
    ("drawer", "open"): ("the drawer is open", "the drawer is pulled open"),
    ("drawer", "half"): ("the drawer is half open", "the drawer is partly open"),
    ("drawer", "closed"): ("the drawer is closed", "the drawer is shut"),
    ("window", "open"): ("the window is open", "the window is slid open"),
    ("window", "half"): ("the window is half open", "the window is partly open"),
    ("window", "closed"): ("the window is closed", "the window is shut"),
    ("drawer", "locked"): ("the drawer is locked", "the drawer handle is red"),
    ("drawer", "unlocked"): ("the drawer is unlocked", "the drawer handle is white"),
    ("window", "locked"): ("the window is locked", "the window handle is red"),
    ("window", "unlocked"): ("the window is unlocked", "the window handle is white"),
}

#: What the frames' ``layout`` index names: the task and the kind of episode a frame comes from.
SCENE_EPISODE_KINDS = tuple(f"scene-task{task}/{mode}" for task in range(1, 6) for mode in ("subtasks", "random"))


def true_statements(state: SceneState) -> frozenset[Statement]:
    """The seven statements true in ``state`` (one of each group of :data:`SCENE_QUESTIONS`).

    Examples:
        >>> from vlmrb_torchrl.envs.ogbench_policies import SceneState
        >>> state = SceneState(cube_on_target=True, cube_place="table", cube_held=False, drawer="open",
        ...                    window="closed", drawer_locked=False, window_locked=True, subgoals=(True,) * 5)
        >>> sorted(true_statements(state))[:3]
        [('cube', 'not_held'), ('cube', 'on_table'), ('cube', 'on_target')]
    """
    return frozenset({
        ("cube", "on_target" if state.cube_on_target else "off_target"),
        ("cube", {"drawer": "in_drawer", "air": "in_air"}.get(state.cube_place, "on_table")),
        ("cube", "held" if state.cube_held else "not_held"),
        ("drawer", state.drawer),
        ("window", state.window),
        ("drawer", "locked" if state.drawer_locked else "unlocked"),
        ("window", "locked" if state.window_locked else "unlocked"),
    })


def wordings(statement: Statement) -> tuple[str, ...]:
    """The sentences that say ``statement`` (the first is the canonical one, used in prompts).

    Examples:
        >>> wordings(("drawer", "half"))[0]
        'the drawer is half open'
    """
    try:
        return _WORDINGS[statement]
    except KeyError:
        raise ValueError(f"unknown Scene statement {statement!r}") from None


def all_statements() -> list[Statement]:
    """Every statement, in a fixed order."""
    return list(SCENE_STATEMENTS)


def vocabulary(extra: Iterable[str] = ()) -> list[str]:
    """The words of every wording (plus ``extra`` sentences), sorted: the tokenizer's vocabulary.

    Examples:
        >>> {"drawer", "window", "locked", "cube", "target"} <= set(vocabulary())
        True
    """
    words = {w for texts in _WORDINGS.values() for text in texts for w in text.split()}
    words |= {w for text in extra for w in text.lower().split()}
    words.add("and")
    return sorted(words)


def generate_scene_frames(
    n_frames: int,
    *,
    seed: int = 0,
    frame_size: int = 64,
    camera: str = "front_pixels",
    episode_steps: tuple[int, int] = (300, 750),
    frame_every: int = 2,
    random_share: float = 0.1,
    log=None,
) -> FrameSet:
    """Rolls out scripted and random episodes of the five Scene tasks until ``n_frames`` frames are kept.

    Episodes cycle through tasks 1-5 and do not end when the task is solved (the agent goes on
    with random subtasks); their length is drawn from ``episode_steps``, and every
    ``frame_every``-th observation is rendered and kept (the reset frame included): consecutive
    frames at 20 Hz barely differ, so more episodes for the same rendering cost. Each episode
    resets from a seed ``>= 2**20`` drawn from ``seed`` (the scorer-quality benchmark's held-out
    episodes use seeds from 1000), so a seed gives the same frames.

    Args:
        n_frames (int): frames to keep.

    Keyword Args:
        seed (int, optional): the seed. Defaults to ``0``.
        frame_size (int, optional): frames are ``[frame_size, frame_size, 3]``. Defaults to ``64``
            (the SAC recipe's).
        camera (str, optional): the camera. Defaults to ``"front_pixels"`` (the SAC recipe's).
        episode_steps (tuple of int, optional): ``(min, max)`` steps per episode.
        frame_every (int, optional): keep every ``frame_every``-th observation. Defaults to ``2``.
        random_share (float, optional): share of random-motion episodes (:class:`ScenePolicy`).
        log (callable, optional): progress lines (every 2,000 frames) go here. Defaults to ``None``.

    Returns:
        FrameSet: the frames with their :class:`SceneState` (``layouts`` are
        :data:`SCENE_EPISODE_KINDS`).

    Examples:
        >>> data = generate_scene_frames(20, seed=0)  # doctest: +SKIP
        >>> len(data), data.frames[0].shape  # doctest: +SKIP
        (20, (64, 64, 3))
    """
    import time

    from vlmrb_torchrl.envs.ogbench import SceneEnv
    from vlmrb_torchrl.envs.ogbench_policies import ScenePolicy

    rng = np.random.default_rng(seed)
    t0, reported = time.perf_counter(), 0
    keep = lambda step: step % frame_every == 0  # noqa: E731
    envs: dict[int, SceneEnv] = {}
    policies: dict[int, ScenePolicy] = {}
    frames: list[np.ndarray] = []
    states: list[SceneState] = []
    kinds: list[int] = []
    episodes: list[int] = []
    episode = 0
    try:
        while len(frames) < n_frames:
            task = episode % 5 + 1
            steps = int(rng.integers(episode_steps[0], episode_steps[1] + 1))
            if task not in envs:
                envs[task] = SceneEnv(task, render=True, render_steps=keep, camera=camera, frame_size=frame_size,
                                      max_episode_steps=episode_steps[1] + 1, terminate_on_success=False)
                policies[task] = ScenePolicy(envs[task], seed=int(rng.integers(2**31)), random_share=random_share)
            env, policy = envs[task], policies[task]
            env.set_seed(int(rng.integers(2**20, 2**31)))
            policy.reset()
            td = env.reset()
            start = len(frames)
            frames.append(td["pixels"].numpy())
            states.append(scene_state(env))
            for step in range(1, steps + 1):
                if len(frames) >= n_frames:
                    break
                td = env.step(policy(td))["next"]
                if keep(step):
                    frames.append(td["pixels"].numpy())
                    states.append(scene_state(env))
            kinds += [SCENE_EPISODE_KINDS.index(f"scene-task{task}/{policy.mode}")] * (len(frames) - start)
            episodes += [episode] * (len(frames) - start)
            episode += 1
            if log is not None and len(frames) - reported >= 2000:
                reported = len(frames)
                log(f"scene frames: {min(len(frames), n_frames)}/{n_frames} ({episode} episodes, "
                    f"{time.perf_counter() - t0:.0f} s)")
    finally:
        for env in envs.values():
            env.close()
    return FrameSet(frames[:n_frames], states[:n_frames], np.asarray(kinds[:n_frames], dtype=np.int64),
                    np.asarray(episodes[:n_frames], dtype=np.int64), list(SCENE_EPISODE_KINDS))
