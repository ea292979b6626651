"""The packages of dlsched import each other in one direction only.

Why a test: cycles crept back between `policies` and `rl` twice (training code imported by a
policy, a policy's constants imported by the model's features). A cycle makes the layers
unreadable and an import's order matter. Every `import` counts, at module level or inside a
function (a lazy import hides a cycle, it does not remove it); only `if TYPE_CHECKING:` blocks are
left out, since they never run. The nodes are the subpackages (`policies`, `rl`, ...) and the
top-level modules (`cli`, `experiment`, ...).
"""

from __future__ import annotations

import ast
import graphlib
import sys
from collections import defaultdict
from pathlib import Path

import dlsched

ROOT = Path(dlsched.__file__).resolve().parent


def _node(parts: list[str]) -> str | None:
    """The package or top-level module a module path under dlsched belongs to."""
    if not parts or parts[0] == "__init__":
        return None
    return parts[0].removesuffix(".py")


def _imports(path: Path) -> list[list[str]]:
    """Module paths under dlsched (as parts) that `path` imports, TYPE_CHECKING blocks left out."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    rel = path.relative_to(ROOT)
    out: list[list[str]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel.parent.parts)[: len(rel.parent.parts) - (node.level - 1)]
                names = [".".join(["dlsched", *base, *(node.module.split(".") if node.module else [])])]
            elif node.module == "dlsched":
                names = [f"dlsched.{a.name}" for a in node.names]
            elif node.module:
                names = [node.module]
        out += [n.split(".")[1:] for n in names if n.startswith("dlsched.")]
    return out


def package_graph() -> dict[str, dict[str, set[str]]]:
    """node -> {node it imports: the files that do}."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in ROOT.rglob("*.py"):
        src = _node(list(path.relative_to(ROOT).parts))
        if src is None:
            continue
        graph[src]  # every module is a node, even one that imports nothing of dlsched
        for parts in _imports(path):
            dst = _node(parts)
            if dst is not None and dst != src:
                graph[src][dst].add(str(path.relative_to(ROOT)))
    return graph


def test_no_import_cycle_between_packages():
    graph = package_graph()
    assert {"policies", "rl", "models", "core", "live", "k8s", "cli"} <= set(graph)  # the parse found them
    try:
        tuple(graphlib.TopologicalSorter({k: set(v) for k, v in graph.items()}).static_order())
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        hops = [f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})" for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("import cycle between dlsched packages:\n  " + "\n  ".join(hops)) from None


def test_models_are_below_policies_and_training():
    """Policies import models to decide and training imports both; never the other way round."""
    graph = package_graph()
    assert "models" in graph["policies"] and "models" in graph["rl"]
    assert not {"policies", "rl"} & set(graph["models"]), dict(graph["models"])
    assert "rl" not in graph["policies"], dict(graph["policies"])["rl"]


def test_the_parse_sees_a_cycle(tmp_path, monkeypatch):
    """The check can fail: two throwaway packages that import each other, lazily, are a cycle."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.py").write_text("from dlsched.b.y import f\n")
    (tmp_path / "b" / "y.py").write_text("def f():\n    from dlsched.a import x\n")
    (tmp_path / "b" / "z.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dlsched.cli\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = package_graph()
    assert graph["a"]["b"] and graph["b"]["a"] and "cli" not in graph["b"]
