"""The built-in OGBench Scene scorer: statements, prompt sets, the scripted agent, the training tool, ``builtin:scene``."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from vlmrb_torchrl.envs.ogbench.policies import SceneState  # noqa: E402
from vlmrb_torchrl.envs.ogbench import training as scene  # noqa: E402
from vlmrb_torchrl.scorers import make_scorer  # noqa: E402
from vlmrb_torchrl.scorers.builtin import SCENE_CUBE_HOLD, SCENE_GOALS, SCENE_PROMPT_SETS, scene_prompt_set  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ------------------------------------------------------------------------------ statements and prompts (no simulator)
def test_statements_are_one_of_each_group_and_worded():
    groups = list(scene.SCENE_QUESTIONS.values())
    assert sorted(s for group in groups for s in group) == sorted(scene.all_statements())
    words = set(scene.vocabulary())
    for on_target, place, held, drawer, window, d_lock, w_lock in itertools.product(
            (False, True), ("drawer", "air", "table"), (False, True), ("open", "half", "closed"),
            ("open", "half", "closed"), (False, True), (False, True)):
        true = scene.true_statements(SceneState(on_target, place, held, drawer, window, d_lock, w_lock, (False,) * 5))
        assert all(len(true & set(group)) == 1 for group in groups)
    for statement in scene.all_statements():
        assert all(set(w.split()) <= words for w in scene.wordings(statement))
    with pytest.raises(ValueError, match="unknown Scene statement"):
        scene.wordings(("cube", "blue"))


def test_prompt_sets_ask_for_each_subgoal_in_canonical_wordings():
    canonical = {scene.wordings(s)[0]: s for s in scene.all_statements()}
    for task, checks in SCENE_PROMPT_SETS.items():
        assert len(checks) == 5 and all(c.aggregation == "rise" for c in checks)
        # only the cube check, whose reading flickers, needs its states to last
        assert [c.hold for c in checks] == [SCENE_CUBE_HOLD, 1, 1, 1, 1] and SCENE_CUBE_HOLD == 2
        assert scene_prompt_set(task, cube_hold=1) == tuple(c._replace(hold=1) for c in checks)
        for check in checks:
            positive = canonical[check.positive]
            group = next(g for g in scene.SCENE_QUESTIONS.values() if positive in g)
            # the negatives are the rest of the positive's group: together they cover every state
            assert sorted(canonical[n] for n in check.negatives) == sorted(set(group) - {positive})
    assert [c.positive for c in scene_prompt_set(2)][1:] == [
        "the drawer is locked", "the window is locked", "the drawer is closed", "the window is closed"]
    with pytest.raises(ValueError, match="unknown task=6"):
        scene_prompt_set(6)
    with pytest.raises(ValueError, match="hold must be an int >= 1"):
        scene_prompt_set(1, cube_hold=0)


def test_builtin_scene_needs_a_task():
    with pytest.raises(ValueError, match="name the task"):
        make_scorer("builtin:scene")
    with pytest.raises(ValueError, match="is not a Scene task number"):
        make_scorer("builtin:scene", task="open the drawer")
    with pytest.raises(ValueError, match="names another task"):
        make_scorer("builtin:scene-task3", task=4)
    with pytest.raises(ValueError, match="Unknown built-in scorer"):
        make_scorer("builtin:scene-taskx")


# ------------------------------------------------------------------------------ the simulator
pytest.importorskip("ogbench")

from vlmrb_torchrl.envs.ogbench.env import SceneEnv  # noqa: E402
from vlmrb_torchrl.envs.ogbench.policies import DRAWER_OPEN, WINDOW_OPEN, ScenePolicy, scene_state  # noqa: E402


def test_scene_goals_are_ogbench_tasks():
    env = SceneEnv(1, seed=0)
    try:
        infos = env.unwrapped.task_infos
    finally:
        env.close()
    assert len(infos) == len(SCENE_GOALS)
    for task, info in enumerate(infos, start=1):
        goal = info["goal"]
        assert SCENE_GOALS[task] == {
            "drawer_unlocked": bool(goal["button_states"][0]), "window_unlocked": bool(goal["button_states"][1]),
            "drawer": "open" if goal["drawer_pos"] == DRAWER_OPEN else "closed",
            "window": "open" if goal["window_pos"] == WINDOW_OPEN else "closed"}, task


def test_goal_directed_policy_solves_task_1_and_the_state_matches_the_flags():
    env = SceneEnv(1, seed=0, max_episode_steps=300)
    try:
        env.set_seed(100)
        td = env.reset()
        policy = ScenePolicy(env, seed=1, random_share=0.0, goal_shares=(1.0,), noise=(0.0,), burst_prob=0.0)
        assert policy.mode == "subtasks"
        states = []
        for _ in range(300):
            td = env.step(policy(td))
            nxt = td["next"]
            state = scene_state(env)
            assert sum(state.subgoals) == int(nxt["subgoals"])
            states.append(state)
            if bool(nxt["done"]):
                break
            td = nxt
        assert bool(nxt["terminated"]) and states[-1].drawer == "open" and states[-1].window == "open"
        assert states[0].drawer == "closed" and not states[0].drawer_locked and states[0].cube_on_target
        assert any(s.drawer == "half" for s in states)
    finally:
        env.close()


def test_policy_modes_and_subtasks_are_drawn_from_its_seed():
    env = SceneEnv(3, seed=0, max_episode_steps=60)
    try:
        def run(seed):
            env.set_seed(9)
            env.reset()
            policy = ScenePolicy(env, seed=seed, random_share=0.0)
            actions = [policy.act() for _ in range(3)]
            modes = []
            for _ in range(20):
                policy.reset()
                modes.append(policy.mode)
            return actions, modes, ScenePolicy(env, seed=seed, random_share=0.5)

        actions, modes, _ = run(4)
        again, modes_again, mixed = run(4)
        assert all((a == b).all() for a, b in zip(actions, again)) and modes == modes_again
        assert set(modes) == {"subtasks"}
        drawn = []
        for _ in range(30):
            mixed.reset()
            drawn.append(mixed.mode)
        assert set(drawn) == {"subtasks", "random"}
    finally:
        env.close()


def test_generated_frames_come_with_their_states():
    lines = []
    data = scene.generate_scene_frames(8, seed=0, episode_steps=(40, 40), frame_every=5, log=lines.append)
    assert len(data) == 8 and data.frames[0].shape == (64, 64, 3) and data.frames[0].std() > 10
    assert data.episode.tolist() == [0] * 8 and lines == []  # the reset frame and every 5th step
    assert data.layouts[data.layout[0]] == "scene-task1/subtasks"
    assert all(isinstance(s, SceneState) for s in data.states)


def test_the_episode_plan_is_drawn_from_the_seed_alone():
    plan = scene._plan(1000, 5, (30, 60), 3)
    assert plan == scene._plan(1000, 5, (30, 60), 3) and plan != scene._plan(1000, 6, (30, 60), 3)
    assert sum(e.frames for e in plan) == 1000 and [e.index for e in plan] == list(range(len(plan)))
    assert [e.task for e in plan[:7]] == [1, 2, 3, 4, 5, 1, 2]
    assert all(e.frames == 1 + e.steps // 3 for e in plan[:-1]) and 1 <= plan[-1].frames <= 1 + plan[-1].steps // 3
    assert all(30 <= e.steps <= 60 and e.env_seed >= 2**20 for e in plan)
    # a longer build starts with the same episodes
    assert scene._plan(2000, 5, (30, 60), 3)[: len(plan) - 1] == plan[:-1]


def test_scene_domain_random_share_reaches_the_frames_and_the_record(monkeypatch):
    """``scene_domain(random_share=...)``: the share of random-motion episodes, passed to the frame generator,
    recorded in ``training.json`` and in the frame cache's name."""
    import numpy as np

    from vlmrb_torchrl.scorer_training.domains import FrameSet
    from vlmrb_torchrl.envs.ogbench.domain import SCENE_RANDOM_SHARE, scene_domain
    from vlmrb_torchrl.scorer_training.domains import get_domain

    seen = {}
    monkeypatch.setattr(scene, "generate_scene_frames", lambda n, **kw: seen.update(kw) or "frames")
    domain = scene_domain(random_share=0.5)
    assert domain.generate(10, 3, 2) == "frames"
    assert (seen["random_share"], seen["seed"], seen["workers"]) == (0.5, 3, 2)
    assert domain.frames_tag == "random0.5" and get_domain("scene").frames_tag == f"random{SCENE_RANDOM_SHARE:g}"
    get_domain("scene").generate(10, 3)
    assert seen["random_share"] == SCENE_RANDOM_SHARE
    state = SceneState(cube_on_target=False, cube_place="table", cube_held=False, drawer="closed",
                       window="closed", drawer_locked=False, window_locked=False, subgoals=(False,) * 5)
    data = FrameSet([np.zeros((4, 4, 3), np.uint8)], [state], np.zeros(1, np.int64), np.zeros(1, np.int64),
                    list(scene.SCENE_EPISODE_KINDS))
    assert domain.describe(data)["episode_kinds"]["random_share"] == 0.5
    with pytest.raises(ValueError, match="random_share must be in"):
        scene_domain(random_share=-0.1)


