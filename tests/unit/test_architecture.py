"""The house rules that a reviewer would otherwise have to check by hand: the layers import only
what ARCHITECTURE allows, each layer's public names are declared once, and CI runs exactly the
README's test command."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "postroom"

# layer -> the postroom modules it may import (besides its own): ARCHITECTURE's import rules.
# Surfaces may use the store's record types (values), never the store itself.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "store": {"core"},
    "llm": {"core"},
    "engine": {"core", "store", "llm"},
    "channels": {"core", "engine"},
    "api": {"core", "engine", "store.records"},
    "web": {"core", "engine", "store.records"},
    "dashboard": {"core", "engine", "store.records"},
    "mcp": {"core", "engine", "store.records"},
    # The terminal client talks to a running server over its socket: it knows the domain only.
    "tui": {"core"},
    "cli": {"core", "engine", "store.records", "config", "logs", "app", "tui", "mcp"},
    "app": {
        "core",
        "store",
        "llm",
        "engine",
        "channels",
        "api",
        "web",
        "dashboard",
        "mcp",
        "config",
        "logs",
    },
    "config": {"core"},
    "logs": set(),
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {name for name in found if name == "postroom" or name.startswith("postroom.")}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        out.append((".".join(rel.parts), path))
    return out


@pytest.mark.parametrize(("module", "path"), _modules(), ids=[m for m, _ in _modules()])
def test_layers_import_only_what_they_may(module: str, path: Path) -> None:
    layer = _layer(module)
    if layer not in ALLOWED:
        return  # the package root and __main__
    for imported in _imports(path):
        other = _layer(imported)
        if other in ("", layer):
            continue
        within = imported.removeprefix("postroom.")
        assert any(within == a or within.startswith(a + ".") for a in ALLOWED[layer]), (
            f"{module} imports {imported}"
        )


def test_core_does_no_io() -> None:
    forbidden = {
        "asyncio",
        "sqlite3",
        "aiosqlite",
        "os",
        "socket",
        "pathlib",
        "subprocess",
        "structlog",
        "logging",
        "time",
        "random",
        "uuid",
    }
    for path in (SRC / "core").rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module.split(".")[0]]
            assert not set(names) & forbidden, f"{path.name} imports {names}"


@pytest.mark.parametrize(
    "package",
    ["postroom.core", "postroom.store", "postroom.engine", "postroom.llm", "postroom.mcp"],
)
def test_public_names_are_declared_and_exist(package: str) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    assert len(exported) == len(set(exported))
    for name in exported:
        assert hasattr(module, name), f"{package}.{name} is in __all__ but missing"


def test_public_api_of_core_is_pinned() -> None:
    import postroom.core as core

    assert set(core.__all__) >= {
        "resolve",
        "RouteIndex",
        "Route",
        "Decision",
        "ChatState",
        "Engagement",
        "RoutingMessage",
        "parse_match",
        "parse_target",
        "compile_pattern",
        "sender_slug",
        "annotate_routes",
        "parse_jid",
        "validate_folder",
        "MessageType",
        "Verb",
        "Trigger",
        "PostroomError",
    }


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block is not None, "README must open with a sh block of the two set-up commands"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2
    run_command, test_command = lines
    assert "postroom init" in run_command
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    commands = [line for line in ci.splitlines() if line.strip() and not line.startswith("#")]
    assert commands[-1] == test_command
