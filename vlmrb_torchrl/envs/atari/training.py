"""Captioned Pong and Breakout frames: statements from the RAM and the reward events, and the frames themselves.

A frame makes four statements true, one of each kind (every other statement is false in it, so
the contrastive loss's negatives are exact):

- the game: "this is a game of pong" / "... breakout";
- the last digit of the agent's score, read from the RAM
  (:func:`~vlmrb_torchrl.envs.atari.policies.score_digit`): "the green score ends in three" (Pong:
  the big green digits on the right) / "the score ends in three" (Breakout: the small digits at
  the top left). Every point the agent scores changes it, and nothing else does: a clip in which
  it changes is a clip with a positive reward, what ``oracle:atari`` labels;
- where the ball is, read from the RAM (:func:`~vlmrb_torchrl.envs.atari.policies.ball_position`):
  Pong behind the orange paddle (the agent is about to score), behind the green one, in the
  field, not on the court; Breakout at the bricks, in the middle, at the paddle or below, not
  in play;
- the event, from the rewards and lives: Pong "the green paddle scores a point" (positive
  reward), "the orange paddle scores a point" (negative reward), "no point is scored";
  Breakout "the ball breaks a brick" (positive reward), "the ball is lost" (a lost life),
  "no brick breaks". An event at step ``t`` labels the frame after step ``t`` and the frame
  before it (after step ``t - 1``): a clip contains the frame before step ``t`` exactly when it
  contains step ``t``, which is what ``oracle:atari`` labels (a positive reward on one of the
  clip's steps).

``builtin:atari`` is trained on the game and score statements alone, on frames of the score box
(``frame_view="score"``): a score box shows neither the ball nor the paddles. The ball and event
statements stay for models of the whole screen (``frame_view="screen"``).

Frames are rendered by :class:`~vlmrb_torchrl.envs.AtariEnv` (``frame_size=64``, evaluation
mode: whole games), whose ``"pixels"`` are those of :class:`~vlmrb_torchrl.envs.BatchedAtariEnv`,
the recipe's env, for the same emulator state; episodes are played by
:class:`~vlmrb_torchrl.envs.atari.policies.AtariPolicy` (scripted with noise and bursts, or
random).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from vlmrb_torchrl.envs.atari.policies import ATARI_POLICY_GAMES, BALL_POSITIONS
from vlmrb_torchrl.scorer_training.domains import FrameSet, table_vocabulary, table_wordings

__all__ = ["AtariFrameState", "ATARI_STATEMENTS", "ATARI_QUESTIONS", "ATARI_EPISODE_KINDS", "EVENTS",
           "true_statements", "wordings", "all_statements", "vocabulary", "generate_atari_frames", "frame_events"]

Statement = tuple[str, ...]

#: The score digits' words.
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

#: The events per game (the last one: nothing happened).
EVENTS = {"Pong": ("player_scores", "opponent_scores", "none"), "Breakout": ("brick", "lost", "none")}


@dataclasses.dataclass(frozen=True)
class AtariFrameState:
    """What a caption says about one frame.

    Attributes:
        game (str): ``"Pong"`` or ``"Breakout"``.
        ball (str): one of ``BALL_POSITIONS[game]``.
        event (str): one of ``EVENTS[game]``.
        digit (int): the last digit of the agent's score.
    """

    game: str
    ball: str
    event: str
    digit: int = 0


def all_statements() -> list[Statement]:
    """Every statement, in a fixed order."""
    out: list[Statement] = [("game", g.lower()) for g in ATARI_POLICY_GAMES]
    for game in ATARI_POLICY_GAMES:
        g = game.lower()
        out += [(g, "ball", p) for p in BALL_POSITIONS[game]] + [(g, "event", e) for e in EVENTS[game]]
        out += [(g, "score", d) for d in DIGITS]
    return out


#: Every statement (see :func:`all_statements`).
ATARI_STATEMENTS: tuple[Statement, ...] = tuple(all_statements())

#: Frame-level validation questions: each group's true statement ranked first.
ATARI_QUESTIONS: dict[str, tuple[Statement, ...]] = {
    "game": tuple(("game", g.lower()) for g in ATARI_POLICY_GAMES),
    **{f"{g.lower()}_{kind}": tuple((g.lower(), kind, v) for v in values)
       for g in ATARI_POLICY_GAMES for kind, values in (("ball", BALL_POSITIONS[g]), ("event", EVENTS[g]),
                                                        ("score", DIGITS))},
}

_WORDINGS: dict[Statement, tuple[str, ...]] = {
    ("game", "pong"): ("this is a game of pong", "the game is pong", "a screen of pong"),
    ("game", "breakout"): ("this is a game of breakout", "the game is breakout", "a screen of breakout"),
    ("pong", "ball", "behind_orange"): ("the ball is behind the orange paddle", "the ball gets past the orange paddle",
                                        "the ball is at the left edge of the court"),
    ("pong", "ball", "behind_green"): ("the ball is behind the green paddle", "the ball gets past the green paddle",
                                       "the ball is at the right edge of the court"),
    ("pong", "ball", "field"): ("the ball is in play between the paddles", "the ball is on the court"),
    ("pong", "ball", "none"): ("there is no ball on the court", "the pong ball is not in play"),
    ("pong", "event", "player_scores"): ("the green paddle scores a point", "the green player wins the point",
                                         "the agent scores a point in pong"),
    ("pong", "event", "opponent_scores"): ("the orange paddle scores a point", "the orange player wins the point"),
    ("pong", "event", "none"): ("no point is scored in pong", "the rally goes on"),
    ("breakout", "ball", "bricks"): ("the ball is at the bricks", "the ball reaches the wall of bricks"),
    ("breakout", "ball", "middle"): ("the ball flies between the bricks and the paddle",
                                     "the ball is in the middle of the screen"),
    ("breakout", "ball", "bottom"): ("the ball is down at the paddle", "the ball is at the bottom of the screen"),
    ("breakout", "ball", "none"): ("there is no ball in breakout", "the breakout ball is not in play"),
    ("breakout", "event", "brick"): ("the ball breaks a brick", "a brick breaks", "the ball hits a brick"),
    ("breakout", "event", "lost"): ("the ball is lost", "the ball falls past the paddle", "the player loses a life"),
    ("breakout", "event", "none"): ("no brick breaks", "the ball bounces without breaking a brick"),
    **{("pong", "score", d): (f"the green score ends in {d}", f"the green player's points end in {d}") for d in DIGITS},
    **{("breakout", "score", d): (f"the score ends in {d}", f"the player's score ends in {d}") for d in DIGITS},
}

#: What the frames' ``layout`` index names: the game and the kind of episode a frame comes from.
ATARI_EPISODE_KINDS = tuple(f"{g}/{mode}" for g in ATARI_POLICY_GAMES for mode in ("scripted", "random"))


def true_statements(state: AtariFrameState) -> frozenset[Statement]:
    """The four statements true in ``state``.

    Examples:
        >>> sorted(true_statements(AtariFrameState("Pong", "behind_orange", "player_scores", 3)))
        [('game', 'pong'), ('pong', 'ball', 'behind_orange'), ('pong', 'event', 'player_scores'),
         ('pong', 'score', 'three')]
    """
    g = state.game.lower()
    return frozenset({("game", g), (g, "ball", state.ball), (g, "event", state.event), (g, "score", DIGITS[state.digit])})


def wordings(statement: Statement) -> tuple[str, ...]:
    """The sentences that say ``statement`` (the first is the canonical one, used in prompts).

    Examples:
        >>> wordings(("breakout", "event", "brick"))[0]
        'the ball breaks a brick'
    """
    return table_wordings(_WORDINGS, statement, "Atari")


def vocabulary(extra: Iterable[str] = ()) -> list[str]:
    """The words of every wording (plus ``extra`` sentences), sorted: the tokenizer's vocabulary."""
    return table_vocabulary(_WORDINGS, extra)


