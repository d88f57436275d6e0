"""The house: one installed namespace, layers that import downwards only, no import cycle.

The import graph is read from the source with :mod:`ast` (function-level imports included), so a
lazy import that closes a cycle fails here just as a module-level one would."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("models", "hardware", "planner", "cli")
BIN = Path(sys.executable).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["plan_search", *parts])


def _product_modules() -> dict[str, Path]:
    mods = {"plan_search": ROOT / "__init__.py"}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            mods[_module_name(f)] = f
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> product modules it imports anywhere in its text (lazy imports included)."""
    mods = _product_modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        package = mod if is_pkg else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
            for t in targets:
                # the deepest product module named by the import
                while t and t not in mods:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t and t != mod:
                    graph[mod].add(t)
    # the root package's lazy exports are names, not imports: its __getattr__ table is data
    graph["plan_search"] = set()
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _ignoring_packages(graph):
    # a package's __init__ that only documents itself adds no edge; keep edges between modules
    return graph


def test_no_import_cycle_in_the_product():
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cost_model_imports_nothing_above_it():
    graph = import_graph()
    allowed = ("plan_search.planner.costmodel", "plan_search.models", "plan_search.hardware")
    bad = {m: sorted(t for t in deps if not t.startswith(allowed))
           for m, deps in graph.items() if m.startswith("plan_search.planner.costmodel")}
    bad = {m: d for m, d in bad.items() if d}
    assert not bad, f"the cost model imports from above it: {bad}"


def test_layers_point_downwards():
    """models/hardware never import the planner or cli; frameworks never import the search;
    nothing but cli imports cli."""
    graph = import_graph()
    for mod, deps in graph.items():
        if mod.startswith(("plan_search.models", "plan_search.hardware")):
            assert not any(d.startswith(("plan_search.planner", "plan_search.cli")) for d in deps), (mod, deps)
        if mod.startswith("plan_search.planner.frameworks"):
            assert not any(d.startswith("plan_search.planner.search") for d in deps), (mod, deps)
        if not mod.startswith("plan_search.cli"):
            assert not any(d.startswith("plan_search.cli") for d in deps), (mod, deps)


def test_the_cycle_check_can_fail():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(g) == [["a", "b", "c"]]


def test_nothing_generic_is_installed_at_the_top_level(tmp_path):
    """From a directory holding its own models/, hardware/, planner/ and cli/ packages (as most
    ML code bases do), the product imports and runs: its names live under plan_search only."""
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("raise ImportError('the user project, not ours')\n")
        (tmp_path / pkg / "io.py").write_text("raise ImportError('the user project, not ours')\n")
    code = textwrap.dedent("""
        import models, plan_search
        r = plan_search.search(model="llama3.1-8b", gpu="h100-sxm", gpus=[8, 16], tokens="100B")
        e = plan_search.estimate("llama3.1-8b", "h100-sxm", num_gpus=8, tp=1, pp=1, global_batch=128)
        print(plan_search.__version__, len(r.front), round(e.step_time_s, 3))
    """)
    code = code.replace("import models, plan_search", "import sys; sys.path.insert(0, '.')\nimport plan_search")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    version, n_front, step = p.stdout.split()
    assert version.count(".") == 2 and int(n_front) >= 1 and float(step) > 0
    # and the console scripts, run from that directory
    q = subprocess.run([str(BIN / "plan-estimate"), "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8",
                        "--global-batch", "128"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert q.returncode in (0, 3), q.stderr[-2000:]  # 3: printed, but does not fit
    assert "step time" in q.stdout


@pytest.mark.parametrize("command", ["plan-search", "plan-estimate", "plan-sweep", "plan-allocate", "plan-catalog",
                                     "plan-calibrate"])
def test_every_command_has_version(command):
    import plan_search

    p = subprocess.run([str(BIN / command), "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert plan_search.__version__ in p.stdout and command in p.stdout
