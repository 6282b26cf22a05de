"""MiniGrid / BabyAI missions: the parser, the sub-goal tracker behind the oracle, the mission-following agent."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlmrb_torchrl.envs.minigrid.missions import Mission, MissionTracker, Subgoal, Thing, parse_mission

PARSED = {
    # MiniGrid's own missions
    "use the key to open the door and then get to the goal": [["pick up the key"], ["unlock the door"],
                                                              ["get to the goal"]],
    "get to the green goal square": [["get to the goal"]],
    "reach the goal": [["get to the goal"]],
    "traverse the rooms to get to the goal": [["get to the goal"]],
    "avoid the lava and get to the green goal square": [["get to the goal"]],
    "find the opening and get to the green goal square": [["get to the goal"]],
    "open the door": [["open the door"]],
    "pick up the green box": [["pick up the green box"]],
    "get the blue key from the yellow room, unlock the blue door and go to the goal": [
        ["open the yellow door"], ["pick up the blue key", "unlock the blue door", "get to the goal"]],
    "open the red door then the blue door": [["open the red door"], ["open the blue door"]],
    "go get a blue key": [["pick up the blue key"]],
    "you must fetch a purple key": [["pick up the purple key"]],
    "go fetch a green ball": [["pick up the green ball"]],
    "get a red ball": [["pick up the red ball"]],
    "go to the red door": [["go to the red door"]],
    "put the green ball near the red box": [["put the green ball near the red box"]],
    # BabyAI's grammar: and / then / after you, locations, "object"
    "Open the red door, then open the blue door.": [["open the red door"], ["open the blue door"]],
    "open the green door after you open the yellow door": [["open the yellow door"], ["open the green door"]],
    "go to a key and go to a grey door after you go to a yellow key and go to the green box": [
        ["go to the yellow key", "go to the green box"], ["go to the key", "go to the grey door"]],
    "pick up the key and pick up a box on your left, then put a ball next to the green door behind you and "
    "open a door": [["pick up the key", "pick up the box on your left"],
                    ["put the ball next to the green door behind you", "open the door"]],
    "put the yellow key next to the purple box, then put the green ball next to the purple ball": [
        ["put the yellow key next to the purple box"], ["put the green ball next to the purple ball"]],
    "pick up the green object": [["pick up the green object"]],
    "pick up the purple ball in front of you": [["pick up the purple ball in front of you"]],
}


@pytest.mark.parametrize("text", list(PARSED))
def test_parse_mission_grammar(text):
    mission = parse_mission(text)
    assert isinstance(mission, Mission) and mission.text == text
    assert [[s.text for s in group] for group in mission.steps] == PARSED[text]


@pytest.mark.parametrize("text", ["go to the matching object at the end of the hallway", "", "   ", "dance",
                                  "go to the red", "pick up the red door", "put the red ball on the blue box",
                                  "the blue door"])
def test_unparsable_missions_are_none(text):
    assert parse_mission(text) is None


def test_parse_details_and_validation():
    put = parse_mission("put the green ball near the red box").subgoals[0]
    assert (put.verb, put.target, put.other, put.near) == ("put_next", Thing("ball", "green"), Thing("box", "red"), True)
    assert not parse_mission("put the green ball next to the red box").subgoals[0].near
    assert parse_mission("use the key to open the door and then get to the goal").subgoals[1].locked
    assert parse_mission("pick up a box on your left").subgoals[0].target == Thing("box", None, "left")
    with pytest.raises(TypeError, match="mission str"):
        parse_mission(None)
    with pytest.raises(ValueError, match="kind"):
        Thing("chair")
    with pytest.raises(ValueError, match="color"):
        Thing("ball", "pink")
    with pytest.raises(ValueError, match="door"):
        Subgoal("open", Thing("ball"))
    with pytest.raises(ValueError, match="fixed object"):
        Subgoal("put_next", Thing("ball"))
    with pytest.raises(TypeError, match="Mission"):
        MissionTracker("go to the red ball")


# ----------------------------------------------------------------------------- the oracle's events
pytest.importorskip("minigrid")

from vlmrb_torchrl.envs import DOORKEY_ACTIONS, MiniGridEnv  # noqa: E402
from vlmrb_torchrl.envs.minigrid.policies import MissionPolicy  # noqa: E402


def _random_flags(env_id: str, seeds, steps: int, actions=None):
    """Per step of random episodes: the env's flags (stepped through the env's array path, without
    TensorDicts, for speed: the flags are the same)."""
    from vlmrb_torchrl.envs.minigrid.env import MINIGRID_EVENT_KEYS

    env = MiniGridEnv(env_id, render=False, actions=actions)
    rng = np.random.default_rng(0)
    rows = []
    for seed in seeds:
        env.set_seed(seed)
        env._reset_arrays()
        for _ in range(steps):
            _, flags, _ = env._step_arrays(int(rng.integers(env.action_spec.space.n)))
            rows.append(dict(zip(MINIGRID_EVENT_KEYS, flags)))
            if flags[-1]:  # done
                break
    return rows


@pytest.mark.parametrize("size", [5, 6, 8, 16])
def test_doorkey_labels_are_unchanged(size):
    """On DoorKey oracle:minigrid's label is exactly what it was before missions: the first key pickup,
    the first door opening, the goal (what the DoorKey studies use)."""
    rows = _random_flags(f"MiniGrid-DoorKey-{size}x{size}-v0", range(8), 600, actions=DOORKEY_ACTIONS)
    old = [r["key_picked_up"] or r["door_opened"] or r["goal_reached"] or r["success"] for r in rows]
    assert [r["progress_event"] for r in rows] == old
    assert sum(old) >= 3  # the random episodes do show events
    assert all(r["subgoal"] == (r["key_picked_up"] or r["door_opened"] or r["goal_reached"]) for r in rows)


def test_doorkey_scripted_episode_events():
    env = MiniGridEnv("MiniGrid-DoorKey-6x6-v0", seed=3, render=False)
    rollout = env.rollout(200, MissionPolicy(env, seed=0))
    assert bool(rollout["next", "success"][-1])
    sub = rollout["next", "subgoal"].squeeze(-1)
    old = (rollout["next", "key_picked_up"] | rollout["next", "door_opened"] | rollout["next", "goal_reached"]).squeeze(-1)
    assert torch.equal(sub, old) and int(sub.sum()) == 3


def test_unparsable_mission_keeps_the_generic_labels():
    rows = _random_flags("MiniGrid-MemoryS7-v0", range(3), 200)
    assert not any(r["subgoal"] for r in rows)
    assert [r["progress_event"] for r in rows] == [r["key_picked_up"] or r["door_opened"] or r["goal_reached"]
                                                    or r["success"] for r in rows]


def test_implied_subgoals_of_the_layout():
    env = MiniGridEnv("MiniGrid-KeyCorridorS3R1-v0", seed=0, render=False)
    env.reset()
    tracker = env.mission_tracker
    assert env.mission == "pick up the purple ball"
    # the ball's room is locked (yellow), its key lies behind a closed door (blue)
    assert [s.text for s in tracker.implied] == ["unlock the yellow door", "pick up the yellow key", "open the blue door"]
    env = MiniGridEnv("BabyAI-PutNextLocal-v0", seed=1, render=False)
    env.reset()
    assert env.mission == "put the yellow key next to the purple box"
    assert [s.text for s in env.mission_tracker.implied] == ["pick up the yellow key"]
    env = MiniGridEnv("MiniGrid-MemoryS7-v0", seed=0, render=False)
    env.reset()
    assert env.mission_tracker is None


def test_sequence_order_counts():
    """"open the red door then the blue door": opening the blue door first is not a sub-goal."""
    env = MiniGridEnv("MiniGrid-RedBlueDoors-6x6-v0", seed=0, render=False)
    env.reset()
    menv = env.unwrapped
    tracker = MissionTracker(parse_mission(env.mission))
    tracker.reset(menv)
    menv.blue_door.is_open = True
    assert not tracker.step()
    menv.blue_door.is_open = False
    assert not tracker.step()
    menv.red_door.is_open = True
    assert tracker.step()
    assert not tracker.step()  # nothing new
    menv.blue_door.is_open = True
    assert tracker.step() and tracker.complete


@pytest.mark.parametrize("env_id,subgoals", [
    ("MiniGrid-DoorKey-8x8-v0", 3), ("BabyAI-PutNextLocal-v0", 2), ("MiniGrid-KeyCorridorS3R2-v0", None),
    ("MiniGrid-BlockedUnlockPickup-v0", 3), ("BabyAI-GoToSeqS5R2-v0", None), ("MiniGrid-GoToObject-8x8-N2-v0", 1),
    ("MiniGrid-Fetch-8x8-N3-v0", 1), ("MiniGrid-RedBlueDoors-6x6-v0", 2), ("BabyAI-MoveTwoAcrossS5N2-v0", 4),
])
def test_mission_policy_solves_and_reaches_every_subgoal(env_id, subgoals):
    env = MiniGridEnv(env_id, render=False)
    for seed in (1000, 1001):
        env.set_seed(seed)
        rollout = env.rollout(500, MissionPolicy(env, seed=seed))
        assert bool(rollout["next", "success"][-1]), (env_id, seed, env.mission)
        reached = int(rollout["next", "subgoal"].sum())
        # each sub-goal once: the mission's and the implied ones (KeyCorridor's: doors on the way vary)
        assert reached == len(env.mission_tracker.mission.subgoals) + len(env.mission_tracker.implied)
        if subgoals is not None:
            assert reached == subgoals, (env_id, seed, env.mission)


def test_mission_policy_is_seeded():
    runs = []
    for _ in range(2):
        env = MiniGridEnv("BabyAI-PutNextLocal-v0", seed=4, render=False)
        runs.append(env.rollout(80, MissionPolicy(env, seed=7, epsilon=0.3, burst_prob=0.05),
                                break_when_any_done=False)["action"])
    assert torch.equal(runs[0], runs[1])
