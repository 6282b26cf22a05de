"""Tests for vlmrb_torchrl.envs.atari.env (AtariEnv / make_atari_env / atari_prompt)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from functools import partial

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py")

import ale_py  # noqa: E402
import gymnasium  # noqa: E402
from torch import nn  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import SerialEnv  # noqa: E402
from torchrl.envs.utils import check_env_specs, step_mdp  # noqa: E402

import vlmrb_torchrl.envs.atari.env as atari_module  # noqa: E402
from vlmrb_torchrl.envs import ATARI_PROMPTS, AtariEnv, BatchedAtariEnv, atari_prompt, make_atari_env  # noqa: E402
from vlmrb_torchrl.envs.atari.env import (  # noqa: E402
    GENERIC_ATARI_PROMPT,
    atari_game_name,
    resize_frames,
)

gymnasium.register_envs(ale_py)

BREAKOUT = "ALE/Breakout-v5"
# SpaceInvaders under random play, seed 0: rewards of 5-30 points and the first lost life
# (of 3) within 300 steps -- exercises both reward clipping and life-loss episodes.
INVADERS = "ALE/SpaceInvaders-v5"


# ---------------------------------------------------------------------------------- helpers
def play(env, actions, *, reset_on_done=True):
    """Steps ``env`` through ``actions``; returns the list of ``"next"`` tensordicts."""
    td = env.reset()
    out = []
    for a in actions:
        td["action"] = torch.tensor(int(a))
        td = env.step(td)
        nxt = td["next"].clone()
        out.append(nxt)
        td = step_mdp(td)
        if reset_on_done and nxt["done"].item():
            td = env.reset()
    return out


def random_actions(n_actions, n, seed=0):
    return torch.randint(n_actions, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def reference_resize(image, out_hw):
    """Pillow's antialiased bilinear resize, an independent path from ``resize_frames``."""
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((out_hw[1], out_hw[0]), Image.BILINEAR))


# ------------------------------------------------------------------------------- prompts
class TestPrompts:
    def test_required_games_have_prompts(self):
        for game in ("MontezumaRevenge", "Pong", "Breakout", "Freeway", "Pitfall", "Seaquest", "SpaceInvaders"):
            assert game in ATARI_PROMPTS
            assert ATARI_PROMPTS[game].endswith("?") and "clip" in ATARI_PROMPTS[game]
        assert ATARI_PROMPTS["MontezumaRevenge"] == "Does the player pick up the key in this clip?"
        assert GENERIC_ATARI_PROMPT == "Does this clip show the player making clear progress in the game?"

    @pytest.mark.parametrize(
        "env_id, game",
        [
            ("ALE/MontezumaRevenge-v5", "MontezumaRevenge"),
            ("MontezumaRevengeNoFrameskip-v4", "MontezumaRevenge"),
            ("PongDeterministic-v4", "Pong"),
            ("Breakout-v4", "Breakout"),
            ("space_invaders", "spaceinvaders"),
            ("Freeway", "Freeway"),
        ],
    )
    def test_game_name_and_prompt(self, env_id, game):
        assert atari_game_name(env_id) == game
        canonical = {name.lower(): name for name in ATARI_PROMPTS}[game.lower()]
        assert atari_prompt(env_id) == ATARI_PROMPTS[canonical]

    def test_generic_fallback(self):
        assert atari_prompt("ALE/Tennis-v5") == GENERIC_ATARI_PROMPT
        assert atari_prompt("SomethingElse") == GENERIC_ATARI_PROMPT
        with pytest.raises(TypeError, match="env_id must be a str"):
            atari_prompt(None)

    def test_env_prompt_property(self):
        env = make_atari_env("ALE/Pong-v5", render=False)
        assert env.prompt == ATARI_PROMPTS["Pong"]


