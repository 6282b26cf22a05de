"""The built-in robosuite Lift scorer: statements, the scripted agent, the training tool, ``builtin:lift``."""

from __future__ import annotations

import itertools
import json
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from vlmrb_torchrl.envs.robosuite.policies import LiftState  # noqa: E402
from vlmrb_torchrl.envs.robosuite import training as lift  # noqa: E402
from vlmrb_torchrl.envs.robosuite.domain import LIFT_EDGE_SHARE, LIFT_MISS_SHARE  # noqa: E402
from vlmrb_torchrl.scorer_training.domains import FrameSet, get_domain, load_frames, save_frames  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ------------------------------------------------------------------------------ statements (no simulator)
def test_statements_are_one_of_each_pair_and_worded():
    pairs = list(lift.LIFT_QUESTIONS.values())
    assert sorted(s for pair in pairs for s in pair) == sorted(lift.all_statements())
    words = set(lift.vocabulary())
    for flags in itertools.product((False, True), repeat=4):
        true = lift.true_statements(LiftState(*flags))
        assert all(len(true & set(pair)) == 1 for pair in pairs), flags
    for statement in lift.all_statements():
        assert all(set(w.split()) <= words for w in lift.wordings(statement))
    with pytest.raises(ValueError, match="unknown Lift statement"):
        lift.wordings(("holds", "any", "key"))


def test_frame_cache_round_trip(tmp_path):
    states = [LiftState(False, True, True, False), LiftState(True, False, False, False)]
    data = FrameSet([np.full((4, 4, 3), i, np.uint8) for i in range(2)], states, np.array([0, 2]), np.array([0, 0]),
                    list(lift.LIFT_EPISODE_KINDS))
    save_frames(data, tmp_path / "f.npz")
    back = load_frames(tmp_path / "f.npz")
    assert back.states == states and back.layouts == data.layouts
    assert all(np.array_equal(a, b) for a, b in zip(back.frames, data.frames))
    assert back.layout.tolist() == [0, 2] and back.episode.tolist() == [0, 0]


def test_frame_cache_unpickles_nothing(tmp_path):
    # issue 35: `vlmrb build-scorer --cache DIR` unpickled the cache files it found there
    import pickle

    from vlmrb_torchrl.envs.minigrid.policies import MiniGridState

    nested = MiniGridState(("yellow", "key"), (("red", "ball"),), (("yellow", "locked"),), ("grey", "wall", ""), False,
                           3, "left", ((("red", "ball"), ("yellow", "door")),))
    data = FrameSet([np.zeros((2, 2, 3), np.uint8)], [nested], np.array([0]), np.array([0]), ["DoorKey"])
    save_frames(data, tmp_path / "f.npz")
    assert load_frames(tmp_path / "f.npz").states == [nested]  # nested tuples come back as tuples

    class Planted:
        def __reduce__(self):
            return open, (str(tmp_path / "ran"), "w")

    old = np.frombuffer(pickle.dumps([Planted()]), dtype=np.uint8)  # what a cache of an older version held
    np.savez(tmp_path / "old.npz", frames=np.zeros((1, 2, 2, 3), np.uint8), layout=np.zeros(1), episode=np.zeros(1),
             layouts=np.asarray(["DoorKey"]), states=old)
    with pytest.raises(ValueError, match="not a frame cache of this version"):
        load_frames(tmp_path / "old.npz")
    assert not (tmp_path / "ran").exists()


def test_unknown_domain():
    with pytest.raises(ValueError, match="Unknown scorer domain 'tetris'"):
        get_domain("tetris")


# ------------------------------------------------------------------------------ the simulator
robosuite = pytest.importorskip("robosuite")

from vlmrb_torchrl.envs.robosuite.env import RobosuiteEnv  # noqa: E402
from vlmrb_torchrl.envs.robosuite.policies import LiftPolicy, lift_state  # noqa: E402


