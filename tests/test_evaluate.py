"""Batched evaluation (``recipes.evaluate.evaluate`` with ``num_envs > 1``) against a scripted env."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from vlmrb_torchrl.recipes.evaluate import evaluate


def policy(td):
    return td.set("action", torch.zeros(td.shape, dtype=torch.long))


class CyclingEpisodes(EnvBase):
    """Episode k (k = 0, 1, 2, ...) lasts ``lengths[k % 3]`` steps, pays 1 per step and succeeds iff it lasts 2."""

    lengths = (1, 2, 3)

    def __init__(self):
        super().__init__(batch_size=torch.Size([]))
        flag = Categorical(n=2, shape=(1,), dtype=torch.bool)
        self.observation_spec = Composite(observation=Unbounded(shape=(1,)), success=flag.clone())
        self.action_spec = Categorical(n=2, shape=())
        self.reward_spec = Unbounded(shape=(1,))
        self.episode, self.t = -1, 0

    def _set_seed(self, seed):
        pass

    def _reset(self, td=None, **kwargs):
        self.episode, self.t = self.episode + 1, 0
        return TensorDict(observation=torch.zeros(1), success=torch.zeros(1, dtype=torch.bool))

    def _step(self, td):
        self.t += 1
        length = self.lengths[self.episode % 3]
        done = self.t >= length
        return TensorDict(observation=torch.full((1,), float(self.t)), reward=torch.ones(1),
                          success=torch.tensor([done and length == 2]), done=torch.tensor([done]),
                          terminated=torch.tensor([done]))


@pytest.mark.parametrize("num_envs", [1, 2, 3])
def test_counts_each_episode_once(num_envs):
    # 6 episodes: lengths 1, 2, 3 twice (per env copy with 2 or 3 copies), returns = lengths
    out = evaluate(policy, CyclingEpisodes, episodes=6 if num_envs != 3 else 3, seed=0, num_envs=num_envs)
    if num_envs == 3:  # one episode per copy: every copy plays its first episode (length 1)
        assert out == {"eval_success": 0.0, "eval_return": 1.0, "eval_episode_len": 1.0}
    else:  # each episode pays 1 per step: its return is its length
        assert out == pytest.approx({"eval_success": 1 / 3, "eval_return": 2.0, "eval_episode_len": 2.0})


def test_max_steps_cuts_unfinished_episodes():
    # quota 3 per copy; after 4 steps each copy finished lengths 1 and 2 and is 1 step into length 3
    out = evaluate(policy, CyclingEpisodes, episodes=6, seed=0, num_envs=2, max_steps=4)
    # the cut episode counts the one step it played
    assert out == pytest.approx({"eval_success": 1 / 3, "eval_return": (1 + 2 + 1) / 3,
                                 "eval_episode_len": (1 + 2 + 1) / 3})


def test_runs_exactly_the_requested_episodes():
    # 5 episodes in 2 copies: the first copy plays 3 (lengths 1, 2, 3), the second 2 (lengths 1, 2)
    out = evaluate(policy, CyclingEpisodes, episodes=5, seed=0, num_envs=2)
    assert out == pytest.approx({"eval_success": 2 / 5, "eval_return": (1 + 2 + 3 + 1 + 2) / 5,
                                 "eval_episode_len": (1 + 2 + 3 + 1 + 2) / 5})


def test_the_schedule_moves_only_for_due_evaluations():
    """A run's last evaluation (at total_frames, off the schedule) leaves the next one where it was:
    resumed with a larger total_frames, the run evaluates at 30k, not 40k."""
    from types import SimpleNamespace

    from vlmrb_torchrl.recipes.evaluate import maybe_evaluate

    logged = []
    run = SimpleNamespace(log=lambda row: logged.append(dict(row)))
    cfg = SimpleNamespace(total_frames=25_000, eval_every=10_000, eval_episodes=2, eval_envs=1, seed=0)
    counters = {"env_steps": 0, "next_eval": 10_000}
    for steps in (5_000, 10_000, 15_000, 20_000, 25_000):
        counters["env_steps"] = steps
        maybe_evaluate(run, {"env_steps": steps}, cfg=cfg, counters=counters, policy=policy,
                       make_env=CyclingEpisodes, max_steps=10)
    assert [row["env_steps"] for row in logged] == [10_000, 20_000, 25_000]
    assert counters["next_eval"] == 30_000


class PolicyOnAnotherDevice:
    """Stands in for the learner's GPU module (parameters on another device: ``meta`` here, there is no GPU)."""

    def __init__(self):
        self.seen = []

    def parameters(self):
        yield torch.empty(1, device="meta")

    def __call__(self, td):
        self.seen.append(td.device)
        return TensorDict(action=torch.zeros(td.shape, dtype=torch.long), batch_size=td.shape)


@pytest.mark.parametrize("num_envs", [1, 3])
def test_a_policy_on_another_device_gets_its_inputs_there(num_envs):
    """device=cuda: evaluation feeds the learner's GPU policy CPU env data; it must move them."""
    policy = PolicyOnAnotherDevice()
    result = evaluate(policy, CyclingEpisodes, episodes=3, seed=0, num_envs=num_envs)
    assert policy.seen and set(policy.seen) == {torch.device("meta")}
    # one env: its episodes 0-2 last 1, 2, 3 steps; three envs: each plays its episode 0 (1 step); 1 per step
    assert result["eval_return"] == pytest.approx(2.0 if num_envs == 1 else 1.0)


