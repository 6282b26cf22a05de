"""TorchRL's own replay-buffer tests, run with VLMPrioritizedSampler in place of PrioritizedSampler (issue 63).

``benchmarks/torchrl_rb_upstream/`` holds pytorch/rl's ``test/rb/`` files that build or name a prioritized
sampler or buffer, unchanged, from commit 373c31a85 ("[Versioning] Bump 0.14.0", branch ``prepare-0.14``: the
stored pytorch/rl mirror has no v0.14.1 tag, and 0.14 split ``test/test_rb.py`` into ``test/rb/``). Its
``conftest.py`` is the only adaptation:

- it keeps the tests whose name, parameters or source name ``PrioritizedSampler``, ``PrioritizedReplayBuffer``,
  ``TensorDictPrioritizedReplayBuffer`` or ``prb`` (the others never reach a prioritized sampler);
- with ``VLMRB_SUBSTITUTE=1`` it rebinds ``PrioritizedSampler`` (in ``torchrl.data`` and the modules that build
  one: ``TensorDictPrioritizedReplayBuffer``, ``PrioritizedReplayBuffer``) to a subclass of
  :class:`~vlmrb_torchrl.VLMPrioritizedSampler` taking PrioritizedSampler's arguments, set where it follows
  PER's law (no VLM scores, ``lambda_max=1, warmup=0, td_boost=True``); ``dtype``, ``device`` other than the
  CPU and ``max_priority_within_buffer=True`` raise ``NotImplementedError``; read-only views give the private
  names the tests read (``_sum_tree``, ``_min_tree``, ``_eps``, ``_alpha``, ``_max_priority``) from the VLM
  sampler's state. ``PrioritizedSliceSampler`` (a subclass of TorchRL's class) is not replaced.

Runs the selection twice, TorchRL's sampler (baseline) then ours, and prints the counts and each test that
fails, grouped by test function and first error line, with its baseline outcome. Usage:

    python benchmarks/torchrl_rb_suite.py [--arm both|baseline|vlm] [--files test_prioritized.py ...]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = Path(__file__).resolve().parent / "torchrl_rb_upstream"
FILES = ["test_prioritized.py", "test_samplers.py", "test_rb_core.py", "test_writers.py", "test_ensemble.py",
         "test_storages.py", "test_composable.py"]


def run_arm(substitute: bool, files: list[str], out: Path) -> dict[str, tuple[str, str]]:
    """Runs pytest on the selection; returns {test id: (outcome, first line of the error)}."""
    env = {**os.environ, "VLMRB_SUBSTITUTE": "1" if substitute else "0", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    report = out / f"{'vlm' if substitute else 'baseline'}.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "--tb=line", "-p", "no:cacheprovider",
                    f"--junitxml={report}", *files], cwd=SUITE, env=env, check=False)
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, (child.get("message") or "").splitlines()[0][:200]
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = (outcome, message)
    return outcomes


def summary(name: str, outcomes: dict[str, tuple[str, str]]) -> str:
    counts = collections.Counter(outcome for outcome, _ in outcomes.values())
    return (f"{name}: {len(outcomes)} selected, {counts['passed']} passed, {counts['failure']} failed, "
            f"{counts['error']} errors, {counts['skipped']} skipped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", choices=["both", "baseline", "vlm"], default="both")
    parser.add_argument("--files", nargs="+", default=FILES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = run_arm(False, args.files, Path(tmp)) if args.arm in ("both", "baseline") else {}
        ours = run_arm(True, args.files, Path(tmp)) if args.arm in ("both", "vlm") else {}
    if base:
        print(summary("TorchRL's PrioritizedSampler", base))
    if ours:
        print(summary("VLMPrioritizedSampler", ours))
    groups = collections.defaultdict(list)
    for test, (outcome, message) in (ours or base).items():
        if outcome in ("failure", "error"):
            function = re.sub(r"\[.*", "", test)
            groups[(function, re.sub(r"0x[0-9a-f]+", "0x..", message))].append(base.get(test, ("-",))[0])
    for (function, message), baseline in sorted(groups.items()):
        print(f"{len(baseline):4d}  {function}  (baseline: {', '.join(sorted(set(baseline)))})\n      {message}")


if __name__ == "__main__":
    main()
