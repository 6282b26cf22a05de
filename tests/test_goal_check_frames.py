"""benchmarks/goal_check_frames.py: its frames put the agent on the goal, one per facing, and a short run
gives the facing the shipped goal check sees on 12x12's frames (from above) and the one it misses (from the left)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("minigrid")
pytest.importorskip("transformers")

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "goal_check_frames.py"
_spec = importlib.util.spec_from_file_location("goal_check_frames", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules["goal_check_frames"] = bench
_spec.loader.exec_module(bench)

DOORKEY_12 = "MiniGrid-DoorKey-12x12-v0"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_frames_show_the_agent_on_the_goal_once_per_facing():
    frames = bench.goal_frames(DOORKEY_12, seed=0)
    assert list(frames) == list(bench.FACINGS)
    # the goal is the bottom-right cell inside the walls: cell (10, 10), 4-px tiles from pixel 8
    cell = slice(8 + 10 * 4, 8 + 11 * 4)
    tiles = [f[cell, cell] for f in frames.values()]
    assert all((t[..., 0] > 100).any() for t in tiles)  # the agent's red triangle on the green tile
    assert len({t.tobytes() for t in tiles}) == 4  # one triangle per facing
    rest = [np.delete(np.delete(f, np.s_[cell], 0), np.s_[cell], 1) for f in frames.values()]
    assert all(np.array_equal(r, rest[0]) for r in rest)  # nothing else differs


def test_a_short_run_sees_goals_entered_from_above_and_misses_those_from_the_left(capsys):
    results = bench.main(["--env", DOORKEY_12, "--seeds", "2"])
    row = results[DOORKEY_12]
    assert row["down (from above)"][0] > 0.9 and row["right (from the left)"][0] < 0.1
    assert "| MiniGrid-DoorKey-12x12-v0 | 64x64 |" in capsys.readouterr().out
