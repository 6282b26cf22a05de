"""Captioned OGBench Scene frames: statements about the cube, the drawer, the window and their locks.

Statements come in groups of mutually exclusive ones, each decided by the simulator's state
(:class:`~vlmrb_torchrl.envs.ogbench.policies.SceneState`): the cube on its target or off it; in
the drawer, on the table or in the air; held by the gripper or not; the drawer open, half open
or closed (OGBench's 4 cm tolerance around its goal positions), the same for the window; the
drawer locked or unlocked (button 0: its handle and button drawn red or white), the same for the
window (button 1). Exactly one statement of each group is true in a frame, so every statement not
in a frame's set is false there (the contrastive loss's negatives are exact). The task's
subgoals, what ``oracle:ogbench`` watches, are among them: ``builtin:scene`` scores a clip by
whether one of them becomes true in it (:data:`~vlmrb_torchrl.scorers.builtin.SCENE_PROMPT_SETS`).

Frames are rendered by :class:`~vlmrb_torchrl.envs.ogbench.env.SceneEnv` exactly as the SAC recipe
renders them for its scorer (``camera="front_pixels"``, ``frame_size=64``, the arm transparent,
shadows and reflections off), in episodes of all five tasks played by
:class:`~vlmrb_torchrl.envs.ogbench.policies.ScenePolicy` (subtasks toward the task's goal or at
random, run by OGBench's scripted oracles, with noise and random bursts) and of random arm motion.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from vlmrb_torchrl.envs.ogbench.policies import SceneState, scene_state
from vlmrb_torchrl.scorer_training.domains import FrameSet, table_vocabulary, table_wordings

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
        >>> from vlmrb_torchrl.envs.ogbench.policies import SceneState
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
    return table_wordings(_WORDINGS, statement, "Scene")


def all_statements() -> list[Statement]:
    """Every statement, in a fixed order."""
    return list(SCENE_STATEMENTS)


def vocabulary(extra: Iterable[str] = ()) -> list[str]:
    """The words of every wording (plus ``extra`` sentences), sorted: the tokenizer's vocabulary.

    Examples:
        >>> {"drawer", "window", "locked", "cube", "target"} <= set(vocabulary())
        True
    """
    return table_vocabulary(_WORDINGS, extra)


@dataclasses.dataclass(frozen=True)
class _Episode:
    """One episode of :func:`generate_scene_frames`: everything its frames depend on."""

    index: int
    task: int
    steps: int
    frames: int  # kept frames (the reset frame and every ``frame_every``-th step, cut at the build's total)
    env_seed: int
    policy_seed: int


def _plan(n_frames: int, seed: int, episode_steps: tuple[int, int], frame_every: int) -> list[_Episode]:
    """The episodes that make ``n_frames`` frames, drawn from ``seed`` alone (not from the workers)."""
    rng = np.random.default_rng(seed)
    plan: list[_Episode] = []
    total = 0
    while total < n_frames:
        steps = int(rng.integers(episode_steps[0], episode_steps[1] + 1))
        frames = min(1 + steps // frame_every, n_frames - total)
        plan.append(_Episode(len(plan), len(plan) % 5 + 1, steps, frames, int(rng.integers(2**20, 2**31)),
                             int(rng.integers(2**31))))
        total += frames
    return plan


#: A worker's envs, one per (task, camera, frame size, time limit, frame_every): built once, reset per episode.
_ENVS: dict[tuple, Any] = {}


def _roll(episode: _Episode, camera: str, frame_size: int, max_steps: int, frame_every: int,
          random_share: float) -> tuple[int, np.ndarray, list[SceneState], str]:
    """Plays ``episode``: its index, its frames ``[k, S, S, 3]``, their states and the policy's mode."""
    from vlmrb_torchrl.envs.ogbench.env import SceneEnv
    from vlmrb_torchrl.envs.ogbench.policies import ScenePolicy

    key = (episode.task, camera, frame_size, max_steps, frame_every)
    env = _ENVS.get(key)
    if env is None:
        env = _ENVS[key] = SceneEnv(episode.task, render=True, render_steps=lambda step: step % frame_every == 0,
                                    camera=camera, frame_size=frame_size, max_episode_steps=max_steps,
                                    terminate_on_success=False)
    env.set_seed(episode.env_seed)
    td = env.reset()
    # a policy per episode, seeded by the plan: the episode is the same whichever worker plays it
    policy = ScenePolicy(env, seed=episode.policy_seed, random_share=random_share)
    frames, states = [td["pixels"].numpy()], [scene_state(env)]
    for step in range(1, episode.steps + 1):
        if len(frames) >= episode.frames:
            break
        td = env.step(policy(td))["next"]
        if step % frame_every == 0:
            frames.append(td["pixels"].numpy())
            states.append(scene_state(env))
    return episode.index, np.stack(frames), states, policy.mode