# -------------------------------------------------------------------------------- resize
class TestResize:
    @pytest.mark.parametrize("size, channels", [(84, ()), (64, (3,)), (40, (3,))])
    def test_matches_pillow_bilinear(self, size, channels):
        img = np.random.default_rng(1).integers(0, 256, (210, 160, *channels), dtype=np.uint8)
        out = resize_frames(img, size)
        ref = reference_resize(img, (size, size))
        assert out.shape == ref.shape == (size, size, *channels) and out.dtype == np.uint8
        assert np.abs(out.astype(int) - ref.astype(int)).max() <= 1  # rounding of the fixed-point kernels

    def test_batches_and_types(self):
        imgs = np.random.default_rng(2).integers(0, 256, (2, 3, 210, 160, 3), dtype=np.uint8)
        out = resize_frames(torch.from_numpy(imgs), 64)
        assert isinstance(out, torch.Tensor) and out.shape == (2, 3, 64, 64, 3) and out.is_contiguous()
        for i in range(2):  # a batch is resized frame by frame
            for j in range(3):
                assert torch.equal(out[i, j], torch.from_numpy(resize_frames(imgs[i, j], 64)))
        assert (resize_frames(np.full((210, 160), 7, dtype=np.uint8), 84) == 7).all()  # constants stay
        with pytest.raises(TypeError, match="uint8"):
            resize_frames(np.zeros((210, 160), dtype=np.float32), 84)


