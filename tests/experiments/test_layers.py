"""The package's layers, read from its imports: arrows point down only, and nothing loops.

Every ``import`` in every module counts, lazy ones inside functions included; only the
imports under ``if TYPE_CHECKING:`` (never executed) are left out.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ripple_flwr"

# What each layer may import of the package (besides itself). Read it bottom-up.
BELOW_RUNS = {"settings", "io", "data", "wst", "router", "aggregation", "privacy", "training"}
ALLOWED: dict[str, set[str]] = {
    "settings": set(),
    "io": set(),
    "data": {"settings", "io"},
    "wst": set(),
    "aggregation": set(),
    "training": {"settings", "io"},  # io: the safe torch.load (ripple_flwr.io.torch_files)
    "privacy": {"data"},
    "router": {"settings", "io", "data", "wst", "training"},
    "runs": BELOW_RUNS,
    # A method is a folder (ripple_flwr/methods/<name>/): the registry, the entries and their
    # options are light ("methods"); the clients' side ("method_client": a training rule, a
    # summary) sits on training and the embedding (wst, router: Ripple's class-conditional
    # summary leads with the paper's embedding); the server side ("method_server") on the app.
    # Nothing but the registry's discovery reaches a folder's server or client module, and
    # that by convention at run time, not by import.
    "methods": {"settings"},
    "method_client": {
        "settings",
        "io",
        "data",
        "wst",
        "router",
        "training",
        "aggregation",
        "privacy",
        "methods",
    },
    "method_server": BELOW_RUNS | {"runs", "app", "methods", "method_client"},
    "app": BELOW_RUNS | {"runs", "methods"},
    "cli": BELOW_RUNS | {"runs", "app", "methods"},
    "experiments": BELOW_RUNS | {"runs", "app", "methods"},
    "testing": BELOW_RUNS | {"runs", "app", "methods", "experiments"},
}
# Inside the app: the client side and the server side are joined only by the protocol (and
# the run config both parse); neither imports the other, and the protocol imports neither.
APP = "ripple_flwr.app"
APP_FORBIDDEN = {
    f"{APP}.client": (f"{APP}.server",),
    f"{APP}.server": (f"{APP}.client",),
    f"{APP}.protocol": (f"{APP}.client", f"{APP}.server", f"{APP}.run_config"),
}
# Layers that must not know Flower (flwr-datasets, a data library, is not Flower).
NO_FLOWER = {
    "methods",
    "method_client",
    "settings",
    "io",
    "data",
    "wst",
    "aggregation",
    "training",
    "privacy",
    "router",
    "runs",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2:
        return "package"
    if parts[1] == "methods" and len(parts) > 3:  # ripple_flwr.methods.<folder>.<module>
        return {"spec": "methods", "client": "method_client"}.get(parts[3], "method_server")
    return parts[1]


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for sub in ast.walk(child):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


def imported(module: str) -> set[str]:
    """Every top-level name or package module ``module`` imports (TYPE_CHECKING aside)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def package_imports(module: str) -> set[str]:
    """The package's modules that ``module`` imports (a name resolved to its longest module)."""
    found = set()
    for name in imported(module):
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module and name != "ripple_flwr":
            found.add(name)
    return found


GRAPH = {m: package_imports(m) for m in MODULES}


def test_every_layer_is_known():
    assert {layer(m) for m in MODULES} - {"package"} == set(ALLOWED)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m) in ALLOWED))
def test_imports_point_down(module):
    own = layer(module)
    upward = sorted(t for t in GRAPH[module] if layer(t) not in ALLOWED[own] | {own})
    assert not upward, f"{module} ({own}) imports {upward}: above its layer"
    if own in NO_FLOWER:
        flower = sorted(n for n in imported(module) if n == "flwr" or n.startswith("flwr."))
        assert not flower, f"{module} ({own}) imports Flower: {flower}"


@pytest.mark.parametrize("side", sorted(APP_FORBIDDEN))
def test_the_app_sides_meet_only_in_the_protocol(side):
    """No client module imports the server side, no server module the client side."""
    modules = [m for m in MODULES if m == side or m.startswith(side + ".")]
    assert modules, f"no module under {side}"
    crossing = {
        m: sorted(t for t in GRAPH[m] if t.startswith(APP_FORBIDDEN[side])) for m in modules
    }
    crossing = {m: t for m, t in crossing.items() if t}
    assert not crossing, f"{side} imports what it must not: {crossing}"


def test_the_package_never_imports_the_paper_folder():
    """``paper/`` (tables, map, page generators) is not installed: no package module imports it.

    ``paper/`` may import any layer; ``ripple-tables`` and ``ripple-map``
    (``experiments.paper_entry``) load it by name from the checkout in the current directory.
    """
    found = {
        m: sorted(n for n in imported(m) if n == "paper" or n.startswith("paper.")) for m in MODULES
    }
    found = {m: names for m, names in found.items() if names}
    assert not found, f"the package imports paper/, which the wheel does not hold: {found}"


