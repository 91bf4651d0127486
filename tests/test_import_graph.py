"""The import graph, read from the code (ast, every import including those inside
functions): no circles, and arrows point one way.

Packages: cluster_sim -> strategies -> (ksync, predictor), never back. Inside
cluster_sim, layers from the bottom: scenarios, report and the data helpers; the
simulator and the real-cluster harness (which never import each other); the commands.
The one exception is `FACADE`: the lazy imports of ``ksync/__init__.py``'s module
``__getattr__``.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("ksync", "predictor", "strategies", "cluster_sim")

# Package -> packages it must not import.
FORBIDDEN = {"ksync": {"strategies", "cluster_sim"}, "predictor": {"strategies", "cluster_sim"},
             "strategies": {"cluster_sim"}}

# cluster_sim modules by layer: a module may import its own layer and those below.
LAYERS = [
    ("cluster_sim.scenarios", "cluster_sim.report", "cluster_sim.workloads",
     "cluster_sim.numpy_mlp", "cluster_sim.netns", "cluster_sim.cpu_profile",
     "cluster_sim.ctr", "cluster_sim.numpy_ctr"),
    ("cluster_sim.sim", "cluster_sim.harness", "cluster_sim.local_cluster",
     "cluster_sim.slowdown"),
    ("cluster_sim.cli", "cluster_sim.__main__", "cluster_sim.results"),
]
APART = [("cluster_sim.sim", "cluster_sim.harness")]  # same layer, no arrow either way

# `import ksync` is the package's public face, not only its policy layer: ksync/__init__.py
# hands out the strategy, its callbacks, checkpoints, launch helpers and LocalCluster from
# where they live, imported on first use inside its module `__getattr__` (PEP 562). Those
# lazy imports, and only those (no other module of ksync, nothing at import time), point
# back up; they are left out of the graph, and `test_the_facade_imports_only_its_names`
# holds them to this list.
FACADE = {"ksync": {"strategies.ksync_strategy", "strategies.callbacks",
                    "strategies.checkpoint", "strategies.launch", "strategies.launch_env",
                    "cluster_sim.local_cluster"}}


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def facade_nodes(name: str, tree: ast.Module) -> set[int]:
    """The ids of the nodes inside the module ``__getattr__`` of a `FACADE` module."""
    if name not in FACADE:
        return set()
    return {id(node) for top in tree.body
            if isinstance(top, ast.FunctionDef) and top.name == "__getattr__"
            for node in ast.walk(top)}


def imports_of(name: str, path: pathlib.Path, known, facade: bool = False) -> set[str]:
    """The known modules ``name`` imports (a ``from a import b`` counts as ``a.b`` when
    that is a module, else ``a``): those outside a `FACADE` module's ``__getattr__``, or
    with ``facade`` only those inside it."""
    is_package = path.name == "__init__.py"
    out = set()
    tree = ast.parse(path.read_text(), str(path))
    lazy = facade_nodes(name, tree)
    for node in ast.walk(tree):
        if (id(node) in lazy) != facade:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join(parent + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # a name inside a module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer(name: str) -> int | None:
    for i, prefixes in enumerate(LAYERS):
        if any(within(name, p) for p in prefixes):
            return i
    return None


@pytest.fixture(scope="module")
def edges():
    return graph()


def test_the_graph_is_read_from_the_code(edges):
    assert "cluster_sim.scenarios.model" in edges["cluster_sim.scenarios.reader"]
    assert "ksync" in edges["cluster_sim.sim.engine"]
    assert edges["cluster_sim.harness.signal_helper"] == set()  # stdlib only: starts at once


def test_the_facade_imports_only_its_names():
    known = modules()
    for name, allowed in FACADE.items():
        assert imports_of(name, known[name], known, facade=True) == allowed
    # Outside FACADE nothing is lazy-exempt, a __getattr__ elsewhere included.
    assert imports_of("strategies", known["strategies"], known, facade=True) == set()
    assert "strategies.ksync_strategy" in graph()["strategies"]


# Modules that must not import TensorFlow or Keras: the whole `ksync` package (its
# TensorFlow side, the PS state, lives in `strategies.ps_state` and
# `strategies.ps_lr_scaling`) and the coordinator's pure state classes.
TF_FREE = ("ksync", "strategies.gate_cache", "strategies.worker_timing")
TF_PACKAGES = {"tensorflow", "tf_keras", "keras"}


def tensorflow_imports(name: str, path: pathlib.Path) -> set[str]:
    """The TensorFlow or Keras modules ``name`` imports anywhere in its code, but for
    the lazy imports of a `FACADE` module's ``__getattr__``."""
    tree = ast.parse(path.read_text(), str(path))
    lazy = facade_nodes(name, tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in lazy:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module or "")
    return {m for m in found if m.split(".")[0] in TF_PACKAGES}


