"""Sphinx configuration: the user docs (Markdown, through MyST) and the API reference (autodoc +
autosummary on the docstrings, Google style through napoleon). ``make docs`` builds it with
warnings as errors; the build also fails when a public name has no API entry, no runnable
example or no doc comment (``api_coverage.py``)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's package, not an installed copy
sys.path.insert(0, str(HERE))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

import api_coverage  # noqa: E402

import vlmrb_torchrl  # noqa: E402

project = "vlmrb-torchrl"
author = "vlmrb-torchrl developers"
copyright = "vlmrb-torchrl developers"
release = vlmrb_torchrl.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Markdown: heading anchors so that links such as scorers.md#supported-families resolve
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
autosummary_generate = False  # the API pages list their entries themselves
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = [("Keyword Args", "params_style")]

html_theme = "furo"
html_title = f"vlmrb-torchrl {release}"



def _constant_docs(app, what, name, obj, options, lines):
    """A constant is described by its ``#:`` comment, in the module that defines it when it is
    re-exported (``vlmrb_torchrl.envs.DOORKEY_ACTIONS``), never by the docstring of its type."""
    if what == "data":
        module, _, attr = name.rpartition(".")
        lines[:] = api_coverage.doc_comment(module, attr).splitlines()


_STUDIES_LINK = re.compile(r"\[([^\]]+)\]\(\.\./studies/([^)#\s]*)(#[^)\s]*)?\)")


def _studies_links(app, docname, source):
    """The lab notebook (``studies/``) is not part of the HTML docs: a page's link to it (which works on the
    repository's pages) becomes its text and the repository path, ``text (studies/results.md)``."""
    source[0] = _STUDIES_LINK.sub(lambda m: f"{m.group(1)} (`studies/{m.group(2)}`)", source[0])


def _check_coverage(app):
    problems = api_coverage.gaps()
    if problems:
        raise RuntimeError("the API reference is incomplete:\n  " + "\n  ".join(problems))


def setup(app):
    app.connect("builder-inited", _check_coverage)
    app.connect("source-read", _studies_links)
    app.connect("autodoc-process-docstring", _constant_docs)
