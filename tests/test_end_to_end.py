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
