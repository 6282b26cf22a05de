"""CollectorProcess: collection in a child process, one batch ahead, with weights sent at fixed points."""

from __future__ import annotations

import functools

import pytest
import torch
from tensordict import TensorDictBase
from torch import nn

pytest.importorskip("minigrid")

from vlmrb_torchrl.recipes.collector_process import CollectorProcess  # noqa: E402
from vlmrb_torchrl.recipes.envs import env_factory, make_collector  # noqa: E402


class ConstantAction(nn.Module):
    """Acts ``value`` (a parameter: what the learner trains) in every env: the batch shows the weights it used."""

    def __init__(self) -> None:
        super().__init__()
        self.value = nn.Parameter(torch.zeros(()))

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        td.set("action", self.value.detach().round().long().expand(td.shape).clone())
        return td


def factory(policy: nn.Module, total: int = 32):
    return functools.partial(make_collector, env_factory("MiniGrid-Empty-5x5-v0"), policy, num_envs=2,
                             frames_per_batch=8, total_frames=total, seed=0)


@pytest.mark.slow  # spawns a collector process (one such test stays in the default run)
def test_batches_lag_one_learning_phase_behind_the_learner():
    """Batch k >= 2 is collected with the weights the learner had when batch k-1 was handed over."""
    policy = ConstantAction()
    seen = []
    with CollectorProcess(factory(policy), policy, seed=0) as process:
        assert not policy.value.is_shared()  # the child has a copy: the learner's weights are its own
        for k, batch in enumerate(process.collector(0)):
            assert batch.shape == (2, 4)
            seen.append(set(batch["action"].unique().tolist()))
            with torch.no_grad():  # "learning" on batch k
                policy.value.fill_(k + 2)
        assert seen == [{0}, {0}, {2}, {3}]
        # a new collector (as after a checkpoint) restarts the envs from (seed, env_steps) with the weights now
        again = [batch for batch in process.collector(16)]
        assert len(again) == 2 and set(again[0]["action"].unique().tolist()) == {5}


def test_matches_the_in_process_collector_and_restarts_reproducibly():
    """With weights that do not change, the child's batches are the in-process collector's, and a collector
    restarted at the same env_steps gives the same batches (envs and RNG seeded from (seed, env_steps))."""
    policy = ConstantAction()
    with torch.no_grad():
        policy.value.fill_(2)  # forward: the agent walks
    local = list(factory(policy)(env_steps=8))
    with CollectorProcess(factory(policy), policy, seed=0) as process:
        first = list(process.collector(8))
        segment = process.collector(8)
        partial = next(iter(segment))  # leave the segment after one batch (a checkpoint), the next one queued
        segment.shutdown()
        second = list(process.collector(8))
    assert len(first) == len(local) == 3
    for a, b, c in zip(first, local, second):
        assert (a == b).all() and (a == c).all()
    assert (partial == first[0]).all()


@pytest.mark.slow  # spawns a collector process
def test_errors_in_the_child_are_raised_with_its_traceback():
    policy = ConstantAction()
    bad = functools.partial(make_collector, env_factory("MiniGrid-Empty-5x5-v0", not_an_option=1), policy,
                            num_envs=1, frames_per_batch=4, total_frames=8, seed=0)
    with CollectorProcess(bad, policy, seed=0) as process:
        with pytest.raises(RuntimeError, match="collector process failed:(.|\n)*not_an_option"):
            list(process.collector(0))
