"""Captioned robosuite Lift frames: statements about the gripper and the cube, and the frames themselves.

Statements come in four pairs of opposites, each decided by the simulator's state
(:class:`~vlmrb_torchrl.envs.robosuite.policies.LiftState`): the gripper is open or closed, near
the cube or far from it, grasps the cube or does not, and the cube is lifted off the table or
rests on it. Exactly one of each pair is true in a frame, so every statement not in a frame's set
is false there (the contrastive loss's negatives are exact). "Grasps" is robosuite's
``_check_grasp`` and "lifted" the env's ``lifted`` / ``success`` flags: the two together are the
events ``oracle:robosuite`` labels, which is what ``builtin:lift`` is measured against.

Frames are rendered by :class:`~vlmrb_torchrl.envs.RobosuiteEnv` exactly as the SAC recipe renders
them for its scorer (one camera of its ``camera="front_close+eye_in_hand"``: ``front_close``, a camera 45 cm
in front of the cube where a lift is plain, or ``robot0_eye_in_hand``, the gripper's own; ``frame_size=64``;
``fast_render=True``: no shadows, reflections or multisampling), in episodes of the scripted
:class:`~vlmrb_torchrl.envs.robosuite.policies.LiftPolicy` (approach, grasp, lift, hold, put down
or drop, with noise, random bursts, grasps aimed beside the cube and grasps aimed at its edge) and of
random arm motion.
A fast frame costs ~10-15 ms on a CPU (Mesa's software rasteriser), on top of a ~25 ms step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

from vlmrb_torchrl.envs.robosuite.policies import LiftState, lift_state
from vlmrb_torchrl.scorer_training.domains import FrameSet, table_vocabulary, table_wordings

__all__ = ["LIFT_STATEMENTS", "LIFT_QUESTIONS", "LIFT_EPISODE_KINDS", "true_statements", "wordings",
           "all_statements", "vocabulary", "generate_lift_frames"]

Statement = tuple[str, ...]

#: The four pairs of opposites (one of each is true in every frame), in a fixed order.
LIFT_STATEMENTS: tuple[Statement, ...] = (
    ("gripper", "open"), ("gripper", "closed"),
    ("near",), ("far",),
    ("grasped",), ("not_grasped",),
    ("lifted",), ("on_table",),
)

#: Frame-level validation questions: each pair, the true one ranked first.
LIFT_QUESTIONS: dict[str, tuple[Statement, ...]] = {
    "gripper": (("gripper", "open"), ("gripper", "closed")),
    "near": (("near",), ("far",)),
    "grasped": (("grasped",), ("not_grasped",)),
    "lifted": (("lifted",), ("on_table",)),
}

_WORDINGS: dict[Statement, tuple[str, ...]] = {
    ("gripper", "open"): ("the gripper is open", "the gripper fingers are open", "the robot opens its gripper"),
    ("gripper", "closed"): ("the gripper is closed", "the gripper fingers are closed", "the robot closes its gripper"),
    ("near",): ("the gripper is near the cube", "the gripper is close to the red cube", "the robot reaches the cube"),
    ("far",): ("the gripper is far from the cube", "the gripper is away from the red cube"),
    ("grasped",): ("the robot grasps the cube", "the gripper holds the red cube", "the robot is holding the cube"),
    ("not_grasped",): ("the robot does not hold the cube", "the cube is not grasped", "the gripper holds nothing"),
    ("lifted",): ("the cube is lifted off the table", "the red cube is in the air", "the robot lifts the cube"),
    ("on_table",): ("the cube is on the table", "the red cube rests on the table"),
}

#: What the frames' ``layout`` index names: the kind of episode a frame comes from.
LIFT_EPISODE_KINDS = ("Lift/scripted", "Lift/miss", "Lift/random", "Lift/edge")


def true_statements(state: LiftState) -> frozenset[Statement]:
    """The four statements true in ``state`` (one of each pair).

    Examples:
        >>> from vlmrb_torchrl.envs.robosuite.policies import LiftState
        >>> sorted(true_statements(LiftState(gripper_open=False, near=True, grasped=True, lifted=False)))
        [('grasped',), ('gripper', 'closed'), ('near',), ('on_table',)]
    """
    return frozenset({
        ("gripper", "open" if state.gripper_open else "closed"),
        ("near",) if state.near else ("far",),
        ("grasped",) if state.grasped else ("not_grasped",),
        ("lifted",) if state.lifted else ("on_table",),
    })


def wordings(statement: Statement) -> tuple[str, ...]:
    """The sentences that say ``statement`` (the first is the canonical one, used in prompts).

    Examples:
        >>> wordings(("grasped",))[0]
        'the robot grasps the cube'
    """
    return table_wordings(_WORDINGS, statement, "Lift")


def all_statements() -> list[Statement]:
    """Every statement, in a fixed order."""
    return list(LIFT_STATEMENTS)


def vocabulary(extra: Iterable[str] = ()) -> list[str]:
    """The words of every wording (plus ``extra`` sentences), sorted: the tokenizer's vocabulary.

    Examples:
        >>> {"gripper", "grasps", "cube", "lifted", "table"} <= set(vocabulary())
        True
    """
    return table_vocabulary(_WORDINGS, extra)


def generate_lift_frames(
    n_frames: int,
    *,
    seed: int = 0,
    frame_size: int = 64,
    camera: str = "front_close",
    fast_render: bool = True,
    episode_steps: tuple[int, int] = (80, 160),
    random_share: float = 0.2,
    miss_share: float = 0.2,
    edge_share: float = 0.0,
    log: Callable[[str], None] | None = None,
    log_every: int = 2000,
) -> FrameSet:
    """Rolls out scripted and random Lift episodes until ``n_frames`` frames are collected.

    Every frame of an episode is kept, the reset frame included. Episodes do not end on success
    (the cube is lifted, held, put down or dropped, and grasped again); their length is drawn from
    ``episode_steps``. Each episode resets the cube's placement from a seed ``>= 2**20`` drawn from
    ``seed`` (the scorer-quality benchmark's held-out episodes use seeds from 1000), so a seed gives
    the same frames.

    Args:
        n_frames (int): frames to collect.

    Keyword Args:
        seed (int, optional): the seed. Defaults to ``0``.
        frame_size (int, optional): frames are ``[frame_size, frame_size, 3]``. Defaults to ``64``
            (the SAC recipe's).
        camera (str, optional): the camera (:class:`~vlmrb_torchrl.envs.RobosuiteEnv`'s). Defaults to
            ``"front_close"`` (the left panel of the SAC recipe's Lift frames; ``builtin:lift``'s second model
            reads the right one, ``"robot0_eye_in_hand"``).
        fast_render (bool, optional): render without shadows, reflections and multisampling, as the SAC
            recipe does by default. Defaults to ``True``.
        episode_steps (tuple of int, optional): ``(min, max)`` steps per episode.
        random_share (float, optional): share of random-motion episodes (:class:`LiftPolicy`).
        miss_share (float, optional): share of scripted episodes aiming beside the cube.
        edge_share (float, optional): share of scripted episodes aiming at the cube's edge
            (:class:`LiftPolicy`): brief, awkward grasps. Defaults to ``0.0`` (the frames of builds
            before it).
        log (callable, optional): progress lines (every ``log_every`` frames, and the last) go here: a
            30,000-frame build renders for ~19 minutes. Defaults to ``None`` (silent).
        log_every (int, optional): frames between progress lines. Defaults to ``2000``.

    Returns:
        FrameSet: the frames with their :class:`LiftState` (``layouts`` are
        :data:`LIFT_EPISODE_KINDS`).

    Examples:
        >>> data = generate_lift_frames(20, seed=0)  # doctest: +SKIP
        >>> len(data), data.frames[0].shape  # doctest: +SKIP
        (20, (64, 64, 3))
    """
    from vlmrb_torchrl.envs.robosuite.env import RobosuiteEnv
    from vlmrb_torchrl.envs.robosuite.policies import LiftPolicy

    if not isinstance(log_every, int) or log_every < 1:
        raise ValueError(f"generate_lift_frames: log_every must be an int >= 1, got log_every={log_every!r}.")
    rng = np.random.default_rng(seed)
    # a seed at construction too: robosuite draws the cube's size (2.0-2.2 cm) when it builds the model;
    env = RobosuiteEnv("Lift", render=True, camera=camera, frame_size=frame_size, max_episode_steps=episode_steps[1],
                       terminate_on_success=False, seed=int(rng.integers(2**20, 2**31)), fast_render=fast_render)
    policy = LiftPolicy(env, seed=int(rng.integers(2**31)), random_share=random_share, miss_share=miss_share,
                         edge_share=edge_share)
    frames: list[np.ndarray] = []
    states: list[LiftState] = []
    kinds: list[int] = []
    episodes: list[int] = []
    episode, reported, t0 = 0, 0, time.perf_counter()
    try:
        while len(frames) < n_frames:
            env.set_seed(int(rng.integers(2**20, 2**31)))
            td = env.reset()
            policy.reset()
            steps = int(rng.integers(episode_steps[0], episode_steps[1] + 1))
            start = len(frames)
            frames.append(td["pixels"].numpy())
            states.append(lift_state(env))
            for _ in range(steps):
                if len(frames) >= n_frames:
                    break
                td = env.step(policy(td))["next"]
                frames.append(td["pixels"].numpy())
                states.append(lift_state(env))
            kinds += [LIFT_EPISODE_KINDS.index(f"Lift/{policy.mode}")] * (len(frames) - start)
            episodes += [episode] * (len(frames) - start)
            episode += 1
            if log is not None and (len(frames) - reported >= log_every or len(frames) >= n_frames):
                reported = len(frames)
                log(f"lift frames: {min(reported, n_frames)}/{n_frames} ({episode} episodes, "
                    f"{time.perf_counter() - t0:.0f} s)")
    finally:
        env.close()
    return FrameSet(frames[:n_frames], states[:n_frames], np.asarray(kinds[:n_frames], dtype=np.int64),
                    np.asarray(episodes[:n_frames], dtype=np.int64), list(LIFT_EPISODE_KINDS))
