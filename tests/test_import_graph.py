"""The package's floors: every import between packages points down (README, "Architecture").

Read from the source (``ast``), lazy imports inside functions included, so an
arrow that points up fails here before it becomes a cycle at import time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "localllm"

# Each top-level module or package of localllm and its floor; imports go only to lower floors.
FLOORS = {
    "config": 0, "gguf": 0, "images": 0, "audio": 0, "media": 1,
    "options": 1, "backends": 1, "templates": 1,
    "registry": 2,
    "runner": 3, "workers": 3,
    "server": 4, "client": 4,
    "cli": 5, "__main__": 6,
}  # fmt: skip


def _unit(module: str) -> str | None:
    """The top-level unit (``server`` for ``localllm.server.app``) of a localllm module name."""
    parts = module.split(".")
    return parts[1] if parts[0] == "localllm" and len(parts) > 1 else None


def _imports(path: Path, root: Path) -> list[tuple[str, int]]:
    """(absolute module name, line) of every import in ``path``, a module of the package at ``root``."""
    here = ["localllm", *path.relative_to(root).with_suffix("").parts]
    package = here[:-1]  # a module's package; for an __init__.py, here[-1] is "__init__"
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            if module == "localllm":  # `from localllm import server`: the names are the units
                found += [(f"localllm.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((module, node.lineno))
    return found


def upward_arrows(root: Path = PACKAGE) -> list[str]:
    arrows = []
    for path in sorted(root.rglob("*.py")):
        source = _unit("localllm." + ".".join(path.relative_to(root).with_suffix("").parts))
        for module, line in _imports(path, root):
            target = _unit(module)
            if target is None or target == source or target not in FLOORS:
                continue
            if FLOORS[target] >= FLOORS[source]:
                arrows.append(f"{path.relative_to(root.parent)}:{line}: {source} (floor {FLOORS[source]}) "
                              f"imports {module} (floor {FLOORS[target]})")
    return arrows


def test_every_unit_has_a_floor() -> None:
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert units - FLOORS.keys() == set(), "give every new top-level module or package a floor in FLOORS"


def test_no_import_points_up() -> None:
    assert upward_arrows() == []


@pytest.mark.parametrize("line", [
    "from localllm.server.app import create_app",
    "from ..server import app",
    "import localllm.server.app",
    "from localllm import server",
    "def later():\n    from ..server.app import create_app",
])  # fmt: skip
def test_an_upward_import_is_found(tmp_path: Path, line: str) -> None:
    """The check itself sees absolute, relative and lazy imports (so it can fail)."""
    root = tmp_path / "localllm"
    (root / "runner").mkdir(parents=True)
    (root / "runner" / "__init__.py").write_text("from . import engine\n", encoding="utf-8")
    (root / "runner" / "engine.py").write_text(line + "\n", encoding="utf-8")
    [arrow] = upward_arrows(root)
    assert arrow.startswith(f"localllm/runner/engine.py:{line.count(chr(10)) + 1}: runner (floor 3) imports localllm.server")


def test_no_test_module_imports_another() -> None:
    """Shared builders and fixtures live in tests/support/, so test modules stay independent."""
    tests = Path(__file__).resolve().parent
    found = [f"{path.relative_to(tests)}:{line}: {module}"
             for path in sorted(tests.rglob("test_*.py"))
             for module, line in _imports(path, tests)
             if module.rsplit(".", 1)[-1].startswith("test_")]
    assert found == []
