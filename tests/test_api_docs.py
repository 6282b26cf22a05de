"""The API reference covers every public name (docs/api_coverage.py, also run by the Sphinx build)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("sphinx", reason="the docs extra (pip install 'vlmrb-torchrl[docs]') reads doc comments")


def _coverage():
    spec = importlib.util.spec_from_file_location("api_coverage", ROOT / "docs" / "api_coverage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("api_coverage", module)
    spec.loader.exec_module(module)
    return module


def test_every_public_name_is_documented_with_a_runnable_example():
    problems = _coverage().gaps()
    assert not problems, "the API reference is incomplete:\n  " + "\n  ".join(problems)


def test_a_gap_is_reported_by_name(tmp_path):
    """A page that loses an entry, and a name whose example is all skipped, are named in the report."""
    coverage = _coverage()
    for page in (ROOT / "docs" / "api").glob("*.rst"):
        text = page.read_text().replace(".. autoclass:: AtariEnv\n", "")
        (tmp_path / page.name).write_text(text)
    problems = coverage.gaps(tmp_path)
    assert any(p.startswith("vlmrb_torchrl.envs.AtariEnv is in vlmrb_torchrl.envs.__all__ but no API page") for p in problems)
    assert len(problems) == 1, problems

    def skipped_only():
        """Example.

        >>> skipped_only()  # doctest: +SKIP
        """

    assert not coverage.has_runnable_example(skipped_only)
    assert coverage.has_runnable_example(coverage.has_runnable_example) is False  # no example there either
    assert coverage.doc_comment("vlmrb_torchrl.envs", "DOORKEY_ACTIONS")  # followed to envs/minigrid/env.py


def test_public_classes_show_their_constructors_signature():
    """issue 63: TorchRL's metaclasses (samplers, buffers, envs) made the API pages show ``(*args, **kwargs)``."""
    import inspect

    coverage = _coverage()
    hidden = []
    for module_name in coverage.MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if not inspect.isclass(obj) or "__init__" not in vars(obj):
                continue
            init = list(inspect.signature(obj.__init__).parameters.values())[1:]
            if list(inspect.signature(obj).parameters.values()) != init:
                hidden.append(f"{module_name}.{name}{inspect.signature(obj)}")
    assert not hidden, hidden