def test_scripted_policy_grasps_and_lifts_and_the_state_matches_the_flags():
    env = RobosuiteEnv("Lift", seed=0, max_episode_steps=100, terminate_on_success=False)
    try:
        env.set_seed(5)
        td = env.reset()
        policy = LiftPolicy(env, seed=0, random_share=0.0, miss_share=0.0, noise=(0.0,), burst_prob=0.0)
        assert policy.mode == "scripted"
        seen = []
        for _ in range(100):
            td = env.step(policy(td))["next"]
            state = lift_state(env)
            assert state.grasped == bool(td["grasping"])
            assert state.lifted == bool(td["lifted"] or td["success"])
            assert state.progress == bool(td["progress_event"])
            seen.append(state)
        assert any(s.grasped for s in seen) and any(s.lifted for s in seen)
        assert not seen[0].grasped and any(s.gripper_open for s in seen[:30])  # approaches open
        assert all(s.near for s in seen if s.grasped)
    finally:
        env.close()


def test_policy_modes_are_drawn_per_episode_from_its_seed():
    env = RobosuiteEnv("Lift", seed=0, max_episode_steps=20)
    try:
        def modes(seed):
            policy = LiftPolicy(env, seed=seed, random_share=0.3, miss_share=0.5)
            out = []
            for _ in range(20):
                policy.reset()
                out.append(policy.mode)
            return out

        assert modes(1) == modes(1)
        assert set(modes(1)) == {"scripted", "miss", "random"}
    finally:
        env.close()


# ------------------------------------------------------------------------------ the shipped model
from vlmrb_torchrl.scorer_training import weights_sha256  # noqa: E402
from vlmrb_torchrl.scorers import make_scorer  # noqa: E402
from vlmrb_torchrl.scorers.builtin import LIFT_HOLD, LIFT_PROMPT_SET, builtin_model_dir, lift_prompt_set  # noqa: E402


def test_shipped_lift_model_files_and_card():
    path = builtin_model_dir("lift")
    card = (path / "MODEL_CARD.md").read_text()
    assert weights_sha256(path) in card and "vlmrb build-scorer lift" in card
    assert (path / "model.safetensors").stat().st_size < 5 * 2**20
    report = json.loads((path / "training.json").read_text())
    assert report["weights_sha256"] == weights_sha256(path)
    assert (report["config"]["frames"], report["config"]["steps"], report["steps_done"]) == (60_000, 4000, 4000)
    # the frames the SAC recipe renders for it on Lift
    assert report["frames_rendered"] == {"camera": "front_close", "frame_size": 64, "fast_render": True}
    # the episodes the command plays by default (the record of a build from before edge aims has no edge_share)
    kinds = report["episode_kinds"]
    assert kinds["miss_share"] == LIFT_MISS_SHARE and kinds.get("edge_share", 0.0) == LIFT_EDGE_SHARE
    assert 'camera="front_close"' in card and "fast_render=True" in card
    # 4 px patches (a 16x16 grid): a finger on the cube is a few pixels, less than an 8 px patch
    assert report["config"]["size"] == "fine" and get_domain("lift").default_config.size == "fine"
    config = json.loads((path / "config.json").read_text())["vision_config"]
    assert (config["image_size"], config["patch_size"]) == (64, 4)


def test_shipped_lift_hand_model_files_and_card():
    """builtin:lift's second model: the gripper camera's, rebuilt by `vlmrb build-scorer lift_hand`."""
    from vlmrb_torchrl.envs.robosuite import LIFT_PANEL_CAMERAS, LIFT_SCORER_CAMERA
    from vlmrb_torchrl.envs.robosuite.env import ROBOSUITE_VIEWS, PanelView
    from vlmrb_torchrl.scorers.builtin import builtin_panel_model_dirs

    front, hand = builtin_panel_model_dirs("lift")
    assert front == builtin_model_dir("lift") and hand.name == "lift_hand"
    card = (hand / "MODEL_CARD.md").read_text()
    assert weights_sha256(hand) in card and "vlmrb build-scorer lift_hand" in card
    assert (hand / "model.safetensors").stat().st_size < 5 * 2**20
    report = json.loads((hand / "training.json").read_text())
    assert report["weights_sha256"] == weights_sha256(hand)
    domain = get_domain("lift_hand")
    assert (report["config"]["frames"], report["config"]["steps"], report["steps_done"]) == (
        domain.default_config.frames, domain.default_config.steps, 2000) == (30_000, 2000, 2000)
    assert report["config"]["size"] == domain.default_config.size == "fine"
    assert report["frames_rendered"] == {"camera": "robot0_eye_in_hand", "frame_size": 64, "fast_render": True}
    assert report["episode_kinds"]["miss_share"] == LIFT_MISS_SHARE and report["episode_kinds"]["edge_share"] == 0.0
    # the SAC recipe renders both cameras side by side, the front one on the left
    view = ROBOSUITE_VIEWS[LIFT_SCORER_CAMERA]
    assert isinstance(view, PanelView) and view.panels == (ROBOSUITE_VIEWS["front_close"], "robot0_eye_in_hand")
    assert LIFT_PANEL_CAMERAS == ("front_close", "robot0_eye_in_hand")
    assert json.loads((front / "training.json").read_text())["frames_rendered"]["camera"] == LIFT_PANEL_CAMERAS[0]
    assert domain.frames_tag == "robot0_eye_in_hand-fast" and get_domain("lift").frames_tag == "front_close-fast"



