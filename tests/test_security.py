"""What the package never does with its inputs (issue 35's probe, kept true by a scan of the source):
no ``eval``/``exec``, no shell, no unpickling of files (checkpoints load with ``weights_only=True``
unless ``trust_checkpoint=true``), no remote model code unless asked."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vlmrb_torchrl"


def _calls():
    """(file, line, dotted callee name, call node) of every call in the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                yield path.relative_to(PACKAGE.parent).as_posix(), node.lineno, ast.unparse(node.func), node


def test_no_eval_exec_or_shell():
    found = [f"{file}:{line} {name}" for file, line, name, node in _calls()
             if name in ("eval", "exec", "os.system", "os.popen")
             or any(k.arg == "shell" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                    for k in node.keywords)]
    assert found == []


#: Modules whose pickle.loads reads no file: testing (a round trip of a scorer), collector_process (the run's own
#: parent and child talking over a pipe, as multiprocessing does).
_UNPICKLES_NO_FILE = {"vlmrb_torchrl/testing.py", "vlmrb_torchrl/recipes/collector_process.py"}


def test_no_file_is_unpickled():
    """``pickle.load(s)`` of a file, ``np.load(allow_pickle=True)`` and ``torch.load`` without weights-only
    loading appear nowhere; the one ``torch.load`` that may unpickle is the checkpoint's, behind
    ``trust_checkpoint=true``."""
    found = []
    for file, line, name, node in _calls():
        keywords = {k.arg: ast.unparse(k.value) for k in node.keywords}
        if name in ("pickle.load", "pickle.Unpickler") or (name == "np.load" and keywords.get("allow_pickle") != "False"):
            found.append(f"{file}:{line} {name}")
        elif name == "torch.load" and keywords.get("weights_only") not in ("True", "not trust"):
            found.append(f"{file}:{line} torch.load(weights_only={keywords.get('weights_only')})")
        elif name == "pickle.loads" and file not in _UNPICKLES_NO_FILE:
            found.append(f"{file}:{line} {name}")
    assert found == []


@pytest.mark.parametrize("where, name", [("vlmrb_torchrl.scorers.contrastive", "HFContrastiveScorer"),
                                         ("vlmrb_torchrl.scorers.generative", "HFGenerativeScorer")])
def test_remote_model_code_is_off_by_default(where, name):
    import importlib

    cls = getattr(importlib.import_module(where), name)
    assert inspect.signature(cls).parameters["trust_remote_code"].default is False


def test_every_test_docs_reliability_names_exists():
    """docs/reliability.md maps each promise to its tests: every test it names must exist."""
    import re

    doc = (PACKAGE.parent / "docs" / "reliability.md").read_text()
    tests = PACKAGE.parent / "tests"
    source = {p.relative_to(PACKAGE.parent).as_posix(): p.read_text() for p in tests.rglob("test_*.py")}
    missing, checked = [], 0
    section = None  # the first test file named in a section: the file of a row that names none
    for row in doc.splitlines():
        if row.startswith("#"):
            section = None
        current = section
        for ref in re.findall(r"`([^`]+)`", row):
            file, _, rest = ref.rpartition(".py::") if ".py::" in ref else ("", "", ref)
            if file:
                current = file + ".py"
            elif ref.endswith(".py") and ref.startswith("tests/"):
                current = ref
            section = section or current
            if ref.endswith(".py"):
                continue
            if current is None or not re.fullmatch(r"(Test\w+::)?test_\w+|Test\w+", rest):
                continue
            text = source.get(current, "")
            checked += 1
            for name in rest.split("::"):
                kind = "class" if name.startswith("Test") else "def"
                if not re.search(rf"^\s*{kind} {name}\b", text, re.M):
                    missing.append(f"{current}::{rest}")
    assert not any(ref.startswith("tests/") and not (PACKAGE.parent / ref).exists()
                   for ref in re.findall(r"`(tests/[\w/]+\.py)", doc))
    assert missing == [] and checked > 40