def _close_envs() -> None:
    while _ENVS:
        _ENVS.popitem()[1].close()


def _worker_init() -> None:
    import torch

    torch.set_num_threads(1)  # the env's tensors are tiny: one thread per worker process


def generate_scene_frames(
    n_frames: int,
    *,
    seed: int = 0,
    frame_size: int = 64,
    camera: str = "front_pixels",
    episode_steps: tuple[int, int] = (300, 750),
    frame_every: int = 2,
    random_share: float = 0.1,
    workers: int = 1,
    log=None,
) -> FrameSet:
    """Rolls out scripted and random episodes of the five Scene tasks until ``n_frames`` frames are kept.

    Episodes cycle through tasks 1-5 and do not end when the task is solved (the agent goes on
    with random subtasks); their length is drawn from ``episode_steps``, and every
    ``frame_every``-th observation is rendered and kept (the reset frame included): consecutive
    frames at 20 Hz barely differ, so more episodes for the same rendering cost. The episodes'
    lengths, env seeds (``>= 2**20``; the scorer-quality benchmark's held-out episodes use seeds
    from 1000) and policy seeds are drawn from ``seed`` before any is played, and each episode
    gets its own :class:`~vlmrb_torchrl.envs.ogbench.policies.ScenePolicy`: a seed gives the same
    frames, whatever ``workers`` is.

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
        workers (int, optional): processes that play the episodes (spawned; each renders with its
            own OpenGL context). ``1`` plays them in this process. Defaults to ``1``.
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

    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"generate_scene_frames: workers must be an int >= 1, got workers={workers!r}.")
    plan = _plan(n_frames, seed, episode_steps, frame_every)
    args = (camera, frame_size, episode_steps[1] + 1, frame_every, random_share)
    t0, done, reported = time.perf_counter(), 0, 0
    played: dict[int, tuple[np.ndarray, list[SceneState], str]] = {}

    def progress(result) -> None:
        nonlocal done, reported
        index, frames, states, mode = result
        played[index] = (frames, states, mode)
        done += len(frames)
        if log is not None and done - reported >= 2000:
            reported = done
            log(f"scene frames: {done}/{n_frames} ({len(played)}/{len(plan)} episodes, "
                f"{time.perf_counter() - t0:.0f} s)")

    if workers == 1:
        try:
            for episode in plan:
                progress(_roll(episode, *args))
        finally:
            _close_envs()
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawn: a forked OpenGL context or torch thread pool is not safe to use in the child
        with ProcessPoolExecutor(max_workers=min(workers, len(plan)), mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_worker_init) as pool:
            # longest episodes first: the last worker to finish waits least
            futures = [pool.submit(_roll, episode, *args) for episode in sorted(plan, key=lambda e: -e.frames)]
            for future in as_completed(futures):
                progress(future.result())
    frames: list[np.ndarray] = []
    states: list[SceneState] = []
    kinds: list[int] = []
    episodes: list[int] = []
    for episode in plan:
        ep_frames, ep_states, mode = played[episode.index]
        frames += list(ep_frames)
        states += ep_states
        kinds += [SCENE_EPISODE_KINDS.index(f"scene-task{episode.task}/{mode}")] * len(ep_frames)
        episodes += [episode.index] * len(ep_frames)
    return FrameSet(frames, states, np.asarray(kinds, dtype=np.int64), np.asarray(episodes, dtype=np.int64),
                    list(SCENE_EPISODE_KINDS))