# ------------------------------------------------------------------------------------ env
class TestAtariEnv:
    @pytest.mark.parametrize(
        "kwargs, error, match",
        [
            ({"env_id": "ALE/NoSuchGame-v5"}, ValueError, "could not make env_id='ALE/NoSuchGame-v5'"),
            ({"env_id": "CartPole-v1"}, ValueError, "needs an ALE id"),
            ({"frame_size": 0}, ValueError, "frame_size must be an int >= 1"),
            ({"frame_skip": 0}, ValueError, "frame_skip must be an int >= 1"),
            ({"noop_max": -1}, ValueError, "noop_max must be an int >= 0"),
            ({"frame_stack": 2.0}, ValueError, "frame_stack must be an int >= 1"),
            ({"max_episode_steps": 0}, ValueError, "max_episode_steps must be None or an int >= 1"),
            ({"env_kwargs": {"frameskip": 2}}, ValueError, "use the frame_skip= argument"),
            ({"env_kwargs": {"render_mode": "human"}}, ValueError, "use the render= argument"),
        ],
    )
    def test_construction_errors(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            make_atari_env(**kwargs)

    def test_missing_ale_raises_import_error(self, monkeypatch):
        monkeypatch.setattr(atari_module, "_has_ale", False)
        with pytest.raises(ImportError, match=r"pip install 'vlmrb-torchrl\[atari\]'"):
            make_atari_env()

    def test_package_import_is_lazy(self):
        code = (
            "import sys, vlmrb_torchrl.envs as e; e.atari_prompt('ALE/Pong-v5'); "
            "bad = [m for m in ('ale_py', 'gymnasium') if m in sys.modules]; "
            "assert not bad, bad"
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

    # specs -------------------------------------------------------------------------------
    @pytest.mark.parametrize("render", [True, False])
    def test_specs(self, render):
        env = make_atari_env(BREAKOUT, seed=0, render=render, frame_size=48)
        assert type(env) is AtariEnv  # frame skipping is native: no FrameSkipTransform wrapper
        check_env_specs(env)
        obs_spec = env.observation_spec
        assert obs_spec["observation"].shape == (4, 84, 84) and obs_spec["observation"].dtype == torch.uint8
        assert obs_spec["raw_reward"].shape == (1,) and obs_spec["raw_reward"].dtype == torch.float32
        assert obs_spec["game_done"].shape == (1,) and obs_spec["game_done"].dtype == torch.bool
        assert ("pixels" in obs_spec.keys()) is render
        if render:
            assert obs_spec["pixels"].shape == (48, 48, 3) and obs_spec["pixels"].dtype == torch.uint8
        assert "success" not in obs_spec.keys()
        assert env.action_spec.n == 4 and env.action_spec.shape == () and env.action_spec.dtype == torch.int64
        assert env.action_names == ["NOOP", "FIRE", "RIGHT", "LEFT"]
        assert env.reward_spec.shape == (1,) and env.reward_spec.dtype == torch.float32
        assert set(env.done_keys) == {"done", "terminated", "truncated"}
        td = env.reset()
        obs = td["observation"]
        assert (obs == obs[:1]).all() and obs.float().std() > 0  # stack filled with the reset frame
        assert td["raw_reward"].item() == 0 and not td["game_done"].any()
        assert env.lives == 5

    def test_minimal_action_set_and_options(self):
        env = make_atari_env("ALE/Pong-v5", render=False, frame_stack=2)
        assert env.action_names == ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]
        assert env.action_spec.n == 6
        assert env.reset()["observation"].shape == (2, 84, 84)
        full = make_atari_env("ALE/Pong-v5", render=False, env_kwargs={"full_action_space": True})
        assert full.action_spec.n == 18

    def test_observation_and_pixels_match_raw_ale(self):
        """Frame skip, max-pool, grayscale/RGB resize and stacking against a raw gymnasium ALE env."""
        kw = {"repeat_action_probability": 0.0}
        env = make_atari_env(BREAKOUT, seed=3, noop_max=0, frame_size=40, env_kwargs=kw)
        raw = gymnasium.make(BREAKOUT, frameskip=1, **kw).unwrapped
        raw.reset(seed=3)
        ale = raw.ale
        td = env.reset()
        want = reference_resize(ale.getScreenGrayscale(), (84, 84))
        assert np.abs(td["observation"][-1].numpy().astype(int) - want.astype(int)).max() <= 1
        prev_obs = td["observation"]
        actions = [1] + random_actions(4, 30, seed=3)  # FIRE first: the ball moves
        for a in actions:
            gray, rgb = [], []
            for _ in range(4):
                raw.step(a)
                gray.append(ale.getScreenGrayscale())
                rgb.append(ale.getScreenRGB())
            td["action"] = torch.tensor(a)
            td = env.step(td)
            nxt = td["next"]
            want_gray = reference_resize(np.maximum(gray[-1], gray[-2]), (84, 84))
            want_rgb = reference_resize(np.maximum(rgb[-1], rgb[-2]), (40, 40))
            obs = nxt["observation"]
            assert np.abs(obs[-1].numpy().astype(int) - want_gray.astype(int)).max() <= 1
            assert np.abs(nxt["pixels"].numpy().astype(int) - want_rgb.astype(int)).max() <= 1
            assert torch.equal(obs[:-1], prev_obs[1:])  # the stack shifts by one frame
            prev_obs = obs
            td = step_mdp(td)
        raw.close()

    def test_pixels_change(self):
        env = make_atari_env(BREAKOUT, seed=0, frame_size=64)
        td = env.rollout(60, break_when_any_done=False)
        pixels = td["next", "pixels"]
        assert pixels.shape == (60, 64, 64, 3) and pixels.dtype == torch.uint8
        assert len({p.numpy().tobytes() for p in pixels}) > 10  # the frame changes as the game runs
        assert (pixels[..., 0] != pixels[..., 1]).any()  # colour, not gray
        assert (td["next", "observation"][:, -1] != td["next", "observation"][:1, -1]).any()

    # seeding -----------------------------------------------------------------------------
    def test_seed_is_deterministic(self):
        actions = random_actions(4, 120)
        a = play(make_atari_env(BREAKOUT, seed=7), actions)
        b = play(make_atari_env(BREAKOUT, seed=7), actions)
        for x, y in zip(a, b):
            assert (x == y).all()
        env = make_atari_env(BREAKOUT, seed=8)
        c = play(env, actions)
        assert any(not torch.equal(x["observation"], y["observation"]) for x, y in zip(a, c))
        env.set_seed(7)  # reseeding restarts the game from the same state
        d = play(env, actions)
        for x, y in zip(a, d):
            assert (x == y).all()

    def test_serial_env_seeds_workers_differently(self):
        env = SerialEnv(2, partial(make_atari_env, BREAKOUT, render=False))
        env.set_seed(0)
        td = env.reset()
        assert td["observation"].shape == (2, 4, 84, 84)
        data = env.rollout(30, break_when_any_done=False)
        assert not torch.equal(data["next", "observation"][0], data["next", "observation"][1])
        env.close()

    # train vs eval -------------------------------------------------------------------------
    def test_train_vs_eval_life_loss_and_reward_clipping(self):
        actions = random_actions(6, 300)
        train_env = make_atari_env(INVADERS, seed=0, train=True, render=False)
        eval_env = make_atari_env(INVADERS, seed=0, train=False, render=False)
        train = play(train_env, actions, reset_on_done=False)
        evals = play(eval_env, actions, reset_on_done=False)
        k = next(i for i, t in enumerate(train) if t["done"].item())  # first lost life
        for t, e in zip(train[: k + 1], evals[: k + 1]):
            # same emulator trajectory up to the first lost life
            assert torch.equal(t["observation"], e["observation"])
            assert torch.equal(t["raw_reward"], e["raw_reward"])
            # train: sign-clipped reward; eval: raw game score
            assert torch.equal(t["reward"], torch.sign(t["raw_reward"]))
            assert torch.equal(e["reward"], e["raw_reward"])
        raw = torch.cat([t["raw_reward"] for t in train[: k + 1]])
        assert (raw.abs() > 1).any(), "the test needs a reward > 1 before the first lost life"
        assert train[k]["terminated"].item() and not train[k]["truncated"].item()
        assert not train[k]["game_done"].item()  # a life, not the game
        assert not any(e["done"].item() for e in evals[: k + 1])
        assert eval_env.lives == 2 and train_env.lives == 2
        assert train_env.train_mode and not eval_env.train_mode
        assert "train=True" in repr(train_env) and "train=False" in repr(eval_env)
        # the mode is not nn.Module's train()/eval(), which keep working
        assert eval_env.eval() is eval_env and eval_env.train() is eval_env and not eval_env.train_mode

    def test_train_reset_after_life_loss_continues_game(self):
        env = make_atari_env(INVADERS, seed=0, train=True, render=False)
        actions = random_actions(6, 2000)
        td = env.reset()
        lives_at_reset, total = [env.lives], []
        for a in actions:
            td["action"] = torch.tensor(a)
            td = env.step(td)
            total.append(td["next", "raw_reward"].item())
            if td["next", "done"].item():
                game_done = td["next", "game_done"].item()
                td = env.reset()
                lives_at_reset.append(env.lives)
                if game_done:
                    break
            else:
                td = step_mdp(td)
        # 3 lives: two resets continue the game with one life less, then game over restarts it
        assert lives_at_reset == [3, 2, 1, 3]
        assert sum(total) > 0

    def test_eval_plays_full_games(self):
        env = make_atari_env(INVADERS, seed=0, train=False, render=False)
        data = env.rollout(2000, break_when_any_done=True)
        nxt = data["next"]
        assert nxt["done"].sum() == 1 and nxt["done"][-1].item() and nxt["terminated"][-1].item()
        assert torch.equal(nxt["game_done"], nxt["done"])
        assert torch.equal(nxt["reward"], nxt["raw_reward"])
        assert env.lives == 0

    def test_max_episode_steps_truncates_the_game(self):
        env = make_atari_env(BREAKOUT, seed=0, train=False, render=False, max_episode_steps=12)
        data = env.rollout(12)
        nxt = data["next"]
        assert nxt["truncated"][-1].item() and nxt["done"][-1].item() and nxt["game_done"][-1].item()
        assert not nxt["terminated"].any() and not nxt["done"][:-1].any()

    # TorchRL integration -----------------------------------------------------------------
    def test_factory_pickles(self):
        factory = pickle.loads(pickle.dumps(partial(make_atari_env, BREAKOUT, seed=0, render=False)))
        env = factory()
        assert env.rollout(3)["next", "observation"].shape == (3, 4, 84, 84)

    def test_serial_env_collector_random_policy(self):
        env = SerialEnv(2, partial(make_atari_env, BREAKOUT, frame_size=32))
        env.set_seed(0)
        collector = Collector(env, None, frames_per_batch=100, total_frames=300)
        batches = list(collector)
        collector.shutdown()
        assert len(batches) == 3
        batch = batches[-1]
        assert batch.batch_size == (2, 50)
        assert batch["observation"].shape == (2, 50, 4, 84, 84) and batch["observation"].dtype == torch.uint8
        assert batch["next", "pixels"].shape == (2, 50, 32, 32, 3)
        assert batch["next", "raw_reward"].shape == (2, 50, 1)
        assert batch["action"].dtype == torch.int64 and ((batch["action"] >= 0) & (batch["action"] < 4)).all()
        assert batch["collector", "traj_ids"].shape == (2, 50)
        data = torch.cat(batches, dim=1)
        done = data["next", "done"].squeeze(-1)
        assert done.any()  # random Breakout loses a life within 150 steps
        # after each done the collector resets: the next root observation is a fresh stack
        for w, t in done[:, :-1].nonzero().tolist():
            obs = data["observation"][w, t + 1]
            assert (obs == obs[:1]).all()
            assert data["collector", "traj_ids"][w, t + 1] != data["collector", "traj_ids"][w, t]

    def test_qvalue_actor_and_dqn_loss(self):
        from torchrl.modules import MLP, ConvNet, QValueActor
        from torchrl.objectives import DQNLoss

        env = make_atari_env(BREAKOUT, seed=0, render=False)
        n = env.action_spec.n

        class Scale(nn.Module):
            def forward(self, x):
                return x.float() / 255.0

        net = nn.Sequential(
            Scale(),
            ConvNet(num_cells=[8, 8], kernel_sizes=[8, 4], strides=[4, 2]),
            MLP(out_features=n, num_cells=[32]),
        )
        actor = QValueActor(net, in_keys=["observation"], spec=env.action_spec)
        data = env.rollout(16, actor, break_when_any_done=False)
        assert data["action"].shape == (16,) and data["action"].dtype == torch.int64
        assert data["action_value"].shape == (16, n)
        loss = DQNLoss(actor, action_space=env.action_spec, delay_value=False)
        loss.make_value_estimator(gamma=0.99)
        value = loss(data)["loss"]
        assert torch.isfinite(value)
        value.backward()
        assert all(p.grad is not None for p in actor.parameters())


# ---------------------------------------------------------------------------- batched env
def batched_play(env, actions, *, reset_on_done=True):
    """Steps a BatchedAtariEnv with per-step action lists; returns the ``"next"`` tensordicts."""
    td = env.reset()
    out = []
    for a in actions:
        td["action"] = torch.as_tensor(a, dtype=torch.int64)
        if reset_on_done:
            td, root = env.step_and_maybe_reset(td)
            out.append(td["next"].clone())
            td = root
        else:
            td = env.step(td)
            out.append(td["next"].clone())
            td = step_mdp(td)
    return out


class TestBatchedAtariEnv:
    @pytest.mark.parametrize("render", [True, False])
    def test_specs_and_entries(self, render):
        env = BatchedAtariEnv(3, BREAKOUT, seed=0, render=render, frame_size=48)
        check_env_specs(env)
        assert env.batch_size == (3,) and env.action_names == ["NOOP", "FIRE", "RIGHT", "LEFT"]
        assert env.observation_spec["observation"].shape == (3, 4, 84, 84)
        assert ("pixels" in env.observation_spec.keys()) is render
        assert set(env.done_keys) == {"done", "terminated", "truncated"}
        td = env.reset()
        obs = td["observation"]
        assert obs.dtype == torch.uint8 and (obs == obs[:, :1]).all() and obs.float().std() > 0  # reset-frame stacks
        data = env.rollout(40, break_when_any_done=False)
        nxt = data["next"]
        assert nxt["observation"].shape == (3, 40, 4, 84, 84)
        assert torch.equal(nxt["progress_event"], nxt["raw_reward"] > 0)
        assert torch.equal(nxt["reward"], torch.sign(nxt["raw_reward"]))  # train mode: clipped
        if render:
            assert nxt["pixels"].shape == (3, 40, 48, 48, 3) and (nxt["pixels"][..., 0] != nxt["pixels"][..., 1]).any()
        assert torch.equal(nxt["observation"][:, 1:, :-1], nxt["observation"][:, :-1, 1:]) or nxt["done"].any()
        env.close()

    def test_frames_match_atari_env(self):
        """Same emulator states (no sticky actions, no no-ops): the same scorer frames as AtariEnv, and the
        gray frame is the luminance of the 84-px RGB resize of the same max-pooled screen."""
        from vlmrb_torchrl.envs.atari.policies import AtariPolicy

        kw = dict(noop_max=0, env_kwargs={"repeat_action_probability": 0.0}, train=False)
        batched = BatchedAtariEnv(1, BREAKOUT, frame_size=64, seed=3, **kw)
        single = make_atari_env(BREAKOUT, frame_size=64, seed=3, **kw)
        rgb84 = make_atari_env(BREAKOUT, frame_size=84, seed=3, **kw)
        policy = AtariPolicy(single, seed=0, random_share=0.0, epsilons=(0.0,), burst_prob=0.0)  # breaks bricks
        luminance = torch.tensor(atari_module.LUMINANCE)
        tds = [env.reset() for env in (batched, single, rgb84)]
        rewards = 0.0
        for _ in range(300):
            action = policy.act()
            tds[0]["action"] = torch.tensor([action])
            for td in tds[1:]:
                td["action"] = torch.tensor(action)
            g, w, w84 = (env.step(td)["next"] for env, td in zip((batched, single, rgb84), tds))
            assert torch.equal(g["pixels"][0], w["pixels"])
            assert torch.equal(g["raw_reward"][0], w["raw_reward"]) and torch.equal(g["done"][0], w["done"])
            gray = (w84["pixels"].float() @ luminance).round().to(torch.uint8)
            assert torch.equal(g["observation"][0, -1], gray)
            rewards += float(w["raw_reward"])
            if w["done"].item():  # game over (after it the envs differ)
                break
            tds = [g, w, w84]
        assert rewards > 0  # the frames include bricks breaking

    def test_seeds_are_deterministic_and_copies_differ(self):
        actions = [random_actions(4, 2, seed=i) for i in range(80)]
        a = batched_play(BatchedAtariEnv(2, BREAKOUT, seed=7), actions)
        b = batched_play(BatchedAtariEnv(2, BREAKOUT, seed=7), actions)
        for x, y in zip(a, b):
            assert (x == y).all()
        assert any(not torch.equal(x["observation"][0], x["observation"][1]) for x in a)
        env = BatchedAtariEnv(2, BREAKOUT, seed=8)
        c = batched_play(env, actions)
        assert any(not torch.equal(x["observation"], y["observation"]) for x, y in zip(a, c))
        assert env.set_seed(7) == SerialEnv(2, partial(make_atari_env, BREAKOUT, render=False)).set_seed(7)
        d = batched_play(env, actions)  # reseeding restarts the games from the same states
        for x, y in zip(a, d):
            assert (x == y).all()

    @pytest.mark.slow  # plays until lives are lost; AtariEnv's own life-loss test stays in the default run
    def test_train_mode_life_loss_continues_the_game(self):
        env = BatchedAtariEnv(1, INVADERS, seed=0, train=True)
        td = env.reset()
        lives, clipped, raw = [env.lives[0]], [], []
        for a in random_actions(6, 3000):
            td["action"] = torch.tensor([a])
            td, root = env.step_and_maybe_reset(td)
            nxt = td["next"]
            clipped.append(float(nxt["reward"])), raw.append(float(nxt["raw_reward"]))
            if nxt["done"].item():
                assert nxt["terminated"].item()
                if nxt["game_done"].item():
                    break
                lives.append(env.lives[0])  # after the (soft) reset: the same game, one life less
                assert root["observation"][0].eq(root["observation"][0, :1]).all()  # the stack restarts
            td = root
        else:
            pytest.fail("no game over in 3000 steps")
        assert len(lives) >= 2 and lives == list(range(3, 3 - len(lives), -1))  # a lost life is an episode
        assert max(raw) > 1 and set(clipped) <= {0.0, 1.0}  # raw scores of 5-30, clipped to their sign
        assert env.train_mode

    @pytest.mark.slow  # plays whole games; AtariEnv's test_eval_plays_full_games stays in the default run
    def test_eval_mode_plays_whole_games_with_raw_rewards(self):
        env = BatchedAtariEnv(1, INVADERS, seed=0, train=False)
        data = env.rollout(3000, break_when_any_done=True)
        nxt = data["next"]
        assert nxt["done"].sum() == 1 and nxt["terminated"][0, -1].item() and nxt["game_done"][0, -1].item()
        assert torch.equal(nxt["reward"], nxt["raw_reward"]) and nxt["raw_reward"].max() > 1
        assert env.lives == [0]

    def test_max_episode_steps_truncates_the_game(self):
        env = BatchedAtariEnv(2, BREAKOUT, seed=0, train=False, max_episode_steps=12)
        nxt = env.rollout(12)["next"]
        assert nxt["truncated"][:, -1].all() and nxt["done"][:, -1].all() and nxt["game_done"][:, -1].all()
        assert not nxt["terminated"].any() and not nxt["done"][:, :-1].any()

    def test_collector_resets_done_copies(self):
        env = BatchedAtariEnv(2, BREAKOUT, frame_size=32)
        env.set_seed(0)
        collector = Collector(env, None, frames_per_batch=200, total_frames=400)
        data = torch.cat(list(collector), dim=1)
        collector.shutdown()
        assert data["next", "pixels"].shape == (2, 200, 32, 32, 3)
        done = data["next", "done"].squeeze(-1)
        assert done.any()  # random Breakout loses a life within 200 steps
        for w, t in done[:, :-1].nonzero().tolist():
            obs = data["observation"][w, t + 1]
            assert (obs == obs[:1]).all()  # a fresh stack after every reset
            assert data["collector", "traj_ids"][w, t + 1] != data["collector", "traj_ids"][w, t]

    @pytest.mark.parametrize("kwargs, match", [
        ({"num_envs": 0}, "num_envs must be an int >= 1"),
        ({"env_id": "CartPole-v1"}, "needs an ALE id"),
        ({"env_id": "ALE/NoSuchGame-v5"}, "could not find env_id='ALE/NoSuchGame-v5'"),
        ({"env_kwargs": {"mode": 1}}, r"\['mode'\] not supported by ale-py's vector env"),
        ({"num_threads": 0}, "num_threads must be None or an int >= 1"),
        ({"frame_skip": 0}, "frame_skip must be an int >= 1"),
        ({"frame_view": "grid"}, r"frame_view must be one of \('screen', 'score'\)"),
        ({"env_id": "ALE/Tennis-v5", "frame_view": "score"}, "knows where .* draw the score, not 'ALE/Tennis-v5'"),
    ])
    def test_construction_errors(self, kwargs, match):
        kwargs = {"num_envs": 2, "env_id": BREAKOUT, **kwargs}
        with pytest.raises(ValueError, match=match):
            BatchedAtariEnv(kwargs.pop("num_envs"), kwargs.pop("env_id"), **kwargs)

    def test_recipes_batch_atari_factories(self):
        from vlmrb_torchrl.recipes.envs import env_factory, has_batched_env, make_batched_env

        factory = env_factory(BREAKOUT, train=False, render=True, max_episode_steps=50)
        env = make_batched_env(factory, 3)
        assert type(env) is BatchedAtariEnv and env.batch_size == (3,) and not env.train_mode
        assert env.max_episode_steps == 50 and has_batched_env(factory)


# ---------------------------------------------------------------------------------- the score view
class TestScoreView:
    """``frame_view="score"``: the scorer's frames are the box of the agent's score, read at 2x."""

    def test_score_frames_are_the_score_box_of_the_max_pooled_screen(self):
        env = make_atari_env(BREAKOUT, seed=0, frame_view="score")
        for nxt in play(env, random_actions(4, 30, seed=1)):
            screen = np.maximum(env._rgb[0], env._rgb[1])
        top, left, side = atari_module.ATARI_SCORE_BOXES["Breakout"]
        box = screen[top:top + side, left:left + side]
        # every screen pixel becomes a 2x2 block of the 64-px frame
        assert np.array_equal(nxt["pixels"].numpy(), box.repeat(2, axis=0).repeat(2, axis=1))
        env.close()

    def test_batched_score_frames_match_atari_env(self):
        kw = dict(noop_max=0, env_kwargs={"repeat_action_probability": 0.0}, train=False, frame_view="score", seed=3)
        batched, single = BatchedAtariEnv(1, "ALE/Pong-v5", **kw), make_atari_env("ALE/Pong-v5", **kw)
        for g, w in zip(batched_play(batched, [[a] for a in random_actions(6, 40, seed=2)]),
                        play(single, random_actions(6, 40, seed=2))):
            assert torch.equal(g["pixels"][0], w["pixels"])
        batched.close()
        single.close()

    def test_pong_score_box_shows_the_green_points_only(self):
        """The box changes when the agent's (green) points change, and not when the opponent's do."""
        env = make_atari_env("ALE/Pong-v5", seed=0, train=False, frame_view="score")
        ale = env.unwrapped.ale
        td = env.reset()
        frames = {}
        for orange, green in ((0, 0), (7, 0), (7, 5)):
            ale.setRAM(13, orange)
            ale.setRAM(14, green)
            td["action"] = torch.tensor(0)
            td = env.step(td)["next"]
            frames[orange, green] = td["pixels"]
        assert torch.equal(frames[0, 0], frames[7, 0]) and not torch.equal(frames[7, 0], frames[7, 5])
        env.close()

    def test_scorer_frames_checks_its_view(self):
        screens = np.zeros((2, 210, 160, 3), dtype=np.uint8)
        assert atari_module.scorer_frames(screens, 32).shape == (2, 32, 32, 3)
        with pytest.raises(ValueError, match="frame_view must be one of"):
            atari_module.scorer_frames(screens, 32, frame_view="box")
        with pytest.raises(ValueError, match="not 'Tennis'"):
            atari_module.scorer_frames(screens, 32, frame_view="score", game="Tennis")


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
