"""builtin:minigrid follows the task: checks derived from the mission, per episode or per clip."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
from tensordict import TensorDict

from vlmrb_torchrl.envs.minigrid.captions import all_statements, wordings
from vlmrb_torchrl.envs.minigrid.prompts import GENERIC_CHECKS, minigrid_task_checks, mission_prompt_set
from vlmrb_torchrl.scorers.prompts import PromptCheck

DOORKEY = "use the key to open the door and then get to the goal"


def _known_texts() -> set[str]:
    return {text for s in all_statements() for text in wordings(s)}


def test_doorkey_mission_gives_the_doorkey_set():
    from vlmrb_torchrl.scorers.builtin import MINIGRID_PROMPT_SET

    assert mission_prompt_set(DOORKEY) == MINIGRID_PROMPT_SET
    assert GENERIC_CHECKS == MINIGRID_PROMPT_SET


@pytest.mark.parametrize("mission,expected", [
    # against what else the faced cell can hold, not against "does not face" (see _faces)
    ("go to the red ball", [("max", "the agent faces the red ball", (
        "the agent faces the empty floor", "the agent faces a wall", "the agent faces the red key",
        "the agent faces the red box"))]),
    ("go to a box", [("max", "the agent faces the box", (
        "the agent faces the empty floor", "the agent faces a wall", "the agent faces the key",
        "the agent faces the ball"))]),
    ("go to the red door", [("max", "the agent faces the red door", (
        "the agent faces the empty floor", "the agent faces a wall", "the agent faces the red key",
        "the agent faces the red ball", "the agent faces the red box"))]),
    ("pick up a key", [("progress", "the agent holds the key", ("the key is on the floor",))]),
    ("open the purple door", [
        ("rise", "the purple door is open", ("the purple door is closed", "there is no purple door")),
        ("progress", "the agent holds the purple key", ("the purple key is on the floor",))]),
    ("unlock the blue door", [("progress", "the blue door is unlocked", ("the blue door is locked",))]),
    ("put the red ball next to the blue box", [
        ("progress", "the red ball is next to the blue box",
         ("the red ball is not next to the blue box", "the agent holds the red ball")),
        # X picked up and put down, both rise (one clip often holds both)
        ("rise", "the agent holds the red ball", ("the red ball is on the floor",)),
        ("rise", "the red ball is on the floor", ("the agent holds the red ball",))]),
    ("put the blue box near the red ball", [  # the wording names the moved object first
        ("progress", "the blue box is next to the red ball",
         ("the blue box is not next to the red ball", "the agent holds the blue box")),
        ("rise", "the agent holds the blue box", ("the blue box is on the floor",)),
        ("rise", "the blue box is on the floor", ("the agent holds the blue box",))]),
])
def test_each_verb_and_its_implied_checks(mission, expected):
    checks = mission_prompt_set(mission)
    got = [(c.aggregation, c.positive, c.negatives) for c in checks]
    assert got[: len(expected)] == expected
    names_door = "door" in mission
    implied = [c.positive for c in checks[len(expected):]]
    if names_door:
        assert implied == []
    else:  # the door to the target's room, faced (and its key, unless the mission names a key)
        keys = [] if "key" in mission else ["the agent holds the key"]
        assert implied == ["the agent faces the open door", *keys]
        faced = checks[len(expected)]
        assert (faced.aggregation, faced.negatives) == ("rise", (
            "the agent faces the closed door", "the agent faces the locked door", "the agent faces the empty floor",
            "the agent faces a wall"))


@pytest.mark.parametrize("mission", ["go to the red ball", "pick up a key", "put the red ball next to the blue box",
                                     "get to the green goal square", "open the purple door"])
def test_without_doors_the_implied_door_checks_are_left_out(mission):
    with_doors = mission_prompt_set(mission)
    without = mission_prompt_set(mission, doors=False)
    implied = {"the agent faces the open door"}
    assert not implied & {c.positive for c in without}
    if "door" in mission:  # a door the mission names keeps its checks, and the key of it
        assert without == with_doors
    else:  # the mission's own checks, in order; the implied key goes with the implied door
        assert without == tuple(c for c in with_doors if c.positive not in implied | {"the agent holds the key"}
                                or "key" in mission and c.positive == "the agent holds the key")
    assert minigrid_task_checks(mission, doors=False) == (without, "mission")


def test_goal_sequences_objects_and_locations():
    assert [c.positive for c in mission_prompt_set("get to the green goal square")] == [
        "the agent is on the goal", "the agent faces the open door", "the agent holds the key"]
    # "object": one check per type; a location is dropped; checks are not repeated
    checks = mission_prompt_set("pick up the green object on your left, then pick up a green key")
    assert [c.positive for c in checks][:3] == ["the agent holds the green key", "the agent holds the green ball",
                                                "the agent holds the green box"]
    assert len(checks) == len(set(checks))
    seq = mission_prompt_set("open the red door, then go to the blue door after you pick up the yellow box")
    assert [c.positive for c in seq] == ["the agent holds the yellow box", "the red door is open",
                                         "the agent holds the red key", "the agent faces the blue door"]
    # put next to without colours: only the pickup and the drop (the model's "next to" statements name colours)
    assert [(c.aggregation, c.positive) for c in mission_prompt_set("put a ball next to the green door")] == [
        ("rise", "the agent holds the ball"), ("rise", "the ball is on the floor")]


@pytest.mark.parametrize("mission", [
    DOORKEY, "go to a grey door after you go to a yellow key and go to the green box",
    "pick up the key and pick up a box on your left, then put a ball next to the green door behind you and open a door",
    "get the blue key from the yellow room, unlock the blue door and go to the goal",
    "put the yellow key next to the purple box, then put the green ball next to the purple ball",
    "avoid the lava and get to the green goal square", "you must fetch a purple key", "go to the red door",
])
def test_every_check_is_made_of_trained_statements(mission):
    known = _known_texts()
    for check in mission_prompt_set(mission):
        assert check.positive in known and all(n in known for n in check.negatives), check


def test_unparsable_mission_warns_and_falls_back():
    with pytest.warns(UserWarning, match="cannot read the mission 'dance'.*generic checks"):
        checks, source = minigrid_task_checks("dance")
    assert (checks, source) == (GENERIC_CHECKS, "generic")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert minigrid_task_checks(None) == (GENERIC_CHECKS, "default")
        assert minigrid_task_checks("go to the red ball")[1] == "mission"
    assert mission_prompt_set("") is None


# ----------------------------------------------------------------------------- the scorers
pytest.importorskip("transformers")
pytest.importorskip("minigrid")

from vlmrb_torchrl.envs import MiniGridEnv  # noqa: E402
from vlmrb_torchrl.envs.minigrid.env import BatchedMiniGridEnv  # noqa: E402
from vlmrb_torchrl.envs.minigrid.missions import MISSION_BYTES, decode_mission, encode_mission  # noqa: E402
from vlmrb_torchrl.scorers import make_scorer  # noqa: E402
from vlmrb_torchrl.envs.minigrid.prompts import MissionScorer, with_mission  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def base():
    return make_scorer("builtin:minigrid")


def _episode_clips(env_id: str, seeds, steps: int = 6) -> TensorDict:
    """One clip per seed: the first ``steps`` frames of a random episode, with its mission entry."""
    env = MiniGridEnv(env_id, write_mission=True)
    clips = []
    for seed in seeds:
        env.set_seed(seed)
        rollout = env.rollout(steps, break_when_any_done=False)
        clips.append(TensorDict(pixels=rollout["pixels"], mission=rollout["mission"],
                                mask=torch.ones(steps, dtype=torch.bool), batch_size=[steps]))
    return torch.stack(clips)


def test_builtin_scorer_takes_the_task(base):
    scorer = make_scorer("builtin:minigrid", task="pick up the blue ball")
    assert scorer.provenance["checks_from"] == "mission" and scorer.provenance["task"] == "pick up the blue ball"
    assert scorer.prompt_set == mission_prompt_set("pick up the blue ball")
    with pytest.warns(UserWarning, match="generic checks"):
        generic = make_scorer("builtin:minigrid", task="go to the matching object at the end of the hallway")
    assert generic.prompt_set == GENERIC_CHECKS and generic.provenance["checks_from"] == "generic"
    assert base.provenance.get("checks_from") == "default"
    given = make_scorer("builtin:minigrid", task="pick up the blue ball",
                        prompt_set=[PromptCheck("the agent holds the red key", ["the red key is on the floor"], "max")])
    assert given.provenance["checks_from"] == "given" and len(given.prompt_set) == 1
    with pytest.raises(ValueError, match="mission_key"):
        make_scorer("builtin:minigrid", task="open the door", mission_key="mission")


def test_with_prompt_set_shares_the_model_and_scores_like_a_fresh_scorer(base):
    clips = _episode_clips("BabyAI-GoToLocal-v0", [0, 1, 2])
    checks = mission_prompt_set("go to the red ball, then pick up the blue key")
    derived = base.with_prompt_set(checks)
    assert derived.model is base.model and derived._cache is base._cache and derived._lock is base._lock
    fresh = make_scorer("builtin:minigrid", prompt_set=list(checks))
    assert torch.allclose(derived.score(clips), fresh.score(clips), atol=1e-6)
    assert derived.provenance["prompt_hash"] == fresh.provenance["prompt_hash"]
    assert base.prompt_set == GENERIC_CHECKS  # the base is untouched
    same = with_mission(base, DOORKEY)
    assert torch.equal(same.score(clips), base.score(clips))


def test_check_scores_are_each_checks_score(base):
    clips = _episode_clips("BabyAI-GoToLocal-v0", [0, 1])
    per_check = base.check_scores(clips)
    assert per_check.shape == (2, len(base.prompt_set)) and per_check.dtype == torch.float32
    assert torch.equal(per_check.max(-1).values, base.score(clips))
    alone = make_scorer("builtin:minigrid", prompt_set=[base.prompt_set[1]]).score(clips)
    assert torch.allclose(per_check[:, 1], alone, atol=1e-6)


def test_mission_scorer_scores_each_clip_with_its_own_mission(base):
    clips = _episode_clips("BabyAI-GoToLocal-v0", [0, 1, 2, 3])
    missions = [decode_mission(m) for m in clips["mission"][:, 0]]
    assert len(set(missions)) > 1  # the mission changes every episode
    scorer = MissionScorer(base)
    scores = scorer.score(clips)
    for i, mission in enumerate(missions):
        alone = make_scorer("builtin:minigrid", task=mission).score(clips[i : i + 1])
        assert scores[i].item() == pytest.approx(alone.item(), abs=1e-6)
    assert set(scorer.missions_seen()) == set(missions)
    assert scorer.in_keys == ["pixels", "mask", "mission"] and scorer.provenance["checks_from"] == "mission per clip"
    # the mission is read at a clip's first real step
    padded = clips.clone()
    padded["mask"][:, 0] = False
    padded["mission"][:, 0] = torch.from_numpy(encode_mission("open the door"))
    assert torch.allclose(scorer.score(padded)[:1], MissionScorer(base).score(clips[:1, 1:]), atol=1e-6)
    with pytest.raises(KeyError, match="mission"):
        scorer.score(clips.exclude("mission"))
    again = pickle.loads(pickle.dumps(scorer))
    assert isinstance(again, MissionScorer) and torch.allclose(again.score(clips), scores, atol=1e-6)
    via_spec = make_scorer("builtin:minigrid", mission_key="mission")
    assert isinstance(via_spec, MissionScorer) and via_spec.doors
    # doors=False reaches each mission's checks, and survives pickling (the process backend)
    single_room = make_scorer("builtin:minigrid", mission_key="mission", doors=False)
    assert single_room.provenance["doors"] is False
    for mission in missions:
        assert single_room.scorer_for(mission).prompt_set == mission_prompt_set(mission, doors=False)
    again = pickle.loads(pickle.dumps(single_room))
    assert again.doors is False and again.provenance["doors"] is False
    assert again.scorer_for(missions[0]).prompt_set == mission_prompt_set(missions[0], doors=False)
    with pytest.raises(ValueError, match="doors="):
        make_scorer("builtin:lift", doors=False)


def test_env_writes_the_mission():
    env = MiniGridEnv("BabyAI-GoToLocal-v0", seed=0, render=False, write_mission=True)
    td = env.reset()
    assert env.observation_spec["mission"].shape == (MISSION_BYTES,) and td["mission"].dtype == torch.uint8
    assert decode_mission(td["mission"]) == env.mission
    assert "mission" not in MiniGridEnv("BabyAI-GoToLocal-v0", render=False).observation_spec.keys()
    batched = BatchedMiniGridEnv(3, "BabyAI-GoToLocal-v0", render=False, write_mission=True, seed=0)
    td = batched.reset()
    at_reset = list(batched.mission)  # read now: an episode that ends during the rollout draws a new mission
    assert [decode_mission(m) for m in td["mission"]] == at_reset
    rollout = batched.rollout(4, auto_reset=False, tensordict=td, break_when_any_done=False)
    assert [decode_mission(m) for m in rollout["mission"][:, 0]] == at_reset
    with pytest.raises(ValueError, match="bytes"):
        encode_mission("go to the red ball " * 20)
