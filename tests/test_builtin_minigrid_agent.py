"""MiniGrid's agent-centred view: ``MiniGridEnv(frame_view="agent")``, the ``minigrid_agent`` training domain,
``builtin:minigrid_agent`` and how the DQN recipe and the scorer-quality benchmark pick the frames a scorer reads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("transformers")
pytest.importorskip("minigrid")

from vlmrb_torchrl.envs import FRAME_VIEWS, BatchedMiniGridEnv, MiniGridEnv  # noqa: E402
from vlmrb_torchrl.envs.minigrid import scorer_frame_view  # noqa: E402
from vlmrb_torchrl.recipes.config import ConfigError, DQNConfig, apply_overrides  # noqa: E402
from vlmrb_torchrl.scorer_training import BuildConfig, build_scorer, weights_sha256  # noqa: E402
from vlmrb_torchrl.scorers import make_scorer  # noqa: E402
from vlmrb_torchrl.scorers.builtin import builtin_model_dir  # noqa: E402

MICRO = BuildConfig(frames=120, steps=2, batch_size=16, size="micro", held_out_frames=0, eval_every=100)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ------------------------------------------------------------------------------ the env's frames
def test_agent_view_frames_are_minigrids_own_and_follow_the_agent():
    env = MiniGridEnv("MiniGrid-DoorKey-8x8-v0", seed=3, frame_view="agent")
    assert FRAME_VIEWS == ("grid", "agent") and env.frame_view == "agent"
    td = env.reset()
    assert td["pixels"].shape == env.observation_spec["pixels"].shape == (63, 63, 3)  # 7 tiles of 64 // 7 px
    for _ in range(5):
        np.testing.assert_array_equal(td["pixels"].numpy(), env.unwrapped.get_pov_render(9))
        td = env.rand_step(td)["next"]
    # turning changes what the agent sees; the grid view of the same state is another image
    grid = MiniGridEnv("MiniGrid-DoorKey-8x8-v0", seed=3)
    assert grid.reset()["pixels"].shape == (64, 64, 3)
    # the agent stands at the bottom centre (row 6, column 3 of the 7x7 view), drawn in red (lightened by the
    # highlight of the cells it sees): red well above green there, nowhere in the top row
    frame = env.reset()["pixels"].int()
    redness = (frame[..., 0] - frame[..., 1]).reshape(7, 9, 7, 9).amax(dim=(1, 3))
    assert redness[6, 3] > 100 and int(redness[0].max()) < 100


def test_agent_view_is_the_same_size_on_every_grid_and_batches():
    for env_id in ("MiniGrid-DoorKey-16x16-v0", "BabyAI-GoToLocal-v0"):
        assert MiniGridEnv(env_id, seed=0, frame_view="agent").reset()["pixels"].shape == (63, 63, 3)
    batched = BatchedMiniGridEnv(2, "MiniGrid-DoorKey-5x5-v0", frame_view="agent")
    batched.set_seed(0)
    assert batched.reset()["pixels"].shape == (2, 63, 63, 3)


def test_frame_view_errors():
    with pytest.raises(ValueError, match="frame_view must be one of \\('grid', 'agent'\\), got 'pov'"):
        MiniGridEnv("MiniGrid-DoorKey-5x5-v0", frame_view="pov")


# ------------------------------------------------------------------------------ the training domain
def test_minigrid_agent_build_records_its_frames(tmp_path):
    from vlmrb_torchrl.envs.minigrid.training import generate_frames
    from vlmrb_torchrl.scorer_training.domains import get_domain

    domain = get_domain("minigrid_agent")
    assert domain.name == "minigrid_agent" and [axis for axis, _ in domain.symmetries] == ["horizontal"]
    grid, agent = generate_frames(40, seed=5), generate_frames(40, seed=5, frame_view="agent")
    assert grid.states == agent.states  # the same episodes, other frames
    assert {f.shape for f in agent.frames} == {(63, 63, 3)}
    report = build_scorer("minigrid_agent", tmp_path, MICRO, log=None)
    assert report["frames_rendered"] == {"frame_view": "agent", "frame_size": 64}
    assert "agent-centred view" in (tmp_path / "MODEL_CARD.md").read_text()
    assert scorer_frame_view(f"clip:{tmp_path}") == "agent"
    # the flips: left-right only (the view has an up)
    flipped = build_scorer("minigrid_agent", tmp_path / "aug", BuildConfig(**{**MICRO.__dict__, "augment": True}),
                           log=None)
    assert flipped["weights_sha256"] != report["weights_sha256"]


# ------------------------------------------------------------------------------ the shipped model
def test_shipped_agent_model_files_and_card():
    path = builtin_model_dir("minigrid_agent")
    report = json.loads((path / "training.json").read_text())
    assert report["weights_sha256"] == weights_sha256(path) and weights_sha256(path) in (path / "MODEL_CARD.md").read_text()
    assert report["frames_rendered"]["frame_view"] == "agent"
    assert "vlmrb build-scorer minigrid_agent" in report["command"]
    assert (path / "model.safetensors").stat().st_size < 5 * 2**20


def _mission_frames(env_id: str, seed: int, actions: int = 6):
    """Frames of the agent-centred view of a scripted episode that follows its mission, to the step that ends it."""
    from vlmrb_torchrl.envs.minigrid.policies import MissionPolicy

    env = MiniGridEnv(env_id, seed=seed, frame_view="agent")
    td = env.reset()
    policy = MissionPolicy(seed=seed)
    frames = [td["pixels"]]
    for _ in range(60):
        td["action"] = torch.tensor(policy.act(env.unwrapped, allowed=list(range(actions))))
        td = env.step(td)
        frames.append(td["next", "pixels"])
        if bool(td["next", "done"]):
            return env.mission, frames
        td = td["next"]
    raise AssertionError("the scripted agent did not finish the mission")


def _clips(*clips: list) -> TensorDict:
    pixels = torch.stack([torch.stack(c) for c in clips])
    return TensorDict(pixels=pixels, mask=torch.ones(pixels.shape[:2], dtype=torch.bool), batch_size=pixels.shape[:2])


@pytest.mark.parametrize("seed", [1234, 1, 3])
def test_shipped_agent_model_sees_a_pickup(seed):
    """BabyAI-PickupDist (never trained on, a single room: ``doors=False`` as the recipe passes), the mission's
    checks on the agent-centred view: the clip that ends on picking up a key scores high, the same clip without
    its last frame (the key still on the floor) lower, a clip of the first frame repeated (nothing happens) near
    0. (Balls and boxes read lower, 0.28-0.50 at seeds 2, 7, 11, 13, 14: studies/builtin_scorer_builds.md.)"""
    mission, frames = _mission_frames("BabyAI-PickupDist-v0", seed)
    assert "key" in mission
    scorer = make_scorer("builtin:minigrid_agent", task=mission, doors=False)
    assert scorer.provenance["checks_from"] == "mission"
    before = frames[-6:-1]
    pickup, not_yet, still = scorer.score(_clips(frames[-5:], (before[:-1] + [before[-1]] * 2)[-5:],
                                                 [frames[0]] * 5)).tolist()
    assert pickup > 0.5 and not_yet < pickup and still < 0.1, (mission, pickup, not_yet, still)


@pytest.mark.parametrize("env_id,seed", [("BabyAI-GoToLocal-v0", 2), ("BabyAI-GoToLocal-v0", 3),
                                         ("BabyAI-GoToObj-v0", 3), ("BabyAI-GoToObj-v0", 7)])
def test_shipped_agent_model_sees_a_go_to(env_id, seed):
    """A "go to X" mission's check on the agent-centred view: the clip that ends facing X scores above 0.5
    (against "does not face X" it scored 0.03-0.3 on most such clips: studies/builtin_scorer_builds.md), the first
    frame repeated near 0."""
    mission, frames = _mission_frames(env_id, seed, actions=7)
    assert mission.startswith("go to")
    reached, still = make_scorer("builtin:minigrid_agent", task=mission, doors=False).score(
        _clips(frames[-5:], [frames[0]] * 5)).tolist()
    assert reached > 0.5 and still < 0.1, (mission, reached, still)


# ------------------------------------------------------------------------------ the recipe picks the frames
def test_dqn_auto_scorer_and_frame_view_follow_the_mission():
    doorkey = DQNConfig().validate()
    assert (doorkey.scorer, doorkey.frame_view) == ("builtin:minigrid", "grid")
    goto = apply_overrides(DQNConfig(), ["env=BabyAI-GoToLocal-v0"]).validate()
    assert (goto.scorer, goto.frame_view) == ("builtin:minigrid_agent", "agent")
    lava = apply_overrides(DQNConfig(), ["env=MiniGrid-LavaCrossingS9N1-v0"]).validate()  # "get to the green goal"
    assert lava.scorer == "builtin:minigrid"
    forced = apply_overrides(DQNConfig(), ["scorer=builtin:minigrid_agent"]).validate()  # DoorKey, told
    assert (forced.scorer, forced.frame_view) == ("builtin:minigrid_agent", "agent")
    assert apply_overrides(DQNConfig(), ["frame_view=agent", "replay=uniform"]).validate().frame_view == "agent"
    with pytest.raises(ConfigError, match="frame_view='grid' is invalid: expected agent with scorer=builtin:minigrid_agent"):
        apply_overrides(DQNConfig(), ["scorer=builtin:minigrid_agent", "frame_view=grid"]).validate()
    with pytest.raises(ConfigError, match="frame_view='agent' is invalid: expected grid with scorer=builtin:minigrid"):
        apply_overrides(DQNConfig(), ["frame_view=agent"]).validate()
    with pytest.raises(ConfigError, match="frame_view='agent' is invalid: expected auto or screen or score on Atari envs"):
        apply_overrides(DQNConfig(), ["env=ALE/Pong-v5", "frame_view=agent"]).validate()
    with pytest.raises(ConfigError, match="frame_view='score' is invalid: expected auto or grid or agent on MiniGrid"):
        apply_overrides(DQNConfig(), ["frame_view=score", "replay=uniform"]).validate()


def test_scorer_quality_reads_the_scorers_frames():
    import argparse
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "scorer_quality.py"
    spec = importlib.util.spec_from_file_location("scorer_quality_frames", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    view = {s: module._frame_view(argparse.Namespace(frame_view="auto", scorer=s, env="MiniGrid-DoorKey-5x5-v0"))
            for s in ("builtin:minigrid_agent", "builtin:minigrid", "oracle:minigrid")}
    assert view == {"builtin:minigrid_agent": "agent", "builtin:minigrid": "grid", "oracle:minigrid": "grid"}
    assert module._frame_view(argparse.Namespace(frame_view="agent", scorer="oracle:minigrid", env="MiniGrid-DoorKey-5x5-v0")) == "agent"
