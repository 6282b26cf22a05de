"""A fifth env family, added as a user would add one: its record and env in one module, one registration line.

What adding a family touches: its folder (here this module: an env, a factory, a record) and one line
(``FAMILY_MODULES`` for a family that ships with the package; :func:`register_family` here). The recipes,
``oracle:<name>``, ``scorer=auto``, the config checks and the CLI then know it without another edit.
"""

from __future__ import annotations

import csv
import functools
import importlib

import pytest
import torch
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from vlmrb_torchrl.envs import EnvFamily, families, family_of, get_family, register_family, unregister_family
from vlmrb_torchrl.envs._base import done_spec, flag_spec, step_output
from vlmrb_torchrl.envs.family import FAMILY_MODULES

_FLAGS = ("success", "progress_event", "terminated", "truncated", "done")


class CorridorEnv(EnvBase):
    """A corridor of ``length`` cells: start at the left end, reach the right one (+1, the episode ends).
    Observation: the one-hot of the agent's cell; actions: left, right; frames: the corridor, the agent lit."""

    def __init__(self, length: int = 5, *, render: bool = False, max_episode_steps: int | None = None,
                 device="cpu") -> None:
        super().__init__(device=device, batch_size=torch.Size([]))
        self.length, self.from_pixels = length, render
        self.max_episode_steps = max_episode_steps or 4 * length
        obs = {"observation": Bounded(0.0, 1.0, shape=(length,), dtype=torch.float32)}
        if render:
            obs["pixels"] = Bounded(0, 255, shape=(4, 4 * length, 3), dtype=torch.uint8)
        obs.update({key: flag_spec() for key in _FLAGS[:2]})
        self.observation_spec = Composite(obs, shape=())
        self.action_spec = Categorical(2, shape=(), dtype=torch.int64)
        self.reward_spec = Unbounded(shape=(1,), dtype=torch.float32)
        self.done_spec = done_spec()
        self._pos = self._steps = 0
        self._rng = torch.Generator().manual_seed(0)

    def _entries(self) -> dict[str, torch.Tensor]:
        out = {"observation": torch.nn.functional.one_hot(torch.tensor(self._pos), self.length).float()}
        if self.from_pixels:
            frame = torch.zeros(4, 4 * self.length, 3, dtype=torch.uint8)
            frame[:, 4 * self._pos: 4 * self._pos + 4] = 255
            out["pixels"] = frame
        return out

    def _reset(self, tensordict=None, **kwargs):
        self._pos = self._steps = 0
        return step_output(self._entries(), _FLAGS, [False] * len(_FLAGS), None)

    def _step(self, tensordict):
        self._pos = max(0, min(self.length - 1, self._pos + (1 if int(tensordict["action"]) == 1 else -1)))
        self._steps += 1
        success = self._pos == self.length - 1
        truncated = self._steps >= self.max_episode_steps and not success
        return step_output(self._entries(), _FLAGS, [success, success, success, truncated, success or truncated],
                           float(success))

    def _set_seed(self, seed):
        self._rng.manual_seed(int(seed or 0))


def make_corridor_env(env_id: str, **kwargs) -> CorridorEnv:
    """``Corridor-<length>-v0`` -> a :class:`CorridorEnv` of that length."""
    return CorridorEnv(int(env_id.split("-")[1]), **kwargs)


class CorridorFamily(EnvFamily):
    """The family's record: its ids, factory and oracle; everything else is the base class's default."""

    name = "corridor"
    title = "Corridor"
    id_prefixes = ("Corridor-",)
    example_id = "Corridor-5-v0"
    recipe = "dqn"
    env_factory = f"{__name__}:make_corridor_env"
    oracles = {"corridor": ("next", "progress_event")}


@pytest.fixture
def corridor():
    family = register_family(CorridorFamily())  # the one registration line
    yield family
    unregister_family("corridor")


def test_the_shipped_families_each_live_in_their_own_folder():
    for module, family in zip(FAMILY_MODULES, families()):
        assert module == f"vlmrb_torchrl.envs.{family.name}"
        assert importlib.import_module(module).FAMILY is family  # the record is the folder's __init__
        assert family.recipe in ("dqn", "sac") and family.owns(family.example_id)
    assert family_of("Corridor-5-v0") is None  # not registered yet


def test_a_registered_family_is_known_to_the_registry_oracles_and_config(corridor):
    from vlmrb_torchrl.recipes.config import ConfigError, DQNConfig, SACConfig
    from vlmrb_torchrl.recipes.envs import env_factory, has_batched_env
    from vlmrb_torchrl.scorers import ORACLE_EVENT_KEYS, make_scorer

    assert family_of("Corridor-7-v0") is corridor and get_family("corridor") is corridor
    assert ORACLE_EVENT_KEYS["corridor"] == ("next", "progress_event")
    assert make_scorer("oracle:corridor").events_key == ("next", "progress_event")
    env_fn = env_factory("Corridor-7-v0", render=True)
    assert isinstance(env_fn, functools.partial) and not has_batched_env(env_fn)
    assert env_fn().rollout(3)["next", "pixels"].shape == (3, 4, 28, 3)
    assert DQNConfig(env="Corridor-7-v0", scorer="oracle:corridor").validate().frame_view == "grid"
    # scorer=auto: no built-in model knows corridors, so the family's oracle
    assert DQNConfig(env="Corridor-7-v0").validate().scorer == "oracle:corridor"
    with pytest.raises(ConfigError, match="a scorer for Corridor envs \\(oracle:corridor, "):
        DQNConfig(env="Corridor-7-v0", scorer="oracle:minigrid").validate()
    with pytest.raises(ConfigError, match="env='Corridor-7-v0' is invalid: expected robosuite"):
        SACConfig(env="Corridor-7-v0").validate()  # a DQN family
    with pytest.raises(ConfigError, match="actions='left' is invalid: expected 'auto' or 'all' \\(the others are for "
                                          "MiniGrid"):
        DQNConfig(env="Corridor-7-v0", scorer="oracle:corridor", actions="left").validate()


def test_the_dqn_recipe_trains_on_it_with_vlm_replay_and_the_oracle(corridor, tmp_path):
    from vlmrb_torchrl.cli import main

    out = tmp_path / "run"
    assert main(["train", "dqn", "env=Corridor-5-v0", "replay=vlm", "scorer=oracle:corridor", "total_frames=512",
                 "num_envs=2", "frames_per_batch=64", "learning_starts=128", "buffer_size=512", "batch_size=32",
                 "clip_len=4", "eval_every=512", "eval_episodes=2", "eval_envs=1", "checkpoint_every=512",
                 "gallery_clips=1", "gallery_steps=40", "progress=false", "tensorboard=false",
                 f"output_dir={out}"]) == 0
    with open(out / "metrics.csv", newline="") as f:
        last = list(csv.DictReader(f))[-1]
    assert int(last["env_steps"]) == 512 and float(last["fraction_scored"]) > 0.9
    assert sorted(p.name[:3] for p in (out / "gallery").glob("*_score*")) == ["bot", "top"]
