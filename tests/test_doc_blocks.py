"""Every code block of the README and docs/ runs as written.

- ```` ```python ```` blocks are executed, page by page, top to bottom, in one namespace per page
  (as a reader going down the page would run them), in a temporary working directory. Each page
  is one test, so a failure names the page, the block's first line number and the error.
- ```` ```bash ```` blocks are checked, not run (they train for minutes to hours): every
  ``vlmrb train <recipe> ...`` line must parse into a valid config (``build_config``: unknown keys
  and bad values fail), every ``vlmrb build-scorer`` line must parse, and every script a
  ``python <path>`` line names must exist.
- A block that cannot run here (real VLM weights, a server, a GPU) is preceded by a marker line
  ``<!-- skip-test: <reason> -->``: it is reported as skipped with the reason. A marker without a
  reason is an error.
- A block preceded by ``<!-- save-as: <file> -->`` is a complete module the page tells the reader
  to save: it is written to that file in the working directory (where later blocks import it
  from, and where ``python:`` scorer specs find it) and executed.

Blocks in other languages (``diff``, ``yaml``, ``text``, none) are not code to run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)])
SKIP_MARKER = re.compile(r"^\s*<!--\s*skip-test:(.*?)-->\s*$")
SAVE_MARKER = re.compile(r"^\s*<!--\s*save-as:\s*(\S+)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclasses.dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None  # the reason, when marked
    save_as: str | None = None  # the file the page tells the reader to save the block as

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page (indented ones in list items too)."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = match.groups()
        start, body = i, []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and lines[i].strip(fence[0]).strip() == ""):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = SKIP_MARKER.match(previous)
        skip = None
        if marker:
            skip = marker.group(1).strip()
            if not skip:
                raise ValueError(f"{page.relative_to(ROOT)}:{start + 1}: a skip-test marker needs a reason")
        code = textwrap.dedent("\n".join(line[len(indent):] if line.startswith(indent) else line for line in body))
        save = SAVE_MARKER.match(previous)
        found.append(Block(page, start + 1, lang.lower(), code, skip, save.group(1) if save else None))
    return found


def _ids(pages):
    return [str(p.relative_to(ROOT)) for p in pages]


PYTHON_PAGES = [p for p in PAGES if any(b.lang == "python" for b in blocks(p))]
BASH_PAGES = [p for p in PAGES if any(b.lang in ("bash", "sh", "shell", "console") for b in blocks(p))]


def test_the_pages_have_blocks_to_check():
    """Guards the collection itself: the README and guide must be found with their blocks."""
    assert ROOT / "README.md" in PYTHON_PAGES and ROOT / "docs" / "guide.md" in PYTHON_PAGES
    assert ROOT / "README.md" in BASH_PAGES


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=_ids(PYTHON_PAGES))
def test_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # modules a page writes (a scorer module) import from here
    namespace: dict = {"__name__": f"doc_{page.stem}"}
    skipped, saved = [], []
    for block in blocks(page):
        if block.lang != "python":
            continue
        if block.skip:
            skipped.append(f"{block.where}: {block.skip}")
            continue
        if block.save_as:
            (tmp_path / block.save_as).write_text(block.code + "\n")
            saved.append(Path(block.save_as).stem)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102 - the docs' own code
        except Exception as err:  # noqa: BLE001 - reported with the block's place
            raise AssertionError(f"the python block at {block.where} fails: {err!r}") from err
    _close_buffers(namespace)
    for module in saved:  # the next page (or test) must not import this page's copy
        sys.modules.pop(module, None)
    if skipped:
        print("skipped blocks:", *skipped, sep="\n  ")


def _close_buffers(namespace: dict) -> None:
    """Closes what a page left open (a VLM replay buffer's worker thread)."""
    for value in namespace.values():
        close = getattr(value, "close", None)
        if callable(close) and type(value).__name__ in ("VLMReplayBuffer", "AsyncScorer"):
            close()


def _commands(code: str) -> list[list[str]]:
    """The commands of a bash block: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if words:
            commands.append(words)
    return commands


def _check_train(words: list[str], where: str) -> None:
    from vlmrb_torchrl.cli import RECIPES, _train_parser, build_config

    recipe = words[2]
    assert recipe in RECIPES, f"{where}: `vlmrb train {recipe}`: no such recipe"
    rest = [w for w in words[3:] if not w.startswith("resume=")]  # a run directory of the reader's
    if "--help" in rest or "-h" in rest:
        return
    if "--config" in rest:  # the reader's YAML file
        at = rest.index("--config")
        del rest[at:at + 2]
    args = _train_parser(recipe).parse_intermixed_args(rest)
    build_config(recipe, args)


def _check_build_scorer(words: list[str], where: str) -> None:
    from vlmrb_torchrl.cli import _build_scorer_parser

    try:
        _build_scorer_parser().parse_args(words[2:])
    except SystemExit as err:
        raise AssertionError(f"{where}: `{shlex.join(words)}` does not parse") from err


def _check_script(words: list[str], where: str, cwd: Path = ROOT) -> None:
    """The script exists and defines every ``--option`` the command passes (a renamed option fails)."""
    script = cwd / words[1]
    assert script.is_file(), f"{where}: {words[1]} does not exist"
    source = script.read_text()
    for word in words[2:]:
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            assert f'"{option}"' in source or f"'{option}'" in source, f"{where}: {words[1]} has no option {option}"


@pytest.mark.parametrize("page", BASH_PAGES, ids=_ids(BASH_PAGES))
def test_bash_blocks_parse(page):
    checked = 0
    for block in blocks(page):
        if block.lang not in ("bash", "sh", "shell", "console") or block.skip:
            continue
        cwd = ROOT
        for words in _commands(block.code):
            if words[0] == "cd" and len(words) == 2:  # later script paths are relative to it
                cwd = cwd / words[1]
                continue
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # MUJOCO_GL=egl python ...
                words = words[1:]
            if not words or any("$" in w for w in words):  # a loop variable: the loop's lines are checked by hand
                continue
            if Path(words[0]).name in ("python", "python3"):
                words = ["python", *words[1:]]
            if words[0] == "python" and len(words) > 2 and words[1] == "-m" and words[2] == "vlmrb_torchrl.cli":
                words = ["vlmrb", *words[3:]]
            try:
                if words[:2] == ["vlmrb", "train"] and len(words) > 2:
                    _check_train(words, block.where)
                    checked += 1
                elif words[:2] == ["vlmrb", "build-scorer"]:
                    _check_build_scorer(words, block.where)
                    checked += 1
                elif words[0] == "python" and len(words) > 1 and words[1].endswith(".py"):
                    _check_script(words, block.where, cwd)
                    checked += 1
            except (argparse.ArgumentError, ValueError) as err:
                raise AssertionError(f"{block.where}: `{shlex.join(words)}`: {err}") from err
    print(f"{page.relative_to(ROOT)}: {checked} commands checked")


if __name__ == "__main__":  # python tests/test_doc_blocks.py: list the blocks and their markers
    for page in PAGES:
        for block in blocks(page):
            print(block.where, block.lang or "-", f"skip: {block.skip}" if block.skip else "")
    sys.exit(0)
