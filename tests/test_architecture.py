"""The layout's rules, read from the source with `ast` (every import, lazy ones inside functions too):

- imports go down only: cli -> methods -> runtime -> formats -> schedule -> describe -> solvers;
- a method never imports another method; ``solvers`` imports nothing of ``layersched``;
- there is no import circle between modules;
- torch is imported only by ``runtime/`` and ``methods/``, OR-Tools only by ``solvers/cpsat*.py``.

See docs/design.md.
"""

from __future__ import annotations

import ast

import networkx as nx
import pytest

from tests.paths import ROOT

LAYERS = ["solvers", "describe", "schedule", "formats", "runtime", "methods", "cli"]
# modules at the top of the package: the package itself, and `python -m layersched.run`'s entry point
ENTRY_POINTS = {"layersched", "layersched.run"}


def module_name(path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, ast.Module]:
    files = [*ROOT.glob("layersched/**/*.py"), *ROOT.glob("solvers/**/*.py")]
    return {module_name(f): ast.parse(f.read_text(), str(f)) for f in files}


MODULES = all_modules()


def imports_of(name: str, tree: ast.Module) -> set[str]:
    """The modules ``name`` imports (for ``from a import b``: ``a.b`` where that is a module, else ``a``)."""
    out = set()
    package = name if any(m.startswith(name + ".") for m in MODULES) else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per extra dot
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return out


IMPORTS = {name: imports_of(name, tree) for name, tree in MODULES.items()}


def layer(name: str) -> tuple[int, str] | None:
    """The layer of a module of ours and its package within it (a method's own package for methods)."""
    parts = name.split(".")
    if parts[0] == "solvers":
        return 0, "solvers"
    if name in ENTRY_POINTS:
        return None
    if parts[0] == "layersched" and len(parts) > 1 and parts[1] in LAYERS:
        unit = ".".join(parts[:3]) if parts[1] == "methods" and len(parts) > 2 else ".".join(parts[:2])
        return LAYERS.index(parts[1]), unit
    raise AssertionError(f"{name} sits outside the layout ({', '.join(LAYERS)}): move it into one of them")


