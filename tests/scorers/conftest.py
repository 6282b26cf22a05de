"""Fixtures for the scorer-backend tests: tiny VLMs built once per session, offline mode.

Everything here applies to tests under ``tests/scorers/`` only. A module that tests one Hugging
Face backend on the tiny models sets ``BACKEND`` (its spec prefix, ``"clip"`` or ``"hf"``) and
``FAMILIES`` (the tiny model families it loads) for ``family_dir``, ``shared_scorer`` and its
contract classes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from vlmrb_torchrl.scorers import make_scorer
from vlmrb_torchrl.testing import ScorerContract, make_clips

from . import tiny_vlms

#: scorers built by ``shared_scorer``, by (spec, kwargs), kept for the whole session
_SCORERS: dict = {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # a test taking family_dir runs once per tiny model family its module lists in FAMILIES
    # (families in its SLOW_FAMILIES are marked slow: the default tier keeps one per kind)
    if "family_dir" in metafunc.fixturenames:
        slow = getattr(metafunc.module, "SLOW_FAMILIES", ())
        params = [pytest.param(f, marks=pytest.mark.slow) if f in slow else f for f in metafunc.module.FAMILIES]
        metafunc.parametrize("family_dir", params, indirect=True)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """No test under tests/scorers may reach the network (HF_HUB_OFFLINE is read at call time)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one intra-op thread (and do not fight a busy CPU); restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_clips():
    return make_clips()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """``tiny_model_dir(family)`` → a directory holding that tiny model + processor (built once)."""
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            if not tiny_vlms._has_transformers:
                pytest.skip("needs transformers and pillow (pip install 'vlmrb-torchrl[vlm]')")
            if family in tiny_vlms.NEEDS_TORCHVISION and not tiny_vlms._has_torchvision:
                pytest.skip(f"the {family} processor needs torchvision (transformers' video processors)")
            module = tiny_vlms.NEEDS_MODULE.get(family)
            if module is not None and importlib.util.find_spec(module) is None:
                pytest.skip(f"the {family} model needs {module} (pip install 'vlmrb-torchrl[vlm]')")
            built[family] = tiny_vlms.build(family, tmp_path_factory.mktemp(f"tiny_{family}"))
        return built[family]

    return get


@pytest.fixture
def family_dir(request, tiny_model_dir):
    """``(family, directory)`` of the tiny model this test runs with (one of its module's ``FAMILIES``)."""
    return request.param, tiny_model_dir(request.param)


@pytest.fixture
def shared_scorer(request):
    """``shared_scorer(directory, **kwargs)`` → the module's ``BACKEND`` scorer on that model, built
    once per (directory, kwargs) for the whole session: loading is the slow part."""
    backend = request.module.BACKEND

    def get(directory, **kwargs):
        spec = f"{backend}:{directory}"
        key = (spec, repr(sorted(kwargs.items())))  # kwargs may hold dicts and lists
        if key not in _SCORERS:
            _SCORERS[key] = make_scorer(spec, **kwargs)
        return _SCORERS[key]

    return get


@pytest.fixture(autouse=True)
def _tiny_contract(request):
    """A :class:`ScorerContract` class with a tiny model ``family`` checks the shared scorer of that model."""
    cls = request.cls
    if cls is None or not issubclass(cls, ScorerContract) or getattr(cls, "family", None) is None:
        return
    directory = request.getfixturevalue("tiny_model_dir")(cls.family)
    scorer_of = request.getfixturevalue("shared_scorer")
    request.instance.make_scorer = lambda: scorer_of(directory)