def frame_events(game: str, rewards: np.ndarray, lives_lost: np.ndarray) -> list[str]:
    """The event of each frame of an episode: frame ``i`` follows step ``i`` (frame 0: the reset).

    ``rewards[i]`` / ``lives_lost[i]``: the raw reward and the lost life of the step that led to
    frame ``i`` (0 / False for the reset frame). An event at step ``t`` labels frames ``t - 1`` and
    ``t``; a positive reward wins over a negative one or a lost life.

    Examples:
        >>> frame_events("Breakout", np.array([0, 0, 1, 0, 0]), np.array([0, 0, 0, 0, 1], dtype=bool))
        ['none', 'brick', 'brick', 'lost', 'lost']
    """
    n = len(rewards)
    scored = rewards > 0
    bad = rewards < 0 if game == "Pong" else np.asarray(lives_lost, dtype=bool)
    at_or_before = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for flags, out in ((scored, at_or_before[0]), (bad, at_or_before[1])):
        out |= flags
        out[:-1] |= flags[1:]
    good_event, bad_event = EVENTS[game][0], EVENTS[game][1]
    return [good_event if at_or_before[0][i] else bad_event if at_or_before[1][i] else "none" for i in range(n)]


#: Pong episodes that start from random scores draw new ones every this many steps: many pairs of
#: (orange, green) scores, so that the green digit is not learnt as a property of the whole frame.
PONG_RESCORE_EVERY = 64


def _set_pong_scores(env, td, orange: int, green: int):
    """Writes both Pong scores into the RAM (``ram[13]``: orange, ``ram[14]``: green) and plays one
    no-op step, whose reward (ALE's score-difference change) is dropped with it; returns that step's
    ``"next"``. A scripted agent seldom wins more than a few points, so frames of scores 0-3 alone
    would never show most digits."""
    import torch

    ale = env.unwrapped.ale
    ale.setRAM(13, int(orange))
    ale.setRAM(14, int(green))
    td["action"] = torch.tensor(0)
    return env.step(td)["next"]