def test_the_ksync_core_imports_no_tensorflow():
    known = modules()
    pure = [m for m in known if any(within(m, p) for p in TF_FREE)]
    assert "ksync.policies.adaptive" in pure and "ksync.controller" in pure
    assert "ksync.tf_state" not in known and "ksync.tf_lr_scaling" not in known
    wrong = {m: tensorflow_imports(m, known[m]) for m in pure}
    assert {m: found for m, found in wrong.items() if found} == {}
    # The check finds TensorFlow where it is imported.
    assert tensorflow_imports("strategies.ps_state", known["strategies.ps_state"])


def test_private_tensorflow_apis_are_imported_by_the_adapter_only():
    """`strategies.compat` names every private TensorFlow module ksync uses and why; no
    other module of the four packages imports ``tensorflow.python``."""
    known = modules()
    private = {m: {t for t in tensorflow_imports(m, path) if t.startswith("tensorflow.python")}
               for m, path in known.items()}
    users = {m for m, found in private.items() if found}
    assert users == {"strategies.compat"}, users
    doc = ast.get_docstring(ast.parse(known["strategies.compat"].read_text()))
    for module in private["strategies.compat"]:
        named = module if module in doc else module.rpartition(".")[0]
        assert named in doc, f"strategies/compat.py does not say what {module} is for"


def test_import_ksync_loads_no_tensorflow():
    import subprocess
    import sys
    code = ("import ksync, ksync.controller, ksync.policies, ksync.state, sys; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_cycles_finds_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", [
    "cluster_sim", "ksync", "strategies", "predictor",
])
def test_no_import_circles(edges, package):
    assert [c for c in cycles(edges) if within(c[0], package)] == []


def test_packages_import_one_way(edges):
    wrong = [(a, b) for a, targets in edges.items() for b in targets
             if b.split(".")[0] in FORBIDDEN.get(a.split(".")[0], ())]
    assert wrong == []


def test_cluster_sim_layers_point_down(edges):
    unplaced = [m for m in edges if within(m, "cluster_sim") and m != "cluster_sim"
                and layer(m) is None]
    assert unplaced == [], "place new cluster_sim modules in a layer of LAYERS"
    upward = [(a, b) for a, targets in edges.items() if layer(a) is not None
              for b in targets if layer(b) is not None and layer(b) > layer(a)]
    assert upward == []
    across = [(a, b) for a, targets in edges.items() for b in targets
              for x, y in APART + [(y, x) for x, y in APART]
              if within(a, x) and within(b, y)]
    assert across == []


# The rooms of `bench policies` (`cluster_sim/cli/bench_*.py` and `arm_grid.py`), one job
# each (docs/architecture.md), by row: a room imports only rooms of lower rows; the
# command that wires them sits on top, and only `bench` imports it.
BENCH_ROOMS = [
    ("cluster_sim.cli.arm_grid", "cluster_sim.cli.bench_config", "cluster_sim.cli.run_store"),
    ("cluster_sim.cli.bench_matrix", "cluster_sim.cli.bench_table"),
    ("cluster_sim.cli.bench_costs", "cluster_sim.cli.bench_tuning",
     "cluster_sim.cli.bench_tables"),
    ("cluster_sim.cli.bench_policies",),
]


def test_the_bench_rooms_import_downwards_and_only_the_bench_command_wires_them(edges):
    rank = {m: i for i, row in enumerate(BENCH_ROOMS) for m in row}
    assert set(rank) <= set(edges)  # every room named exists
    rooms = {m for m in edges if m.startswith("cluster_sim.cli.bench_")}
    assert rooms | {"cluster_sim.cli.arm_grid"} <= set(rank), \
        f"a bench room without a row in BENCH_ROOMS: {sorted(rooms - set(rank))}"
    sideways_or_up = sorted((m, t) for m in rank for t in edges[m]
                            if t in rank and t != m and rank[t] >= rank[m])
    assert sideways_or_up == []
    assert "cluster_sim.cli.bench_config" in edges["cluster_sim.cli.bench_matrix"] or \
        "cluster_sim.cli.bench_config" in edges["cluster_sim.cli.bench_costs"]  # read
    assert {m for m, targets in edges.items()
            if "cluster_sim.cli.bench_policies" in targets} == {"cluster_sim.cli.bench"}
