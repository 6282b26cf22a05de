"""The package's import structure: no import cycles between its modules (function-level imports
included), and the core never imports a scorer backend, a recipe or the Ray pool at import time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vlmrb_torchrl"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its code (``if TYPE_CHECKING:`` blocks
    left out: they never run). ``from pkg import sub`` counts as importing ``pkg.sub``; a module's
    own parent packages are not counted (Python imports them first anyway)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for n in ast.walk(block)}
        deps = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                deps.update(subs)
                if node.module in modules and len(subs) < len(node.names):
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in modules)
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles():
    graph = import_graph()
    assert "vlmrb_torchrl.scoring.ray_pool" not in graph["vlmrb_torchrl.scoring.worker"]
    assert "vlmrb_torchrl.scoring.worker" in graph["vlmrb_torchrl.scoring.ray_pool"]  # the subclass imports its base
    assert cycles(graph) == []


def test_recipes_import_no_scorer_backend_for_metrics():
    graph = import_graph()
    backends = {m for m in graph if m.startswith("vlmrb_torchrl.scorers.") and m.split(".")[-1] in
                ("openai", "generative", "contrastive", "distill", "builtin")}
    for module in ("vlmrb_torchrl.recipes.replay", "vlmrb_torchrl.recipes.run", "vlmrb_torchrl.recipes.loop",
                   "vlmrb_torchrl.recipes.checkpoint"):
        assert not graph[module] & backends, module


def test_importing_the_core_loads_no_ray_pool_recipes_or_backends():
    # (Ray itself may be loaded by torchrl.data when it is installed: that is TorchRL's import, not ours)
    code = ("import sys, vlmrb_torchrl, vlmrb_torchrl.scoring.worker, vlmrb_torchrl.scoring.backends; "
            "print(sorted(m for m in sys.modules if m.startswith(('vlmrb_torchrl.recipes', "
            "'vlmrb_torchrl.scoring.ray_pool', 'vlmrb_torchrl.scorers.openai', 'vlmrb_torchrl.scorers.generative'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