def test_builtin_lift_carries_its_tuned_decision_threshold_for_its_own_checks_only():
    from vlmrb_torchrl.scorers.builtin import BUILTIN_DECISION_THRESHOLDS, builtin_decision_threshold

    assert make_scorer("builtin:lift").decision_threshold == BUILTIN_DECISION_THRESHOLDS["lift"] == 0.01
    other = make_scorer("builtin:lift", prompt="the robot grasps the cube", negatives=["the cube is not grasped"])
    assert not hasattr(other, "decision_threshold")
    assert not hasattr(make_scorer("builtin:minigrid"), "decision_threshold")
    assert builtin_decision_threshold("builtin:lift") == 0.01
    assert builtin_decision_threshold("builtin:scene-task2") == BUILTIN_DECISION_THRESHOLDS["scene"] == 0.95
    assert builtin_decision_threshold("builtin") == builtin_decision_threshold("builtin:atari") == 0.5


def test_builtin_lift_counts_a_grasp_or_lift_only_when_it_lasts_3_frames(monkeypatch):
    """Both checks hold 3 frames (tuned on seeds 3000-3029: LIFT_HOLD, studies/builtin_scorer_builds.md): a grasp or a lift read
    for 1-2 frames inside a clip is dropped, one read for 3 frames counts; ``hold=1`` is the plain ``max``."""
    pytest.importorskip("transformers")
    assert LIFT_HOLD == 3 and [c.hold for c in LIFT_PROMPT_SET] == [3, 3]
    assert [c.aggregation for c in LIFT_PROMPT_SET] == ["max", "max"]
    assert lift_prompt_set(hold=1) == tuple(c._replace(hold=1) for c in LIFT_PROMPT_SET)
    scorer = make_scorer("builtin:lift")
    plain = scorer.with_prompt_set(list(lift_prompt_set(hold=1)))
    assert scorer.prompt_set == LIFT_PROMPT_SET
    assert scorer.provenance["prompt"].startswith('max of max[hold=3]("the robot grasps the cube"')
    assert scorer.provenance["prompt_hash"] != plain.provenance["prompt_hash"]

    def probs(check: int, start: int, frames: int) -> torch.Tensor:
        p = torch.full((17, 2), 0.05)  # a 16-step clip and its outcome frame
        p[start : start + frames, check] = 0.95
        return p

    clips = {"grasp 1 frame": probs(0, 8, 1), "grasp 2 frames": probs(0, 8, 2), "lift 2 frames": probs(1, 5, 2),
             "grasp 3 frames": probs(0, 8, 3), "lift 3 frames": probs(1, 5, 3), "none": probs(0, 0, 0)}
    batch = TensorDict(pixels=torch.zeros(len(clips), 17, 64, 128, 3, dtype=torch.uint8),
                       mask=torch.ones(len(clips), 17, dtype=torch.bool), batch_size=[len(clips), 17])
    for s in (scorer, plain):  # both panels' models read the same: the combined reading is theirs
        for member in s.members:
            monkeypatch.setattr(member, "_check_probabilities", lambda _: list(clips.values()))
    held = dict(zip(clips, scorer.score(batch).tolist()))
    assert [name for name, score in held.items() if score > 0.5] == ["grasp 3 frames", "lift 3 frames"], held
    assert max(held["grasp 1 frame"], held["grasp 2 frames"], held["lift 2 frames"]) < 0.1
    assert [name for name, score in zip(clips, plain.score(batch).tolist()) if score > 0.5] == list(clips)[:-1]


