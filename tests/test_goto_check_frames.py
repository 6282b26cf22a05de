"""benchmarks/goto_check_frames.py: the wording it reports as the shipped one is the shipped go-to check, and
one short run gives a row per wording."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("minigrid")
pytest.importorskip("transformers")

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "goto_check_frames.py"
_spec = importlib.util.spec_from_file_location("goto_check_frames", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules["goto_check_frames"] = bench
_spec.loader.exec_module(bench)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("mission,colour,kind", [("go to the red ball", "red", "ball"), ("go to a box", None, "box")])
def test_the_shipped_wording_is_the_mission_check(mission, colour, kind):
    from vlmrb_torchrl.envs.minigrid.prompts import mission_prompt_set

    (check,) = mission_prompt_set(mission, doors=False)
    assert bench.wordings(colour, kind)["faces X vs floor, wall, other types in X's colour"] == [
        check.positive, *check.negatives]
    assert bench.GO_TO.fullmatch(mission).groups() == (colour, kind)


def test_a_short_run_gives_a_row_per_wording(capsys):
    rows = bench.main(["--env", "BabyAI-GoToLocal-v0", "--seeds", "3"])
    assert [r["check"] for r in rows] == list(bench.wordings("red", "ball"))
    assert all(0.0 <= r[k] <= 1.0 for r in rows for k in ("precision", "recall", "f1", "best_f1"))
    assert "| go-to check | precision |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["--seeds", "0"])