# The server by owner: the engine (engine.py) and its collaborators, one folder each, under
# the bases a method builds on (bases/); nothing of the engine's names a method.
SERVER = "ripple_flwr.app.server"
COLLABORATORS = ("rounds", "roster", "replies", "resume", "evaluation")
BASES = ("engine", "bases.flower", "bases.global_model", "bases.clustered")


def test_the_collaborators_sit_under_the_bases_and_the_engine_names_no_method():
    concerns = [m for m in MODULES if m.split(".")[3:4] and m.split(".")[3] in COLLABORATORS]
    assert {m.split(".")[3] for m in concerns} == set(COLLABORATORS)
    bases = {f"{SERVER}.{b}" for b in BASES}
    assert bases <= set(MODULES)
    upward = {m: sorted(GRAPH[m] & bases) for m in concerns if GRAPH[m] & bases}
    assert not upward, f"the engine's collaborators import the bases above them: {upward}"
    named = {
        m: sorted(t for t in GRAPH[m] if layer(t) in ("method_server", "method_client"))
        for m in [*concerns, *bases]
    }
    named = {m: t for m, t in named.items() if t}
    assert not named, f"the engine imports a method's module: {named}"


def test_no_module_lies_more_than_four_folders_deep_and_no_strategies_folder():
    package = PACKAGE
    deep = [
        str(p.relative_to(package.parent))
        for p in package.rglob("*.py")
        if len(p.relative_to(package.parent).parts) - 1 > 4
    ]
    assert not deep, f"modules more than four folders deep: {deep}"
    assert not [p for p in package.rglob("strategies") if p.is_dir()]


def test_the_client_process_imports_no_strategy():
    """Importing ``client_app`` (what every deployed message starts) loads no server module,
    and no method folder's server side."""
    code = (
        "import sys, client_app;"
        "bad = sorted(m for m in sys.modules if m.startswith('ripple_flwr.app.server')"
        " or (m.startswith('ripple_flwr.methods.') and m.count('.') == 3"
        " and m.rpartition('.')[2] not in ('spec', 'client')));"
        "print(bad); sys.exit(bool(bad))"
    )
    root = PACKAGE.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stdout + out.stderr


def test_only_the_environment_module_names_the_environment_variables():
    """Every RIPPLE_* variable (and HF_HUB_OFFLINE) is read in settings/environment.py alone."""
    reader = "ripple_flwr.settings.environment"
    found = {}
    for module, path in MODULES.items():
        if module == reader:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith("RIPPLE_") or node.value == "HF_HUB_OFFLINE":
                    found.setdefault(module, []).append(node.value)
    assert not found, f"environment variables named outside {reader}: {found}"


def test_the_environment_reads_empty_as_unset_and_expands_paths():
    from ripple_flwr.settings import Environment

    env = Environment.read(
        {"RIPPLE_CACHE_DIR": "  ", "RIPPLE_OUTPUT_DIR": "~/out", "HF_HUB_OFFLINE": "Yes"}
    )
    assert env.cache_dir is None and env.cache_root == Path.home() / ".cache" / "ripple-flwr"
    assert env.output_folder == Path.home() / "out" and env.hf_offline
    assert Environment.read({}) == Environment()


def test_no_import_cycle():
    """Depth-first search over the module graph; a back edge is a cycle, named in full."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                cycle = stack[stack.index(t) :] + [t]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_the_checker_sees_an_upward_import_and_a_cycle(tmp_path, monkeypatch):
    """The rules above can fail: a lazy upward import and a two-module loop are caught."""
    graph = {"ripple_flwr.wst.a": {"ripple_flwr.app.b"}, "ripple_flwr.app.b": {"ripple_flwr.wst.a"}}
    up = [t for t in graph["ripple_flwr.wst.a"] if layer(t) not in ALLOWED["wst"] | {"wst"}]
    assert up == ["ripple_flwr.app.b"]
    lazy = tmp_path / "m.py"
    lazy.write_text("def f():\n    from ripple_flwr.app import server\n")
    monkeypatch.setitem(MODULES, "ripple_flwr.wst.m", lazy)
    assert "ripple_flwr.app.server" in imported("ripple_flwr.wst.m")


def test_settings_import_nothing_heavy():
    """Parsing settings loads neither torch, kymatio, Flower nor the registry."""
    code = (
        "import sys, ripple_flwr.settings as s; s.RunSettings();"
        "heavy = [m for m in ('torch', 'kymatio', 'flwr', 'ripple_flwr.methods.registry')"
        " if m in sys.modules]; print(heavy); sys.exit(bool(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_servers_folders_import_each_other_without_a_cycle():
    """By owner means one direction: no two of the server's folders import each other, even
    through a third (a cycle of folders is a tangle a newcomer cannot read in order)."""
    import graphlib

    def folder(module: str) -> str:
        path = MODULES[module]
        return str(path.parent.relative_to(PACKAGE.parent))

    server = [m for m in MODULES if m.startswith(SERVER + ".")]
    deps: dict[str, set[str]] = {}
    for m in server:
        mine = folder(m)
        deps.setdefault(mine, set()).update(
            folder(t) for t in GRAPH[m] if t.startswith(SERVER + ".") and folder(t) != mine
        )
    graphlib.TopologicalSorter(deps).prepare()  # raises CycleError naming the folders
