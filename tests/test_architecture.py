"""The layers stay layered: the round loop imports nothing above it, and apps use estimators' public API only."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "skfedriem"
ABOVE_THE_LOOP = ("skfedriem.flower", "skfedriem.baselines", "skfedriem.classification", "skfedriem.decomposition",
                  "skfedriem.experiments", "skfedriem.audit")
ESTIMATOR_NAMES = {"est", "estimator", "clf", "pca", "self_estimator"}


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = f"{base}.{node.module}" if node.level and node.module else (node.module or base)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("path", sorted((PACKAGE / "federated").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_federation_layer_imports_nothing_above_it(path):
    bad = sorted(m for m in imported_modules(path) if m.startswith(ABOVE_THE_LOOP))
    assert not bad, f"{path.name} imports {bad}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "_utils").glob("*.py")), ids=lambda p: p.name)
def test_the_plumbing_imports_nothing_of_the_package_but_itself(path):
    """``skfedriem._utils`` is the ground floor: every other module may use it, it uses none of them."""
    bad = sorted(m for m in imported_modules(path) if m.startswith("skfedriem") and not m.startswith("skfedriem._utils"))
    assert not bad, f"{path.name} imports {bad}"


def test_the_check_sees_a_violation(tmp_path):
    """The import check above would catch an upward import (it is not vacuous)."""
    probe = PACKAGE / "federated" / "pricing.py"
    assert "skfedriem.privacy.accounting.accounting_methods" in imported_modules(probe)
    assert any(m.startswith("skfedriem.flower") for m in imported_modules(PACKAGE / "flower" / "simulation.py"))


@pytest.mark.parametrize("path", sorted((PACKAGE / "flower").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_apps_call_no_private_method_of_an_estimator(path):
    """Deployment code builds, trains and fits estimators through their public federation API."""
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr.startswith("_") and not node.func.attr.startswith("__")
                and isinstance(node.func.value, ast.Name) and node.func.value.id in ESTIMATOR_NAMES):
            calls.append(f"{node.func.value.id}.{node.func.attr}")
    assert not calls, f"{path.name} calls {calls}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "federated").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_federation_layer_loads_nothing_by_name(path):
    """Backends register themselves (skfedriem/__init__.py wires Flower's in): no import the checks above miss."""
    assert "importlib" not in path.read_text() and "__import__" not in path.read_text()


def module_file(name: str) -> Path | None:
    """The package file a module name is defined in (None outside the package, or for a name inside a module)."""
    parts = name.split(".")
    if parts[0] != "skfedriem":
        return None
    path = PACKAGE.parent.joinpath(*parts)
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def import_graph() -> dict[Path, set[Path]]:
    """File -> the package files it imports, at module level or inside functions (packages' faces left out:
    an ``__init__`` re-exports its modules, and importing a name through it is not a dependency on the face)."""
    files = [p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    return {p: {f for m in imported_modules(p) if (f := module_file(m)) is not None and f != p} for p in files}


def circles(graph: dict) -> list[list]:
    """Every strongly connected group of more than one node (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other():
    """No circle, even through a function-local import (experiments/eeg and report, flower/apps and site_client
    were circles)."""
    found = circles(import_graph())
    assert not found, [[str(p.relative_to(PACKAGE)) for p in group] for group in found]


def test_the_circle_check_finds_a_circle():
    a, b, c = Path("a"), Path("b"), Path("c")
    assert circles({a: {b}, b: {c}, c: {a}}) == [[a, b, c]] and circles({a: {b}, b: {c}}) == []
    eeg, report = PACKAGE / "experiments" / "eeg.py", PACKAGE / "experiments" / "report.py"
    assert report in import_graph()[eeg]  # the graph sees the study's use of its report
