"""Scripted Pong and Breakout agents and a reader of the games' RAM, for data generation and rollouts.

Two things live here, both reading the emulator behind an :class:`~vlmrb_torchrl.envs.AtariEnv`
(``env.unwrapped.ale``; ale-py's vector env does not expose the RAM):

- :class:`AtariPolicy` plays Pong (moves its paddle toward the ball's height: it returns most
  balls and wins some points against the built-in opponent, which misses fast balls) or Breakout
  (serves, then keeps its paddle under the ball: it breaks bricks and sometimes loses the ball),
  with per-episode epsilon-random actions and random bursts; a share of its episodes play
  uniformly at random. Called with a TensorDict it is a TorchRL policy for the env
  (``env.rollout(n, policy)``).
- :func:`score_digit` reads the last digit of the agent's score (it changes with every point);
  :func:`ball_position` reads where the ball is from the RAM (addresses of the AtariARI
  annotations, Anand et al. 2019), with thresholds checked against the games' own events: in Pong
  the ball comes back from the orange paddle at x >= 66 (the paddle's column is x = 64) and from
  the green one at x <= 192 (column 188); in Breakout every brick hit happens with the ball at
  y <= 88 and every lost ball below y = 195.

Both games must be played with their minimal action sets (``-v5`` ids' default).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

__all__ = ["AtariPolicy", "ATARI_POLICY_GAMES", "ball_position", "BALL_POSITIONS", "score_digit"]

#: The games :class:`AtariPolicy` and :func:`ball_position` know.
ATARI_POLICY_GAMES = ("Pong", "Breakout")

#: RAM addresses per game: ball x, ball y, the agent's paddle.
_RAM = {"Pong": {"ball_x": 49, "ball_y": 54, "paddle": 51}, "Breakout": {"ball_x": 99, "ball_y": 101, "paddle": 72}}

#: What :func:`ball_position` returns, per game.
BALL_POSITIONS = {
    "Pong": ("behind_orange", "behind_green", "field", "none"),
    "Breakout": ("bricks", "middle", "bottom", "none"),
}

# Minimal action sets: Pong NOOP FIRE RIGHT LEFT RIGHTFIRE LEFTFIRE (RIGHT moves the paddle up),
# Breakout NOOP FIRE RIGHT LEFT.
_NOOP, _FIRE, _RIGHT, _LEFT = 0, 1, 2, 3


def _game(env: Any) -> str:
    from vlmrb_torchrl.envs.atari.env import atari_game_name

    game = atari_game_name(env.env_id)
    if game not in ATARI_POLICY_GAMES:
        raise ValueError(f"the scripted Atari agent plays {ATARI_POLICY_GAMES}, not {env.env_id!r}.")
    return game


def ball_position(game: str, ram: np.ndarray) -> str:
    """Where the ball is, from the RAM of ``game`` (one of :data:`BALL_POSITIONS`' values).

    Pong: ``"behind_orange"`` (left of the orange paddle's column: the agent is about to score),
    ``"behind_green"`` (right of the green one: the opponent is about to score), ``"field"``,
    ``"none"`` (no ball between points). Breakout: ``"bricks"`` (at the bricks' rows),
    ``"bottom"`` (at the paddle's height or below it), ``"middle"``, ``"none"`` (not served).

    Examples:
        >>> ram = np.zeros(128, dtype=np.uint8); ram[49], ram[54] = 60, 120
        >>> ball_position("Pong", ram)
        'behind_orange'
    """
    addr = _RAM[game]
    x, y = int(ram[addr["ball_x"]]), int(ram[addr["ball_y"]])
    if y == 0:
        return "none"
    if game == "Pong":
        return "behind_orange" if x < 64 else "behind_green" if x > 192 else "field"
    return "bricks" if y <= 92 else "bottom" if y >= 180 else "middle"


def score_digit(game: str, ram: np.ndarray) -> int:
    """The last digit of the agent's score, from the RAM (Pong: the green player's points, ``ram[14]``;
    Breakout: the score's BCD low byte, ``ram[77]``). It changes with every point the agent scores:
    Pong counts one per point, Breakout 1, 4 or 7 per brick.

    Examples:
        >>> ram = np.zeros(128, dtype=np.uint8); ram[77] = 0x17  # Breakout score 17
        >>> score_digit("Breakout", ram), score_digit("Pong", ram)
        (7, 0)
    """
    if game == "Pong":
        return int(ram[14]) % 10
    return int(ram[77]) & 0x0F


class AtariPolicy:
    """A noisy scripted Pong or Breakout agent for an :class:`~vlmrb_torchrl.envs.AtariEnv`.

    At :meth:`reset` (and at construction) it draws the episode's plan: with probability
    ``random_share`` uniform random actions throughout; otherwise the script with an epsilon from
    ``epsilons`` and random bursts (``burst_prob`` per step to start 5-20 random actions).

    Args:
        env (AtariEnv): the env it acts in (``ALE/Pong-v5`` or ``ALE/Breakout-v5``, minimal actions).

    Keyword Args:
        seed (int): seeds the plan draws and the random actions.
        random_share (float): share of uniform random episodes. Defaults to ``0.2``.
        epsilons (tuple of float): per-episode epsilon choices. Defaults to ``(0.0, 0.05, 0.1, 0.2, 0.3)``.
        burst_prob (float): per-step probability of a random burst. Defaults to ``0.01``.

    Examples:
        >>> from vlmrb_torchrl.envs import make_atari_env  # doctest: +SKIP
        >>> env = make_atari_env("ALE/Pong-v5", seed=0)  # doctest: +SKIP
        >>> rollout = env.rollout(100, AtariPolicy(env, seed=0))  # doctest: +SKIP
    """

    def __init__(self, env: Any, *, seed: int = 0, random_share: float = 0.2,
                 epsilons: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.3), burst_prob: float = 0.01) -> None:
        self.env = env
        self.game = _game(env)
        self.n_actions = int(env.action_spec.space.n)
        self.random_share, self.epsilons, self.burst_prob = random_share, tuple(epsilons), burst_prob
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self) -> None:
        """Draws the next episode's plan."""
        self.mode = "random" if self.rng.random() < self.random_share else "scripted"
        self.epsilon = float(self.rng.choice(self.epsilons))
        self._burst = 0
        # where on its paddle it meets the ball: the return angle (tuned: Pong wins most points around
        # -12, Breakout keeps the ball longest around 4-10)
        self._aim = int(self.rng.integers(-14, 5)) if self.game == "Pong" else int(self.rng.integers(2, 13))

    def act(self) -> int:
        """The next action index."""
        if self.mode == "random" or self._burst > 0 or self.rng.random() < self.epsilon:
            self._burst = max(0, self._burst - 1)
            return int(self.rng.integers(self.n_actions))
        if self.rng.random() < self.burst_prob:
            self._burst = int(self.rng.integers(5, 21))
        ram = self.env.unwrapped.ale.getRAM()
        addr = _RAM[self.game]
        ball_x, ball_y, paddle = int(ram[addr["ball_x"]]), int(ram[addr["ball_y"]]), int(ram[addr["paddle"]])
        if self.game == "Pong":  # RIGHT moves the paddle up (towards small y)
            if ball_y == 0:
                return _NOOP
            target = ball_y + self._aim
            return _RIGHT if target < paddle - 2 else _LEFT if target > paddle + 2 else _NOOP
        if ball_y == 0:  # no ball in play: serve
            return _FIRE
        target = paddle + self._aim
        return _RIGHT if ball_x > target + 2 else _LEFT if ball_x < target - 2 else _NOOP

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        return td.set("action", torch.tensor(self.act(), dtype=torch.int64))
