"""Fixtures for the scorer-backend tests: tiny VLMs built once per session, offline mode.

Everything here applies to tests under ``tests/scorers/`` only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import tiny_vlms
from ._shared import make_clips


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
            built[family] = tiny_vlms.build(family, tmp_path_factory.mktemp(f"tiny_{family}"))
        return built[family]

    return get