def test_workers_must_be_a_positive_int():
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        scene.generate_scene_frames(4, workers=0)


@pytest.mark.slow  # spawns two worker processes, each building Scene envs
def test_frames_do_not_depend_on_the_workers():
    kwargs = dict(seed=3, episode_steps=(20, 40), frame_every=3)
    one = scene.generate_scene_frames(30, workers=1, **kwargs)
    two = scene.generate_scene_frames(30, workers=2, **kwargs)
    assert len(one) == len(two) == 30 and one.episode.max() >= 2  # several episodes, shared by the workers
    assert one.episode.tolist() == two.episode.tolist() and one.layout.tolist() == two.layout.tolist()
    assert all((a == b).all() for a, b in zip(one.frames, two.frames)) and one.states == two.states


# ------------------------------------------------------------------------------ the shipped model
from vlmrb_torchrl import scorers  # noqa: E402
from vlmrb_torchrl.scorer_training import weights_sha256  # noqa: E402
from vlmrb_torchrl.scorers.builtin import builtin_model_dir  # noqa: E402

shipped = pytest.mark.skipif(not (Path(scorers.__file__).parent / "models" / "scene" / "model.safetensors").is_file(),
                             reason="builtin:scene's weights are not in this checkout yet")


def test_a_model_not_shipped_says_how_to_build_it(monkeypatch):
    from vlmrb_torchrl.scorers import builtin

    monkeypatch.setitem(builtin.BUILTIN_MODELS, "scene", "no-such-model")  # as a version without the weights
    with pytest.raises(FileNotFoundError, match=r"does not ship this model's weights. Build it with `vlmrb build-scorer "
                                                r"scene --out DIR` and pass scorer=clip:DIR"):
        make_scorer("builtin:scene-task3")


