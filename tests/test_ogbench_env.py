"""OGBench Scene env: specs, OGBench's reward and termination, subgoal events and the oracle, cheap
frames rendered only where clips need them, and the SAC recipe on Scene."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import csv  # noqa: E402
import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("ogbench")

from vlmrb_torchrl.scoring.clips import ClipSpec  # noqa: E402
from vlmrb_torchrl.envs import ClipRenderSteps  # noqa: E402
from vlmrb_torchrl.envs.ogbench.env import (OGBENCH_EVENT_KEYS, SCENE_SUBGOALS, SceneEnv, make_ogbench_env,  # noqa: E402
                                        scene_task)
from vlmrb_torchrl.recipes.config import ConfigError, SACConfig, apply_overrides  # noqa: E402
from vlmrb_torchrl.scorers import make_scorer  # noqa: E402


@pytest.fixture(scope="module")
def task1():
    env = SceneEnv(1, seed=0, max_episode_steps=40)
    yield env
    env.close()


def _zero(env, td):
    td["action"] = torch.zeros(5)
    return env.step(td)


def _move_joint(env, joint: str, value: float) -> None:
    """Puts a slide joint (the drawer, the window) at ``value`` in the simulator, as a push would."""
    import mujoco

    raw = env.unwrapped
    raw._data.joint(joint).qpos[0] = value
    raw._data.joint(joint).qvel[0] = 0.0
    mujoco.mj_forward(raw._model, raw._data)


class TestSceneEnv:
    def test_specs_rollout_and_reward(self, task1):
        from torchrl.envs.utils import check_env_specs

        check_env_specs(task1)
        rollout = task1.rollout(5)
        assert rollout["observation"].shape == (5, 40) and rollout["observation"].dtype == torch.float32
        assert task1.action_spec.shape == (5,)
        assert "pixels" not in rollout.keys()
        nxt = rollout["next"]
        # task 1 starts with the cube on its target and both buttons in their goal state (unlocked):
        # 3 of 5 subgoals hold, OGBench's reward is their count minus 5
        assert nxt["subgoals"].flatten().tolist() == [3] * 5
        assert nxt["reward"].flatten().tolist() == [-2.0] * 5
        for key in OGBENCH_EVENT_KEYS:
            assert nxt[key].dtype == torch.bool and nxt[key].shape == (5, 1)

    def test_subgoal_events_success_and_termination(self, task1):
        td = task1.reset()
        _move_joint(task1, "drawer_slide", -0.16)  # task 1's goal: the drawer open ...
        td = _zero(task1, td)
        nxt = td["next"]
        assert bool(nxt["drawer_achieved"]) and bool(nxt["progress_event"]) and not bool(nxt["success"])
        assert int(nxt["subgoals"]) == 4 and float(nxt["reward"]) == -1.0 and not bool(nxt["done"])
        td = _zero(task1, nxt)
        assert not bool(td["next", "drawer_achieved"]) and not bool(td["next", "progress_event"])  # an event, not a state
        assert int(td["next", "subgoals"]) == 4
        _move_joint(task1, "window_slide", 0.2)  # ... and the window open: solved
        td = _zero(task1, td["next"])
        nxt = td["next"]
        assert bool(nxt["window_achieved"]) and bool(nxt["success"]) and bool(nxt["progress_event"])
        assert float(nxt["reward"]) == 0.0 and not bool(nxt["done"])
        td = _zero(task1, nxt)  # OGBench ends the episode on the step after the one that solves the task
        assert bool(td["next", "terminated"]) and bool(td["next", "done"])

    def test_time_limit_truncates(self, task1):
        rollout = task1.rollout(100)
        assert rollout.shape == (40,)
        assert bool(rollout["next", "truncated"][-1]) and not rollout["next", "terminated"].any()

    def test_sparse_reward(self):
        env = make_ogbench_env("ogbench/scene-task1", reward_shaping=False, max_episode_steps=10, seed=0)
        assert env.reward == "success"
        td = env.reset()
        _move_joint(env, "drawer_slide", -0.16)
        td = _zero(env, td)
        assert float(td["next", "reward"]) == -1.0 and not bool(td["next", "done"])  # 4 of 5 subgoals: not solved
        _move_joint(env, "window_slide", 0.2)
        td = _zero(env, td["next"])
        assert bool(td["next", "success"]) and float(td["next", "reward"]) == -1.0
        td = _zero(env, td["next"])  # OGBench's success flag: the step after, with the termination
        assert float(td["next", "reward"]) == 0.0 and bool(td["next", "terminated"])
        env.close()

    def test_a_seed_gives_the_same_episode(self):
        env = SceneEnv(3, seed=7, max_episode_steps=30)
        rollouts = []
        for _ in range(2):
            torch.manual_seed(0)
            rollouts.append(env.rollout(30))
            env.set_seed(7)
        env.close()
        assert torch.equal(rollouts[0]["next", "observation"], rollouts[1]["next", "observation"])
        assert not torch.equal(rollouts[0]["observation"][0], rollouts[0]["next", "observation"][-1])

    def test_a_seed_gives_the_same_simulator_state_after_every_reset(self):
        # OGBench steps the scene twice with random actions while it resets; qpos and qvel are restored after,
        # but the controls and the constraint solver's warm start stay: when those actions came from an
        # unseeded generator, two SAC runs of one seed drifted apart some steps after the first time-limit reset
        import mujoco
        import numpy as np

        def states(env):
            model, data, which = env.unwrapped._model, env.unwrapped._data, mujoco.mjtState.mjSTATE_INTEGRATION
            out = []
            td = env.reset()
            for episode in range(3):  # the first reset seeded, the next ones continuing its generators
                state = np.empty(mujoco.mj_stateSize(model, which))  # time, qpos, qvel, ctrl, warm start, ...
                mujoco.mj_getState(model, data, state, which)
                out.append(torch.from_numpy(state))
                for step in range(3):
                    td["action"] = torch.linspace(-1, 1, 5) * (-1) ** (episode + step)
                    td = env.step(td)
                    out.append(td["next", "observation"])
                    td = td["next"]
                assert bool(td["truncated"])
                td = env.reset()
            return torch.cat(out)

        envs = [SceneEnv(1, seed=3, max_episode_steps=3) for _ in range(2)]
        first, second = (states(env) for env in envs)
        envs[0].set_seed(3)  # the same env, seeded again, replays them too
        again = states(envs[0])
        for env in envs:
            env.close()
        assert torch.equal(first, second) and torch.equal(first, again)

    def test_bad_args_and_ids(self):
        with pytest.raises(ValueError, match="unknown task=6"):
            SceneEnv(6)
        with pytest.raises(ValueError, match="reward must be one of"):
            SceneEnv(1, reward="dense")
        with pytest.raises(ValueError, match="unknown camera='agentview'"):
            SceneEnv(1, camera="agentview")
        with pytest.raises(ValueError, match="unknown OGBench env 'ogbench/scene-task9'"):
            make_ogbench_env("ogbench/scene-task9")
        assert scene_task("ogbench/scene-task4") == 4 and len(SCENE_SUBGOALS) == 5


class TestFramesAndOracle:
    def test_renders_only_needed_steps_and_oracle_labels(self):
        spec = ClipSpec(clip_len=8, stride=8, frames=2)
        env = SceneEnv(1, seed=0, render=True, max_episode_steps=20, render_steps=ClipRenderSteps(spec, horizon=20))
        rollout = env.rollout(20)
        needed = [0, 8, 16, 19]
        assert env.render_count == len(needed) + 1  # + the observation that ends the episode
        assert rollout["pixels"].flatten(1).any(-1).nonzero().squeeze(-1).tolist() == needed
        assert rollout["pixels"].shape == (20, 64, 64, 3) and rollout["pixels"].dtype == torch.uint8
        frame = rollout["pixels"][0].numpy().astype(int)
        assert frame.std() > 10  # a scene, not a blank frame

        scorer = make_scorer("oracle:ogbench")
        assert scorer.events_key == ("next", "progress_event")
        events = torch.zeros(2, 4, 1, dtype=torch.bool)
        events[1, 2] = True
        from tensordict import TensorDict

        clips = TensorDict({("next", "progress_event"): events, "mask": torch.ones(2, 4, dtype=torch.bool)}, [2, 4])
        assert scorer.score(clips).tolist() == [0.0, 1.0]
        env.close()

    @pytest.mark.slow  # two more Scene builds
    def test_transparent_arm_is_a_render_setting(self):
        envs = [SceneEnv(1, seed=0, render=True), SceneEnv(1, seed=0, render=True, transparent_arm=False)]
        frames = [env.reset()["pixels"] for env in envs]
        assert not torch.equal(frames[0], frames[1])
        torch.manual_seed(0)
        action = envs[0].action_spec.rand()
        states = []
        for env in envs:
            td = env.reset()
            td["action"] = action
            states.append(env.step(td)["next", "observation"])
            env.close()
        assert torch.equal(states[0], states[1])


class TestSceneRecipe:
    @pytest.mark.slow  # two short training runs
    def test_a_seed_gives_the_same_run(self, tmp_path):
        """Two SAC runs of one seed log the same metrics and end with the same learner, bit for bit, across
        several time-limit resets of each env (OGBench's reset settles the scene with seeded actions)."""
        from vlmrb_torchrl.recipes.sac import main as sac_main

        settings = dict(env="ogbench/scene-task1", replay="uniform", seed=0, total_frames=600, num_envs=2,
                        frames_per_batch=100, learning_starts=200, max_episode_steps=60, batch_size=32, hidden=32,
                        buffer_size=1_000, eval_every=200, eval_episodes=1, checkpoint_every=600,
                        async_collection=False, progress=False, gallery_clips=0, tensorboard=False)
        rows, learners = [], []
        for name in ("a", "b"):
            sac_main(apply_overrides(SACConfig(), {**settings, "output_dir": str(tmp_path / name)}))
            with open(tmp_path / name / "metrics.csv") as f:
                rows.append([{k: v for k, v in row.items() if k not in ("env_steps_per_s", "time_s")}
                             for row in csv.DictReader(f)])
            learners.append(torch.load(tmp_path / name / "checkpoints" / "step_600" / "state.pt",
                                       weights_only=False)["learner"])
        assert len(rows[0]) == 3 and rows[0] == rows[1]
        for key, tensor in learners[0].items():
            assert torch.equal(tensor, learners[1][key]), key

    def test_config_resolves_the_env_defaults(self):
        cfg = apply_overrides(SACConfig(), ["env=ogbench/scene-task4"]).validate()
        assert (cfg.max_episode_steps, cfg.camera, cfg.reward_shaping) == (750, "front_pixels", True)
        assert cfg.scorer == "builtin:scene-task4"
        lift = SACConfig().validate()
        assert (lift.max_episode_steps, lift.camera, lift.reward_shaping, lift.scorer) == (
            200, "front_close+eye_in_hand", False, "builtin:lift")
        explicit = apply_overrides(SACConfig(), ["env=ogbench/scene-task2", "scorer=builtin:scene"]).validate()
        assert explicit.scorer == "builtin:scene-task2"

    @pytest.mark.parametrize("overrides, match", [
        (["env=ogbench/scene-task6"], "env='ogbench/scene-task6' is invalid: expected ogbench/scene-task1 ... ogbench/scene-task5"),
        (["env=ogbench/scene-task3", "scorer=builtin:scene-task2"], "expected the scorer of this env's task"),
        (["env=ogbench/scene-task3", "camera=front"], "camera='front' is invalid: expected front_pixels"),
        (["env=ogbench/scene-task3", "scorer=builtin:lift"], "expected a scorer for OGBench Scene envs \\(builtin:scene, oracle:ogbench"),
    ])
    def test_bad_values(self, overrides, match):
        with pytest.raises(ConfigError, match=match):
            apply_overrides(SACConfig(), overrides).validate()

    def test_smoke_vlm_td_oracle(self, tmp_path):
        from vlmrb_torchrl.recipes.sac import main as sac_main

        cfg = apply_overrides(SACConfig(), dict(
            env="ogbench/scene-task2", replay="vlm_td", scorer="oracle:ogbench", total_frames=200, num_envs=1,
            frames_per_batch=50, learning_starts=100, max_episode_steps=50, batch_size=32, hidden=32,
            buffer_size=1_000, eval_every=200, eval_episodes=1, checkpoint_every=200, clip_len=4, progress=False,
            gallery_clips=0, tensorboard=False, output_dir=str(tmp_path / "scene")))
        summary = sac_main(cfg)
        with open(tmp_path / "scene" / "metrics.csv") as f:
            row = list(csv.DictReader(f))[-1]
        assert summary["env_steps"] == 200 and int(row["env_steps"]) == 200
        assert float(row["eval_subgoals"]) in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
        for col in ("eval_return", "loss_qvalue", "fraction_scored"):
            assert math.isfinite(float(row[col])), col
        assert float(row["eval_return"]) <= 0.0