class LongEpisodes(CyclingEpisodes):
    """Every episode lasts 5 steps and succeeds at its end: a cap below 5 scores it as a failure."""

    lengths = (5, 5, 5)

    def _step(self, td):
        out = super()._step(td)
        return out.set("success", out["done"].clone())


def random_policy(td):
    """Draws from torch's global RNG, as an epsilon-greedy policy does."""
    return td.set("action", torch.randint(0, 2, td.shape))


def test_the_full_limit_evaluation_runs_at_its_schedule_and_at_the_end():
    """With make_full_env, the rows at each eval_full_every (default: checkpoint_every) and the last one
    also hold the evaluation at the training limit; it sees the slow success the cap hides."""
    from types import SimpleNamespace

    from vlmrb_torchrl.recipes.evaluate import maybe_evaluate

    logged = []
    run = SimpleNamespace(log=lambda row: logged.append(dict(row)))
    cfg = SimpleNamespace(total_frames=50_000, eval_every=10_000, eval_episodes=4, eval_envs=2, seed=0,
                          checkpoint_every=20_000, eval_full_every=None)
    counters = {"env_steps": 0, "next_eval": 10_000}
    for steps in range(5_000, 50_001, 5_000):
        counters["env_steps"] = steps
        maybe_evaluate(run, {"env_steps": steps}, cfg=cfg, counters=counters, policy=policy, make_env=LongEpisodes,
                       max_steps=3, make_full_env=LongEpisodes, full_max_steps=100)
    assert [row["env_steps"] for row in logged] == [10_000, 20_000, 30_000, 40_000, 50_000]
    full_rows = [row["env_steps"] for row in logged if "eval_full_success" in row]
    assert full_rows == [20_000, 40_000, 50_000]
    for row in logged:
        assert row["eval_success"] == 0.0 and row["eval_episode_len"] == 3.0  # cut at 3: failures
    for row in (r for r in logged if "eval_full_success" in r):
        assert row["eval_full_success"] == 1.0 and row["eval_full_episode_len"] == 5.0
        assert row["eval_full_return"] == 5.0


def test_the_full_limit_evaluation_leaves_the_global_rng_alone():
    """The learner's exploration draws from torch's global RNG after an evaluation: the extra evaluation
    must not move it, or adding it would change the run."""
    from types import SimpleNamespace

    from vlmrb_torchrl.recipes.evaluate import maybe_evaluate

    def draws_after(make_full_env):
        torch.manual_seed(3)
        run = SimpleNamespace(log=lambda row: None)
        cfg = SimpleNamespace(total_frames=10_000, eval_every=10_000, eval_episodes=4, eval_envs=2, seed=0,
                              checkpoint_every=10_000, eval_full_every=None)
        counters = {"env_steps": 10_000, "next_eval": 10_000}
        row = {}
        maybe_evaluate(run, row, cfg=cfg, counters=counters, policy=random_policy, make_env=LongEpisodes,
                       max_steps=3, make_full_env=make_full_env, full_max_steps=100)
        return torch.rand(5), row

    without, row_without = draws_after(None)
    with_full, row_with = draws_after(LongEpisodes)
    assert "eval_full_success" in row_with and "eval_full_success" not in row_without
    assert torch.equal(without, with_full)


def test_eval_full_every_zero_turns_it_off_and_a_negative_value_is_refused():
    from vlmrb_torchrl.recipes.config import ConfigError, DQNConfig

    assert DQNConfig(eval_full_every=0).validate().eval_full_every == 0
    with pytest.raises(ConfigError, match="eval_full_every=-1 is invalid: expected None or an integer >= 0"):
        DQNConfig(eval_full_every=-1).validate()


def _batch(done, success=None):
    td = {"next": {"done": torch.tensor(done, dtype=torch.bool).unsqueeze(-1)}}
    if success is not None:
        td["next"]["success"] = torch.tensor(success, dtype=torch.bool).unsqueeze(-1)
    return TensorDict(td, [len(done), len(done[0])])


def test_training_episodes_are_counted_across_batches_and_reset_with_the_collector():
    from vlmrb_torchrl.recipes.loop import EpisodeTracker

    tracker, counters = EpisodeTracker(), dict.fromkeys(EpisodeTracker.COUNTERS, 0)
    # env 0: a success in the first batch (not at the episode's last step) ends in the second one
    tracker.add(_batch([[0, 0, 0], [1, 0, 0]], [[0, 1, 0], [0, 0, 0]]), counters)
    assert EpisodeTracker.row(counters) == {"train_success": 0.0, "train_episode_len": 1.0}
    tracker.add(_batch([[0, 1, 0], [0, 0, 1]], [[0, 0, 0], [0, 0, 0]]), counters)
    assert counters["train_window_episodes"] == 3
    assert counters["train_window_successes"] == 1  # env 0's episode of 5 steps
    assert counters["train_window_episode_steps"] == 1 + 5 + 5
    EpisodeTracker.logged(counters)  # a row was logged: the next window starts empty
    assert EpisodeTracker.row(counters) == {}
    tracker.reset()  # a new collector: env 0's running episode (1 step) is forgotten
    tracker.add(_batch([[1, 0, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]), counters)
    assert EpisodeTracker.row(counters) == {"train_success": 0.0, "train_episode_len": 1.0}


def test_training_episodes_without_a_success_flag_give_only_their_length():
    from vlmrb_torchrl.recipes.loop import EpisodeTracker

    tracker, counters = EpisodeTracker(), dict.fromkeys(EpisodeTracker.COUNTERS, 0)
    tracker.add(_batch([[0, 1], [1, 1]]), counters)
    assert EpisodeTracker.row(counters) == {"train_episode_len": 4 / 3}
