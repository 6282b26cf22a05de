"""The built-in Atari scorer: statements, RAM readings, the training tool, ``builtin:atari``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl.envs.atari import training as atari
from vlmrb_torchrl.scorers.builtin import ATARI_PROMPT_SET

pytest.importorskip("ale_py")

from vlmrb_torchrl.envs.atari.env import AtariEnv  # noqa: E402
from vlmrb_torchrl.envs.atari.policies import AtariPolicy, score_digit  # noqa: E402


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
def _play(game: str, steps: int, seed: int, frame_size: int | None = None, frame_view: str = "screen"):
    """A scripted episode: per step, the raw reward, the score digit after it and (with
    ``frame_size``) the frame after it; index 0 is the reset."""
    env = AtariEnv(f"ALE/{game}-v5", train=False, render=frame_size is not None, frame_size=frame_size or 64,
                   frame_view=frame_view)
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


# ------------------------------------------------------------------------------ the shipped model
from vlmrb_torchrl.scorer_training import weights_sha256  # noqa: E402
from vlmrb_torchrl.scorers import make_scorer  # noqa: E402
from vlmrb_torchrl.scorers.builtin import builtin_model_dir  # noqa: E402


def test_shipped_atari_model_files_and_card():
    path = builtin_model_dir("atari")
    card = (path / "MODEL_CARD.md").read_text()
    assert weights_sha256(path) in card and "vlmrb build-scorer atari" in card
    assert (path / "model.safetensors").stat().st_size < 5 * 2**20
    report = json.loads((path / "training.json").read_text())
    assert report["weights_sha256"] == weights_sha256(path)
    assert report["config"]["size"] == "atari" and report["steps_done"] == report["config"]["steps"]
    assert report["config"]["aux_weight"] > 0
    assert report["frames_rendered"] == {"atari_frame_view": "score", "frame_size": 64}


def test_score_domain_captions_only_what_a_score_box_shows():
    from vlmrb_torchrl.envs.atari.domain import atari_domain

    score, screen = atari_domain(), atari_domain("screen")
    assert {s[1] if s[0] != "game" else "game" for s in score.statements()} == {"game", "score"}
    assert len(screen.statements()) > len(score.statements()) and set(score.questions) == {
        "game", "pong_score", "breakout_score"}
    state = atari.AtariFrameState("Pong", "behind_orange", "player_scores", 3)
    assert score.true_statements(state) == {("game", "pong"), ("pong", "score", "three")}
    assert score.frames_tag == "score" and screen.frames_tag == ""
    with pytest.raises(ValueError, match="frame_view must be 'screen' or 'score'"):
        atari_domain("grid")


def test_dqn_reads_builtin_atari_on_its_score_frames():
    """frame_view=auto: the score box for builtin:atari, the screen for any other scorer; the env gets it."""
    from vlmrb_torchrl.envs import family_of
    from vlmrb_torchrl.recipes.config import ConfigError, DQNConfig, apply_overrides

    pong = apply_overrides(DQNConfig(), ["env=ALE/Pong-v5"]).validate()
    assert (pong.scorer, pong.frame_view) == ("builtin:atari", "score")
    assert family_of(pong.env).env_kwargs(pong) == {"frame_view": "score"}
    oracle = apply_overrides(DQNConfig(), ["env=ALE/Breakout-v5", "scorer=oracle:atari"]).validate()
    assert oracle.frame_view == "screen"
    # config.json of a run made before Atari had views of its own: "grid" was its one view
    assert apply_overrides(DQNConfig(), ["env=ALE/Pong-v5", "scorer=oracle:atari", "frame_view=grid"]
                           ).validate().frame_view == "screen"
    with pytest.raises(ConfigError, match="frame_view='screen' is invalid: expected score with scorer=builtin:atari"):
        apply_overrides(DQNConfig(), ["env=ALE/Pong-v5", "frame_view=screen"]).validate()
    with pytest.raises(ConfigError, match="frame_view='score' is invalid: expected screen or auto on ALE/Tennis-v5"):
        apply_overrides(DQNConfig(), ["env=ALE/Tennis-v5", "frame_view=score", "replay=uniform"]).validate()


def test_builtin_atari_scores_clips_where_the_agent_scores_higher():
    """Breakout score boxes rendered as the DQN recipe renders them for builtin:atari (held-out seed):
    8-step clips (9 frames, the outcome frame included) with a positive reward score higher on average
    than clips without one, and the clips above 0.5 are mostly positive (the model card's clip-level
    numbers: F1 0.983 on held-out Breakout games, docs/builtin_scorer.md)."""
    pytest.importorskip("transformers")
    scorer = make_scorer("builtin:atari")
    assert [c.positive for c in scorer.prompt_set] == [c.positive for c in ATARI_PROMPT_SET]
    rewards, _, frames = _play("Breakout", 250, seed=1001, frame_size=64, frame_view="score")
    starts = np.arange(0, len(frames) - 9, 4)
    positive = np.array([(rewards[s + 1 : s + 9] > 0).any() for s in starts])
    assert positive.sum() >= 3 and (~positive).sum() >= 3
    clips = torch.stack([torch.stack(frames[s : s + 9]) for s in starts])
    scores = scorer.score(TensorDict(pixels=clips, mask=torch.ones(clips.shape[:2], dtype=torch.bool),
                                     batch_size=clips.shape[:2])).numpy()
    assert scores[positive].mean() > scores[~positive].mean() + 0.1, (scores[positive], scores[~positive])
    assert positive[scores > 0.5].mean() >= 0.8, (scores[positive], scores[~positive])


@pytest.mark.slow  # emulates and trains
def test_tool_builds_a_tiny_atari_model_end_to_end(tmp_path):
    pytest.importorskip("transformers")
    from vlmrb_torchrl.cli import main

    args = ["build-scorer", "atari", "--frames", "60", "--steps", "2", "--batch-size", "8", "--size", "micro"]
    assert main([*args, "--out", str(tmp_path / "a"), "--cache", str(tmp_path / "cache")]) == 0
    assert main([*args, "--out", str(tmp_path / "b"), "--cache", str(tmp_path / "cache")]) == 0  # from the cache
    assert weights_sha256(tmp_path / "a") == weights_sha256(tmp_path / "b")
    card = (tmp_path / "a" / "MODEL_CARD.md").read_text()
    assert "builtin:atari" in card and "vlmrb build-scorer atari --frames 60" in card
    scorer = make_scorer(f"clip:{tmp_path / 'a'}", prompt_set=ATARI_PROMPT_SET)
    clips = torch.zeros(2, 3, 64, 64, 3, dtype=torch.uint8)
    scores = scorer.score(TensorDict(pixels=clips, mask=torch.ones(2, 3, dtype=torch.bool), batch_size=[2, 3]))
    assert scores.shape == (2,) and bool(((scores >= 0) & (scores <= 1)).all())
