"""The built-in Atari scorer: statements, RAM readings, the training tool, ``builtin:atari``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl.scorer_training import atari
from vlmrb_torchrl.scorers.builtin import ATARI_PROMPT_SET

pytest.importorskip("ale_py")

from vlmrb_torchrl.envs.atari import AtariEnv  # noqa: E402
from vlmrb_torchrl.envs.atari_policies import AtariPolicy, score_digit  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ------------------------------------------------------------------------------ statements (no emulator)
def test_every_state_answers_every_question_of_its_game_once():
    words = set(atari.vocabulary())
    for game in ("Pong", "Breakout"):
        balls, events = atari.BALL_POSITIONS[game], atari.EVENTS[game]
        for ball in balls:
            for event in events:
                for digit in range(10):
                    true = atari.true_statements(atari.AtariFrameState(game, ball, event, digit))
                    assert len(true) == 4
                    for name, options in atari.ATARI_QUESTIONS.items():
                        asked = name == "game" or name.startswith(game.lower())
                        assert len(true & set(options)) == (1 if asked else 0), (name, game)
    for statement in atari.all_statements():
        assert all(set(w.split()) <= words for w in atari.wordings(statement))
    with pytest.raises(ValueError, match="unknown Atari statement"):
        atari.wordings(("pong", "score", "eleven"))


def test_prompt_set_speaks_the_training_captions():
    """Every text of builtin:atari's checks is a canonical wording the model was trained on."""
    canonical = {atari.wordings(s)[0] for s in atari.all_statements()}
    assert len(ATARI_PROMPT_SET) == 20
    for check in ATARI_PROMPT_SET:
        assert check.aggregation == "progress" and len(check.negatives) == 10
        assert {check.positive, *check.negatives} <= canonical, check


# ------------------------------------------------------------------------------ the emulator
def _play(game: str, steps: int, seed: int, frame_size: int | None = None):
    """A scripted episode: per step, the raw reward, the score digit after it and (with
    ``frame_size``) the frame after it; index 0 is the reset."""
    env = AtariEnv(f"ALE/{game}-v5", train=False, render=frame_size is not None, frame_size=frame_size or 64)
    try:
        env.set_seed(seed)
        td = env.reset()
        policy = AtariPolicy(env, seed=seed, random_share=0.0, epsilons=(0.0,), burst_prob=0.0)
        policy.reset()
        rewards, digits, frames = [0.0], [score_digit(game, env.unwrapped.ale.getRAM())], []
        if frame_size:
            frames.append(td["pixels"])
        for _ in range(steps):
            td = env.step(policy(td))["next"]
            rewards.append(float(td["raw_reward"]))
            digits.append(score_digit(game, env.unwrapped.ale.getRAM()))
            if frame_size:
                frames.append(td["pixels"])
            if bool(td["done"]):
                break
    finally:
        env.close()
    return np.asarray(rewards), np.asarray(digits), frames


@pytest.mark.parametrize("game,steps", [("Breakout", 300), ("Pong", 600)])
def test_score_digit_changes_exactly_when_the_agent_scores(game, steps):
    """Breakout: bricks break (positive rewards); Pong: the scripted agent loses points (negative
    rewards, the orange digits), which must not move the green one."""
    rewards, digits, _ = _play(game, steps, seed=3)
    changed = digits[1:] != digits[:-1]
    assert (rewards[1:] != 0).sum() >= 2
    assert np.array_equal(changed, rewards[1:] > 0)
