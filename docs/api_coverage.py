"""Checks that the API reference covers every public name, each with what a reader needs.

Used by ``docs/conf.py`` (the Sphinx build fails on a gap) and by ``tests/test_api_docs.py`` (so
``make test`` catches it without building the docs). For every name in ``__all__`` of the
modules in :data:`MODULES`:

- an API page (``docs/api/*.rst``) documents it with ``autoclass`` / ``autofunction`` /
  ``autodata`` / ``autoexception`` under that module (``.. currentmodule::``), exactly once;
- a class or function has a runnable example: a docstring with a ``>>>`` line that is not
  ``# doctest: +SKIP`` (the test suite runs them with ``--doctest-modules``);
- a constant has a ``#:`` doc comment where it is defined.

Run ``python docs/api_coverage.py`` to list the gaps.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path

#: The modules whose ``__all__`` the API reference must cover.
MODULES = ("vlmrb_torchrl", "vlmrb_torchrl.scorers", "vlmrb_torchrl.envs", "vlmrb_torchrl.testing")
API_DIR = Path(__file__).resolve().parent / "api"
_DIRECTIVE = re.compile(r"^\.\.\s+(currentmodule|autoclass|autofunction|autodata|autoexception)::\s*(\S+)", re.M)


def documented_names(api_dir: Path = API_DIR) -> dict[str, list[str]]:
    """``{"module.Name": [page, ...]}`` for every ``auto*`` directive of the API pages."""
    found: dict[str, list[str]] = {}
    for page in sorted(api_dir.glob("*.rst")):
        module = None
        for kind, target in _DIRECTIVE.findall(page.read_text()):
            if kind == "currentmodule":
                module = target
                continue
            name = target if "." in target and module is None else f"{module}.{target}"
            found.setdefault(name, []).append(page.name)
    return found


def doc_comment(module_name: str, name: str, _seen: frozenset = frozenset()) -> str:
    """The ``#:`` comment above ``name`` where it is defined (following ``from x import name``)."""
    from sphinx.pycode import ModuleAnalyzer

    analyzer = ModuleAnalyzer.for_module(module_name)
    docs = analyzer.find_attr_docs()
    if ("", name) in docs:
        return "\n".join(docs[("", name)]).strip()
    module = importlib.import_module(module_name)
    package = module_name if Path(module.__file__).name == "__init__.py" else module_name.rpartition(".")[0]
    for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            origin = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            if (origin, original) not in _seen:
                return doc_comment(origin, original, _seen | {(module_name, name)})
    return ""


def has_runnable_example(obj: object) -> bool:
    """A docstring with a ``>>>`` line that the doctest run does not skip."""
    doc = inspect.getdoc(obj) or ""
    return any(line.strip().startswith(">>>") and "doctest: +SKIP" not in line for line in doc.splitlines())


def gaps(api_dir: Path = API_DIR) -> list[str]:
    """What is missing, one line per problem (empty: the reference is complete)."""
    documented = documented_names(api_dir)
    problems = []
    public = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            full = f"{module_name}.{name}"
            public.add(full)
            pages = documented.get(full, [])
            if not pages:
                problems.append(f"{full} is in {module_name}.__all__ but no API page documents it: add it to "
                                f"docs/api/<page>.rst (an autosummary entry and an auto* directive under "
                                f".. currentmodule:: {module_name})")
            elif len(pages) > 1:
                problems.append(f"{full} is documented more than once: {pages}")
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
                if not has_runnable_example(obj):
                    problems.append(f"{full} has no runnable example: add an 'Examples:' section with '>>>' lines "
                                    f"(not all '# doctest: +SKIP') to its docstring")
            elif not doc_comment(module_name, name):
                problems.append(f"{full} (a constant) has no '#:' doc comment where it is defined")
    for full in sorted(set(documented) - public):
        problems.append(f"{full} is documented in {documented[full]} but is in no __all__ of {MODULES}")
    return problems


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package
    found = gaps()
    print("\n".join(found) or "the API reference covers every public name")
    sys.exit(1 if found else 0)
