# Copyright (c) Meta Platforms, Inc. and affiliates.
#
# This source code is licensed under the MIT license found in the
# LICENSE file in the root directory of this source tree.
#
# TorchRL's sota-implementations/dqn/utils_atari.py (pytorch/rl ae9719f), ported to VLM-RB:
# changed lines are marked "VLM-RB" (docs/examples.md).
from __future__ import annotations

import torch.nn
import torch.optim
from torchrl.data import Composite
from torchrl.envs import (
    CatFrames,
    DoubleToFloat,
    EndOfLifeTransform,
    GrayScale,
    GymEnv,
    NoopResetEnv,
    RenameTransform,  # VLM-RB
    Resize,
    RewardSum,
    set_gym_backend,
    SignTransform,
    StepCounter,
    ToTensorImage,
    TransformedEnv,
    VecNorm,
)

from torchrl.modules import ConvNet, MLP, QValueActor
from torchrl.record import VideoRecorder
from vlmrb_torchrl.scorers import CallableScorer, scorer_factory  # VLM-RB


# ====================================================================
# Environment utils
# --------------------------------------------------------------------


def make_env(env_name, frame_skip, device, gym_backend, is_test=False):
    with set_gym_backend(gym_backend):
        env = GymEnv(
            env_name,
            frame_skip=frame_skip,
            from_pixels=True,
            pixels_only=False,
            device=device,
            categorical_action_encoding=True,
        )
    env = TransformedEnv(env)
    env.append_transform(NoopResetEnv(noops=30, random=True))
    if not is_test:
        env.append_transform(EndOfLifeTransform())
        env.append_transform(SignTransform(in_keys=["reward"]))
    env.append_transform(  # VLM-RB: an RGB copy (uint8 [210, 160, 3]) for the scorer; "pixels" becomes the agent's
        RenameTransform(["pixels"], ["vlm_pixels"], create_copy=True)  # 84x84 grey float stack below
    )
    env.append_transform(ToTensorImage())
    env.append_transform(GrayScale())
    env.append_transform(Resize(84, 84))
    env.append_transform(CatFrames(N=4, dim=-3))
    env.append_transform(RewardSum())
    env.append_transform(StepCounter(max_steps=4500))
    env.append_transform(DoubleToFloat())
    env.append_transform(VecNorm(in_keys=["pixels"]))
    return env


# ====================================================================
# Model utils
# --------------------------------------------------------------------


def make_dqn_modules_pixels(proof_environment, device):

    # Define input shape
    input_shape = proof_environment.observation_spec["pixels"].shape
    env_specs = proof_environment.specs
    num_actions = env_specs["input_spec", "full_action_spec", "action"].space.n
    action_spec = env_specs["input_spec", "full_action_spec", "action"]

    # Define Q-Value Module
    cnn = ConvNet(
        activation_class=torch.nn.ReLU,
        num_cells=[32, 64, 64],
        kernel_sizes=[8, 4, 3],
        strides=[4, 2, 1],
        device=device,
    )
    cnn_output = cnn(torch.ones(input_shape, device=device))
    mlp = MLP(
        in_features=cnn_output.shape[-1],
        activation_class=torch.nn.ReLU,
        out_features=num_actions,
        num_cells=[512],
        device=device,
    )
    qvalue_module = QValueActor(
        module=torch.nn.Sequential(cnn, mlp),
        spec=Composite(action=action_spec).to(device),
        in_keys=["pixels"],
    )
    return qvalue_module


def make_dqn_model(env_name, gym_backend, frame_skip, device):
    proof_environment = make_env(
        env_name, frame_skip, gym_backend=gym_backend, device=device
    )
    qvalue_module = make_dqn_modules_pixels(proof_environment, device=device)
    del proof_environment
    return qvalue_module


# ====================================================================
# Evaluation utils
# --------------------------------------------------------------------


def eval_model(actor, test_env, num_episodes=3):
    test_rewards = torch.zeros(num_episodes, dtype=torch.float32)
    for i in range(num_episodes):
        td_test = test_env.rollout(
            policy=actor,
            auto_reset=True,
            auto_cast_to_device=True,
            break_when_any_done=True,
            max_steps=10_000_000,
        )
        test_env.apply(dump_video)
        reward = td_test["next", "episode_reward"][td_test["next", "done"]]
        test_rewards[i] = reward.sum()
    del td_test
    return test_rewards.mean()


def dump_video(module):
    if isinstance(module, VideoRecorder):
        module.dump()


# ====================================================================
# VLM-RB: a scorer that needs no model weights
# --------------------------------------------------------------------


def point_scored(clips):  # VLM-RB
    """1 for a clip in which the agent scores a point (a positive clipped reward on a real step), else 0."""
    reward = clips["next", "reward"].reshape(clips.shape)
    return ((reward > 0) & clips["mask"]).any(dim=1).float()


@scorer_factory  # VLM-RB: a python: spec may call it (config_atari.yaml's vlm.scorer)
def make_point_scorer():  # VLM-RB
    """The default scorer of config_atari.yaml: a stand-in for a VLM that runs anywhere. With a VLM's
    weights, set ``vlm.scorer=hf:<dir>`` and ``vlm.scorer_kwargs={frame_key: vlm_pixels}``."""
    return CallableScorer(point_scored, in_keys=[("next", "reward"), "mask"], prompt="the agent scores a point")