def generate_atari_frames(
    n_frames: int,
    *,
    seed: int = 0,
    games: tuple[str, ...] = ATARI_POLICY_GAMES,
    frame_size: int = 64,
    episode_steps: tuple[int, int] = (400, 2500),
    random_share: float = 0.2,
    pong_score_share: float = 0.5,
    frame_view: str = "screen",
) -> FrameSet:
    """Plays Pong and Breakout episodes (alternating) until ``n_frames`` frames are collected.

    Every frame of an episode is kept, the reset frame included; an episode ends at game over or
    after a length drawn from ``episode_steps``. Each episode resets its game with a seed
    ``>= 2**20`` drawn from ``seed`` (the scorer-quality benchmark's held-out episodes use seeds
    from 1000), so a seed gives the same frames.

    Args:
        n_frames (int): frames to collect.

    Keyword Args:
        seed (int, optional): the seed. Defaults to ``0``.
        games (tuple of str, optional): the games. Defaults to Pong and Breakout.
        frame_size (int, optional): frames are ``[frame_size, frame_size, 3]``. Defaults to ``64``
            (the recipe's).
        episode_steps (tuple of int, optional): ``(min, max)`` steps per episode.
        random_share (float, optional): share of uniformly random episodes (:class:`AtariPolicy`).
        pong_score_share (float, optional): share of Pong episodes played from random scores
            (0-19 each, written into the RAM at the reset and every :data:`PONG_RESCORE_EVERY`
            steps without a point), so that every digit of the green score appears, next to
            many orange ones.
        frame_view (str, optional): what the frames show, ``"screen"`` or ``"score"``
            (:class:`~vlmrb_torchrl.envs.AtariEnv`'s ``frame_view``). Defaults to ``"screen"``.

    Returns:
        FrameSet: the frames with their :class:`AtariFrameState` (``layouts`` are
        :data:`ATARI_EPISODE_KINDS`).

    Examples:
        >>> data = generate_atari_frames(20, seed=0)  # doctest: +SKIP
        >>> len(data), data.frames[0].shape  # doctest: +SKIP
        (20, (64, 64, 3))
    """
    from vlmrb_torchrl.envs.atari.env import AtariEnv
    from vlmrb_torchrl.envs.atari.policies import AtariPolicy, ball_position, score_digit

    rng = np.random.default_rng(seed)
    envs = {game: AtariEnv(f"ALE/{game}-v5", train=False, render=True, frame_size=frame_size, frame_view=frame_view,
                           max_episode_steps=episode_steps[1]) for game in games}
    policies = {game: AtariPolicy(env, seed=int(rng.integers(2**31)), random_share=random_share)
                for game, env in envs.items()}
    frames: list[np.ndarray] = []
    states: list[AtariFrameState] = []
    kinds: list[int] = []
    episodes: list[int] = []
    episode = 0
    try:
        while len(frames) < n_frames:
            game = games[episode % len(games)]
            env, policy = envs[game], policies[game]
            env.set_seed(int(rng.integers(2**20, 2**31)))
            td = env.reset()
            policy.reset()
            ale = env.unwrapped.ale
            rescore = game == "Pong" and rng.random() < pong_score_share
            if rescore:
                td = _set_pong_scores(env, td, *rng.integers(0, 20, size=2))
            steps = int(rng.integers(episode_steps[0], episode_steps[1] + 1))
            ram = ale.getRAM()
            ep_frames, balls, digits, rewards, lost = [td["pixels"].numpy()], [ball_position(game, ram)], \
                [score_digit(game, ram)], [0.0], [False]
            lives = env.lives
            for t in range(min(steps, n_frames - len(frames) - 1)):
                nxt = env.step(policy(td))["next"]
                if rescore and t % PONG_RESCORE_EVERY == PONG_RESCORE_EVERY - 1 and float(nxt["raw_reward"]) == 0 \
                        and not bool(nxt["done"]):
                    nxt = _set_pong_scores(env, nxt, *rng.integers(0, 20, size=2))
                    nxt["raw_reward"].zero_()
                ep_frames.append(nxt["pixels"].numpy())
                ram = ale.getRAM()
                balls.append(ball_position(game, ram))
                digits.append(score_digit(game, ram))
                rewards.append(float(nxt["raw_reward"]))
                lost.append(env.lives < lives)
                lives = env.lives
                if bool(nxt["done"]):
                    break
                td = nxt
            events = frame_events(game, np.asarray(rewards), np.asarray(lost))
            frames += ep_frames
            states += [AtariFrameState(game, b, e, d) for b, e, d in zip(balls, events, digits)]
            kinds += [ATARI_EPISODE_KINDS.index(f"{game}/{policy.mode}")] * len(ep_frames)
            episodes += [episode] * len(ep_frames)
            episode += 1
    finally:
        for env in envs.values():
            env.close()
    return FrameSet(frames[:n_frames], states[:n_frames], np.asarray(kinds[:n_frames], dtype=np.int64),
                    np.asarray(episodes[:n_frames], dtype=np.int64), list(ATARI_EPISODE_KINDS))