def test_builtin_lift_scores_a_rendered_grasp_high_and_the_approach_low():
    """Frames rendered as the SAC recipe renders them (both cameras side by side): clips showing the grasp
    score above the decision threshold, clips of the arm far from the cube below it; the prompt set is the
    default."""
    pytest.importorskip("transformers")
    from vlmrb_torchrl.envs.robosuite import LIFT_SCORER_CAMERA

    scorer = make_scorer("builtin:lift")
    assert [c.positive for c in scorer.prompt_set] == [c.positive for c in LIFT_PROMPT_SET]
    env = RobosuiteEnv("Lift", seed=0, render=True, camera=LIFT_SCORER_CAMERA, max_episode_steps=60,
                       terminate_on_success=False)
    try:
        env.set_seed(7)
        td = env.reset()
        policy = LiftPolicy(env, seed=3, random_share=0.0, miss_share=0.0, noise=(0.0,), burst_prob=0.0)
        frames, states = [td["pixels"]], [lift_state(env)]
        for _ in range(45):
            td = env.step(policy(td))["next"]
            frames.append(td["pixels"])
            states.append(lift_state(env))
    finally:
        env.close()
    grasp = [i for i, s in enumerate(states) if s.grasped]
    far = [i for i, s in enumerate(states) if not s.near and not s.progress]
    assert len(grasp) >= 6 and len(far) >= 6
    starts = {"grasp": [grasp[0], grasp[-1] - 3], "far": [far[0], far[2]]}
    clips = torch.stack([torch.stack(frames[t : t + 4]) for t in starts["grasp"] + starts["far"]])
    assert clips.shape[2:] == (64, 128, 3)
    clips = TensorDict(pixels=clips, mask=torch.ones(clips.shape[:2], dtype=torch.bool), batch_size=clips.shape[:2])
    scores = scorer.score(clips).tolist()
    threshold = scorer.decision_threshold
    assert all(s > threshold for s in scores[:2]) and all(s < threshold for s in scores[2:]), scores



@pytest.mark.slow  # renders frames and trains
def test_tool_builds_a_tiny_lift_model_end_to_end(tmp_path):
    pytest.importorskip("transformers")
    from vlmrb_torchrl.cli import main

    args = ["build-scorer", "lift", "--frames", "60", "--steps", "2", "--batch-size", "8", "--size", "micro"]
    assert main([*args, "--out", str(tmp_path / "a"), "--cache", str(tmp_path / "cache")]) == 0
    assert (tmp_path / "cache" / "lift-front_close-fast-60-seed0-v4.npz").is_file()
    assert main([*args, "--out", str(tmp_path / "b"), "--cache", str(tmp_path / "cache")]) == 0  # from the cache
    assert weights_sha256(tmp_path / "a") == weights_sha256(tmp_path / "b")
    card = (tmp_path / "a" / "MODEL_CARD.md").read_text()
    assert "builtin:lift" in card and "--cache" not in card and "vlmrb build-scorer lift --frames 60" in card
    report = json.loads((tmp_path / "a" / "training.json").read_text())
    assert set(report["val_accuracy"]) <= set(lift.LIFT_QUESTIONS) and report["statement_shares"]["grasped"] > 0
    scorer = make_scorer(f"clip:{tmp_path / 'a'}", prompt_set=LIFT_PROMPT_SET)
    clips = torch.zeros(2, 3, 64, 64, 3, dtype=torch.uint8)
    scores = scorer.score(TensorDict(pixels=clips, mask=torch.ones(2, 3, dtype=torch.bool), batch_size=[2, 3]))
    assert scores.shape == (2,) and bool(((scores >= 0) & (scores <= 1)).all())
