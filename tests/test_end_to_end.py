"""End to end: the sampler in a plain TorchRL Collector + DQNLoss loop on a real env."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sampler_in_torchrl_loop.py"


def load_example():
    spec = importlib.util.spec_from_file_location("sampler_in_torchrl_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # trains; the by-hand loop stays in the default run (guide.md's block, the DoorKey example)
def test_collector_dqn_loop_with_scores_and_td_errors():
    result = load_example().main(total_frames=1_600, frames_per_batch=100, warmup_samples=50)
    # every inserted transition was scored at insertion; none of the scores was stale
    assert result["num_filled"] == 1_600
    assert result["fraction_scored"] == 1.0
    assert result["stale_drops"] == 0
    # updates start with the batch that brings the buffer to 1000 frames: 7 batches x 25
    assert result["sample_calls"] == (1_600 - 1_000) // 100 * 25 + 25
    assert result["lambda"] == 0.5
    assert result["episodes"] > 0


def load_doorkey_example():
    path = EXAMPLE.parent / "doorkey_vlmrb_by_hand.py"
    spec = importlib.util.spec_from_file_location("doorkey_vlmrb_by_hand", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_doorkey_example_composes_by_hand():
    pytest.importorskip("minigrid")
    result = load_doorkey_example().main(total_frames=1_024, num_envs=2, frames_per_batch=128,
                                         learning_starts=512, clip_len=8, log_every=1)
    # scored in the background while collecting; the tails are scored at the end
    assert result["scorer_scored"] + result["scorer_dropped"] == result["scorer_submitted"]
    assert result["stale_drops"] == 0
    assert result["fraction_scored"] > 0.9
    # learning runs on the batches that end at 512, 640, ..., 1024 frames: 5 x 128 / 4 updates
    assert result["sample_calls"] == 5 * 128 // 4


def test_vlm_buffer_on_minigrid_collector_scores_every_transition():
    """Async end to end on a real multi-env collector: after close(), each stored transition
    holds exactly the oracle score of its clip, recomputed here from the stored events."""
    pytest.importorskip("minigrid")
    import functools

    import numpy as np
    import torch
    from torchrl.collectors import Collector
    from torchrl.envs import SerialEnv

    from vlmrb_torchrl import ClipSpec, make_vlm_replay_buffer
    from vlmrb_torchrl.envs import make_minigrid_env

    env = SerialEnv(3, functools.partial(make_minigrid_env, "MiniGrid-DoorKey-5x5-v0", render=False))
    env.set_seed(0)
    collector = Collector(env, None, frames_per_batch=150, total_frames=1_500)  # random policy
    clip_len = 6
    rb = make_vlm_replay_buffer(2_000, "oracle:minigrid", clip_spec=ClipSpec(clip_len=clip_len),
                                scorer_batch_size=16)
    for batch in collector:
        rb.extend(batch)
    collector.shutdown()
    rb.close()
    data = rb.storage[: len(rb)]
    events = data["next", "progress_event"].reshape(-1)
    trajs = data["collector", "traj_ids"].reshape(-1)
    expected = np.zeros(len(data), dtype=np.float32)
    for tid in trajs.unique().tolist():
        rows = torch.nonzero(trajs == tid).flatten()
        ev = events[rows]
        for k, row in enumerate(rows.tolist()):
            expected[row] = float(ev[k : k + clip_len].any())
    assert rb.sampler.stats()["fraction_scored"] == 1.0
    np.testing.assert_array_equal(rb.sampler.scores(torch.arange(len(data))).numpy(), expected)
    assert expected.sum() > 0  # random DoorKey play does pick up keys
