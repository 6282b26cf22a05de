"""The examples run, and docs/examples.md shows the DQN port's changed lines as they are."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PORT = ROOT / "examples" / "dqn_atari_vlmrb"
DOC = ROOT / "docs" / "examples.md"


def _doc_diff_lines() -> list[str]:
    """The added lines of the diff blocks of docs/examples.md (without the leading '+')."""
    blocks = re.findall(r"```diff\n(.*?)```", DOC.read_text(), re.S)
    return [line[1:].strip() for block in blocks for line in block.splitlines() if line.startswith("+")]


def test_every_marked_line_of_the_port_is_explained_and_every_shown_line_exists():
    shown = _doc_diff_lines()
    code = [line.strip() for f in ("dqn_atari.py", "utils_atari.py") for line in (PORT / f).read_text().splitlines()]
    config = [line.strip() for line in (PORT / "config_atari.yaml").read_text().splitlines()]
    missing_in_code = [line for line in shown if line and line not in code + config]
    assert not missing_in_code, f"docs/examples.md shows lines the example does not have: {missing_in_code}"
    marked = [line for line in code if line.endswith("# VLM-RB") or "# VLM-RB:" in line]
    unexplained = [line for line in marked if line not in shown and not line.startswith(("def ", "#"))]
    assert not unexplained, f"lines marked VLM-RB that docs/examples.md does not show: {unexplained}"


@pytest.mark.slow
def test_the_ported_dqn_example_trains_with_vlm_replay(tmp_path):
    pytest.importorskip("hydra", reason="the example uses hydra (pip install hydra-core)")
    pytest.importorskip("ale_py")
    # 400 agent steps in batches of 50 (evaluation only at test_interval, never here), 2 updates per batch
    overrides = ["device=cpu", "collector.total_frames=1600", "collector.frames_per_batch=200",
                 "collector.init_random_frames=400", "collector.annealing_frames=1600", "buffer.buffer_size=10000",
                 "loss.num_updates=2", "logger.test_interval=100000000", "vlm.warmup=10",
                 f"hydra.run.dir={tmp_path}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "dqn_atari.py", *overrides], cwd=PORT, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    scored = list(tmp_path.rglob("vlm/fraction_scored.csv"))
    assert scored, sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    last = scored[0].read_text().strip().splitlines()[-1]
    assert float(last.split(",")[-1]) > 0.5  # the clips were scored while the agent trained
