"""The package's shape (ARCHITECTURE.md's rooms): no import cycle, inside a room or across, and every
import points down the layers (or inside its own layer; the cycle test covers those). Read from the source with ast, function-level imports included;
imports under `if TYPE_CHECKING:` are type hints, not arrows, and are left out. No module over ~600 lines.

The layers, top (imports nothing of ada_ray) to bottom (imports what it needs). ARCHITECTURE.md's
table lists storage/evaluate after the driver, but by what they may import (config, data, engines)
they sit under the actors that use them; sync sits under engines (the vLLM worker extension loads
weights through the bus's receiver).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "ada_ray"

LAYERS = [
    {"ada_ray", "errors", "levels", "knob_defaults"},
    {"config_schema", "config_checks", "config"},
    {"algo"},
    {"data", "rewards"},
    {"sync"},
    {"engines"},
    {"storage", "evaluate"},
    {"learner"},
    {"actors"},
    {"driver"},
    {"cli", "bench", "prepare_data", "config_doc", "__main__"},
]
RANK = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
MAX_LINES = 620


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ada_ray"


def runtime_imports(tree: ast.AST) -> set[str]:
    """ada_ray modules imported anywhere in the tree except under `if TYPE_CHECKING:`."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ada_ray"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("ada_ray"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def graph() -> dict[str, set[str]]:
    sources = {module_name(p): p for p in PKG.rglob("*.py")}
    return {m: {d for d in runtime_imports(ast.parse(p.read_text())) if d in sources and d != m}
            for m, p in sources.items()}


def test_every_room_has_a_layer():
    assert {room(m) for m in graph()} <= set(RANK)


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}
    cycles = []

    def dfs(u: str, stack: list[str]) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(g[u]):
            if state.get(v) == 1:
                cycles.append(stack[stack.index(v):] + [v])
            elif v not in state:
                dfs(v, stack)
        stack.pop()
        state[u] = 2

    for m in sorted(g):
        if m not in state:
            dfs(m, [])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_imports_point_down_the_layers():
    up = sorted(f"{m} -> {d}" for m, deps in graph().items() for d in deps
                if RANK[room(d)] > RANK[room(m)])
    assert not up, "imports against the layering: " + "; ".join(up)


def test_no_module_over_600_lines():
    long = {module_name(p): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over ~600 lines: {long}"