@shipped
def test_shipped_scene_model_files_and_card():
    from vlmrb_torchrl.envs.ogbench.domain import SCENE_RANDOM_SHARE

    path = builtin_model_dir("scene")
    card = (path / "MODEL_CARD.md").read_text()
    assert weights_sha256(path) in card and "vlmrb build-scorer scene" in card
    assert (path / "model.safetensors").stat().st_size < 5 * 2**20
    report = json.loads((path / "training.json").read_text())
    assert report["weights_sha256"] == weights_sha256(path) and report["config"]["frames"] >= 20_000
    # the card says where it trained, as the recipe records it; its rebuild command reproduces the recipe
    where = "one CPU thread" if report["device"] == "cpu" else f"one GPU, {report['device'][6:-1]}"
    assert report["config"]["device"] == report["device"].split(" ")[0] and f"on {where}" in card
    assert f"--frames {report['config']['frames']} --steps {report['config']['steps']}" in card
    assert report["episode_kinds"]["random_share"] == SCENE_RANDOM_SHARE and f"{SCENE_RANDOM_SHARE:.0%}" in card
    assert all(v["accuracy"] >= 0.95 for v in report["val_accuracy"].values()), report["val_accuracy"]


@shipped
def test_builtin_scene_scores_a_drawer_opening_high_and_standing_still_low():
    """Frames rendered as the SAC recipe renders them: the clip in which task 1's drawer opens scores
    above 0.5 with task 1's prompt set, a clip in which nothing changes below it."""
    pytest.importorskip("transformers")
    scorer = make_scorer("builtin:scene-task1")
    env = SceneEnv(1, seed=0, render=True, max_episode_steps=300)
    try:
        env.set_seed(100)
        td = env.reset()
        policy = ScenePolicy(env, seed=1, random_share=0.0, goal_shares=(1.0,), noise=(0.0,), burst_prob=0.0)
        frames, events = [td["pixels"]], []
        for _ in range(60):
            td = env.step(policy(td))["next"]
            frames.append(td["pixels"])
            events.append(bool(td["drawer_achieved"]))
    finally:
        env.close()
    opened = events.index(True) + 1  # the frame after the step that opened it
    clips = torch.stack([torch.stack(frames[opened - 8: opened + 1]), torch.stack([frames[0]] * 9)])
    scores = scorer.score(TensorDict(pixels=clips, mask=torch.ones(clips.shape[:2], dtype=torch.bool),
                                     batch_size=clips.shape[:2])).tolist()
    assert scores[0] > 0.5 > scores[1], scores
    assert scores[0] > scorer.decision_threshold == 0.95 > scores[1]  # a positive at its tuned threshold too
    assert not hasattr(make_scorer("builtin:scene-task1", prompt_set=scorer.prompt_set[:1]), "decision_threshold")


@pytest.mark.slow  # renders frames and trains
def test_tool_builds_a_tiny_scene_model_end_to_end(tmp_path):
    pytest.importorskip("transformers")
    from vlmrb_torchrl.cli import main

    args = ["build-scorer", "scene", "--frames", "40", "--steps", "2", "--batch-size", "8", "--size", "micro"]
    assert main([*args, "--device", "cpu", "--workers", "2", "--out", str(tmp_path / "a")]) == 0
    card = (tmp_path / "a" / "MODEL_CARD.md").read_text()
    assert "builtin:scene" in card and "vlmrb build-scorer scene --frames 40" in card
    assert "on one CPU thread" in card and "in 2 processes" in card
    report = json.loads((tmp_path / "a" / "training.json").read_text())
    assert report["device"] == "cpu" and report["config"]["device"] == "cpu" and report["workers"] == 2
    assert set(report["val_accuracy"]) <= set(scene.SCENE_QUESTIONS)
    scorer = make_scorer(f"clip:{tmp_path / 'a'}", prompt_set=scene_prompt_set(3))
    clips = torch.zeros(2, 3, 64, 64, 3, dtype=torch.uint8)
    scores = scorer.score(TensorDict(pixels=clips, mask=torch.ones(2, 3, dtype=torch.bool), batch_size=[2, 3]))
    assert scores.shape == (2,) and bool(((scores >= 0) & (scores <= 1)).all())
