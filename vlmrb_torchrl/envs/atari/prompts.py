"""``builtin:atari``'s prompt set: the last digit of the agent's score, one check per game and digit.

The wordings are the canonical ones of the training captions (:mod:`vlmrb_torchrl.envs.atari.training`).
"""

from __future__ import annotations

from vlmrb_torchrl.envs.atari import ATARI_BUILTIN_GAMES
from vlmrb_torchrl.scorers.prompts import PromptCheck

__all__ = ["ATARI_BUILTIN_GAMES", "ATARI_PROMPT_SET"]

#: The score digits' words (the training captions').
_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _score_checks(template: str, other_game: str) -> tuple[PromptCheck, ...]:
    return tuple(PromptCheck(template.format(d), tuple(template.format(o) for o in _DIGITS if o != d)
                             + (f"this is a game of {other_game}",), "progress") for d in _DIGITS)


#: The checks ``builtin:atari`` scores with (score = max over checks): the canonical wordings of
#: ``vlmrb_torchrl.envs.atari.training``. One check per game and last digit of the agent's score,
#: ``progress`` (the clip's last frame minus its first): a clip in which the digit turns into ``d``
#: scores high on ``d``'s check, one in which it stays the same scores ~0 on every check. Each
#: check's negatives include the other game, so a Breakout clip scores low on the Pong checks and
#: the other way round.
ATARI_PROMPT_SET: tuple[PromptCheck, ...] = (_score_checks("the green score ends in {}", "breakout")
                                             + _score_checks("the score ends in {}", "pong"))
