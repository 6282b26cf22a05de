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


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its code (``if TYPE_CHECKING:`` blocks left out, as
    they never run, unless ``type_checking``). ``from pkg import sub`` counts as importing ``pkg.sub``; a module's
    own parent packages are not counted (Python imports them first anyway)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = set() if type_checking else {
            id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
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
    # nor through a type annotation (recipes.checkpoint typed its run with recipes.run, which imports it)
    assert cycles(import_graph(type_checking=True)) == []


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


# ------------------------------------------------------------------------------------------ layers
#: The layers of docs/design.md, bottom to top: a module imports only from its own layer or a lower one. A module
#: is in the first layer one of whose patterns it matches (``x.*``: the package x and everything under it).
LAYERS = (
    ("leaves", ("vlmrb_torchrl", "vlmrb_torchrl._frames", "vlmrb_torchrl._keys", "vlmrb_torchrl._lazy", "vlmrb_torchrl._signature",
                "vlmrb_torchrl.envs.family",
                "vlmrb_torchrl.scorers._hashing")),
    ("scorer protocol", ("vlmrb_torchrl.scorers", "vlmrb_torchrl.scorers.base", "vlmrb_torchrl.scorers.prompts",
                         "vlmrb_torchrl.scorers.oracle", "vlmrb_torchrl.scorers.wrappers", "vlmrb_torchrl.scorers._frames",
                         "vlmrb_torchrl.scorers._hf", "vlmrb_torchrl.scorers.baselines")),
    ("core", ("vlmrb_torchrl.scoring.*", "vlmrb_torchrl.replay.*", "vlmrb_torchrl.modules", "vlmrb_torchrl.configs")),
    ("scorer training", ("vlmrb_torchrl.scorer_training.*",)),
    ("env families", ("vlmrb_torchrl.envs.*",)),
    ("scorer backends", ("vlmrb_torchrl.scorers.*", "vlmrb_torchrl.testing")),
    ("recipes", ("vlmrb_torchrl.recipes.*",)),
    ("cli", ("vlmrb_torchrl.cli",)),
)


def layer_of(module: str) -> int:
    for rank, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if module == pattern.removesuffix(".*") or (pattern.endswith(".*") and module.startswith(pattern[:-1])):
                return rank
    raise AssertionError(f"{module} is in no layer of LAYERS: add it (and to docs/design.md's layers)")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import of a module from a layer above the importer's."""
    return sorted(f"{a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]})"
                  for a, deps in graph.items() for b in deps if layer_of(b) > layer_of(a))


def test_the_layer_check_finds_a_planted_upward_import():
    graph = {"vlmrb_torchrl.scoring.clips": {"vlmrb_torchrl.recipes.config"}, "vlmrb_torchrl.recipes.config": set()}
    assert upward_imports(graph) == ["vlmrb_torchrl.scoring.clips (core) -> vlmrb_torchrl.recipes.config (recipes)"]


def test_no_module_imports_from_a_layer_above_its_own():
    graph = import_graph()
    assert {layer_of(m) for m in graph}  # every module has a layer
    assert upward_imports(graph) == []


def test_families_are_reached_through_the_registry_only():
    """Outside ``envs/<family>/`` nothing imports a family's folder (only ``envs.family``'s registry, which names
    them by import path), except the scorer backends' built-in models and their prompt sets."""
    graph = import_graph()
    family_modules = {m for m in graph if m.startswith("vlmrb_torchrl.envs.") and m.count(".") >= 3
                      or m in {f"vlmrb_torchrl.envs.{n}" for n in ("minigrid", "atari", "robosuite", "ogbench")}}
    allowed = {"vlmrb_torchrl.scorers.builtin"}  # the shipped models' prompt sets live with their families
    outside = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps & family_modules
                     if not a.startswith("vlmrb_torchrl.envs.") and a not in allowed)
    assert outside == []


def test_no_env_id_prefix_tests_outside_the_families():
    """The recipes, the scorers, the CLI, the scorer training and the scorer-quality benchmark ask the family
    registry which family an env id is of; no ``startswith("ALE/")`` (or a family's prefix in a constant) is
    left there."""
    prefixes = ("MiniGrid-", "BabyAI-", "ALE/", "robosuite/", "ogbench/")
    roots = [PACKAGE / "recipes", PACKAGE / "scorers", PACKAGE / "scorer_training", PACKAGE / "cli.py",
             PACKAGE.parent / "benchmarks" / "scorer_quality.py"]
    found = []
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("startswith", "removeprefix"):
                    literals = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                    if any(lit in prefixes for lit in literals):
                        found.append(f"{path.name}:{node.lineno}")
                elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in prefixes:
                    found.append(f"{path.name}:{node.lineno}")
    assert found == []
