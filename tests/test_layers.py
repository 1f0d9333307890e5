"""The import graph of rkvoice/ (function-local imports too): no module and no package reaches
itself, the machine probes (rkvoice.board) sit below the stages, and no stage imports the CLI."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path, module: str, modules: set[str]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        out |= {n for n in names if n in modules}
    return out


def _graph() -> dict[str, set[str]]:
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "rkvoice").rglob("*.py")}
    return {m: _imports(p, m, set(files)) - {m} for m, p in files.items()}


def _package(module: str) -> str:
    """rkvoice.hear.kws -> rkvoice.hear; a top-level module (rkvoice.needs) is its own package."""
    return ".".join(module.split(".")[:2])


def _packages() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, deps in _graph().items():
        out.setdefault(_package(module), set()).update(_package(d) for d in deps)
    return {p: deps - {p} for p, deps in out.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A path that comes back to its start, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    return next((c for m in sorted(graph) if m not in state and (c := visit(m))), None)


def test_cycle_finder_finds_a_loop_and_passes_a_tree() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_rkvoice_has_no_import_cycle() -> None:
    cycle = _cycle(_graph())
    if cycle:
        pytest.fail("import cycle: " + " -> ".join(cycle))


def test_no_import_cycle_between_packages() -> None:
    """board <-> answer (check, rkllm) and needs <-> audio/board were loops a module graph does not see."""
    cycle = _cycle(_packages())
    if cycle:
        pytest.fail("import cycle between packages: " + " -> ".join(cycle))


def test_the_probes_sit_below_the_stages() -> None:
    """rkvoice.board (runtime versions, espeak preload, devices) reads nothing but config and errors."""
    assert _packages()["rkvoice.board"] <= {"rkvoice.config", "rkvoice.errors"}


def test_no_stage_package_imports_the_cli() -> None:
    for module, deps in _graph().items():
        if module.split(".")[:2] != ["rkvoice", "cli"]:
            assert not {d for d in deps if d.split(".")[:2] == ["rkvoice", "cli"]}, module
