"""A benchmark's "before" arm: an earlier commit of this repository, checked out for the run."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def checkout(root: Path, revision: str | None, path: Path) -> Iterator[Path | None]:
    """A detached ``git worktree`` of ``revision`` at ``path`` for the ``with`` block (``None``: no checkout),
    removed afterwards; run that commit's package with ``PYTHONPATH=<path>``."""
    if revision is None:
        yield None
        return
    subprocess.run(["git", "worktree", "add", "--detach", str(path), revision], cwd=root, check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=root, capture_output=True)