def ours(target: str) -> str | None:
    """The module of ours that ``target`` names (itself or its closest enclosing package), if any."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def test_every_module_sits_in_a_layer():
    for name in MODULES:
        layer(name)


def test_imports_go_down_only():
    wrong = []
    for name, targets in IMPORTS.items():
        here = layer(name)
        if here is None:
            continue
        for target in filter(None, map(ours, targets)):
            there = layer(target)
            if there is None:
                wrong.append(f"{name} imports the entry point {target}")
            elif there[0] > here[0]:
                wrong.append(f"{name} ({LAYERS[here[0]]}) imports {target} ({LAYERS[there[0]]}), a higher layer")
            elif there[0] == here[0] and LAYERS[here[0]] == "methods" and there[1] != here[1]:
                wrong.append(f"{name} imports another method's {target}")
    assert not wrong, "\n".join(wrong)


def test_solvers_import_nothing_of_layersched():
    bad = {n: sorted(t for t in ts if t.split(".")[0] == "layersched") for n, ts in IMPORTS.items()}
    assert not {n: t for n, t in bad.items() if t and n.startswith("solvers")}


def test_no_import_circle():
    g = nx.DiGraph()
    for name, targets in IMPORTS.items():
        for target in filter(None, map(ours, targets)):
            # a package's __init__ is imported with any of its modules: not an edge of its own
            if target != name and not name.startswith(target + "."):
                g.add_edge(name, target)
    circles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert not circles, circles


@pytest.mark.parametrize(
    "library, allowed",
    [("torch", ("layersched.runtime", "layersched.methods")), ("ortools", ("solvers.cpsat",))],
)
def test_heavy_libraries_stay_where_they_belong(library, allowed):
    users = sorted(n for n, ts in IMPORTS.items() if any(t.split(".")[0] == library for t in ts))
    assert users, f"nothing imports {library}: the test reads the imports wrongly"
    assert [n for n in users if not n.startswith(allowed)] == []


def test_the_rules_catch_a_violation():
    """The checks above read real imports: an upward import and a circle planted here are found."""
    planted = {
        "layersched.schedule.solve": ast.parse("from layersched.cli.main import main"),
        "layersched.describe.config": ast.parse("import layersched.describe.stages"),
        "layersched.describe.stages": ast.parse("from layersched.describe import config"),
    }
    up = imports_of("layersched.schedule.solve", planted["layersched.schedule.solve"])
    assert "layersched.cli.main" in up and layer("layersched.cli.main")[0] > layer("layersched.schedule.solve")[0]
    g = nx.DiGraph(
        (n, ours(t))
        for n in ("layersched.describe.config", "layersched.describe.stages")
        for t in imports_of(n, planted[n])
    )
    assert any(len(c) > 1 for c in nx.strongly_connected_components(g))


def test_readme_and_design_links_stay_inside_the_repository():
    """Every link of the README, docs/design.md and docs/measurements.md names a file or folder of the
    repository (a clone has nothing beside it), and the README links both documents."""
    import re

    readme = (ROOT / "README.md").read_text()
    assert "(docs/design.md)" in readme
    assert "(docs/measurements.md)" in readme
    for doc in (ROOT / "README.md", ROOT / "docs" / "design.md", ROOT / "docs" / "measurements.md"):
        targets = re.findall(r"\]\(([^)#\s]+)\)", doc.read_text())
        assert targets or doc.name == "design.md"
        for t in targets:
            if re.match(r"[a-z]+://", t):
                continue
            path = (doc.parent / t).resolve()
            assert path.is_relative_to(ROOT) and path.exists(), f"{doc.name} links {t}, which is not in the repository"


def test_every_layer_and_method_is_described_in_the_design_document():
    design = (ROOT / "docs" / "design.md").read_text()
    for package in [p.parent for p in ROOT.glob("layersched/*/__init__.py")]:
        assert f"layersched/{package.name}/" in design, f"docs/design.md does not mention layersched/{package.name}/"
    for method in [p.parent.name for p in ROOT.glob("layersched/methods/*/__init__.py")]:
        assert f"{method}/" in design, f"docs/design.md does not name the method {method}"


def test_every_module_that_needs_torch_is_skipped_by_doctests_without_it():
    """conftest.TORCH_MODULES keeps doctest collection from importing torch on a machine without it
    (a fresh clone runs the tests before torch is installed): every module that imports torch at its
    top, itself or through another of ours, must match one of its patterns. That includes the tests'
    helper modules (not ``test_*.py``), which doctest collection imports too."""
    import fnmatch

    from conftest import TORCH_MODULES

    def top_level(tree: ast.Module) -> set[str]:
        out = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                out.add(node.module or "")
                out.update(f"{node.module}.{a.name}" for a in node.names)
        return out

    helpers = [f for f in ROOT.glob("tests/**/*.py") if not f.name.startswith("test_") and f.name != "conftest.py"]
    modules = MODULES | {module_name(f): ast.parse(f.read_text(), str(f)) for f in helpers}
    direct = {name: top_level(tree) for name, tree in modules.items()}
    needs = {n for n, ts in direct.items() if any(t.split(".")[0] == "torch" for t in ts)}
    grew = True
    while grew:
        more = {n for n, ts in direct.items() if n not in needs and ts & needs}
        needs |= more
        grew = bool(more)
    files = [n.replace(".", "/") + ".py" for n in needs]
    files = [f if (ROOT / f).exists() else f.removesuffix(".py") + "/__init__.py" for f in files]
    assert "layersched/runtime/runner.py" in files  # the rule sees real imports
    assert "tests/layersched/runtime/rank_functions.py" in files  # through layersched.runtime.runner
    assert [f for f in files if not any(fnmatch.fnmatch(f, pattern) for pattern in TORCH_MODULES)] == []
