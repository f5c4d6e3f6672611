"""The layers stay layers: the import contracts in pyproject.toml hold, and no module imports itself back."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan), each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.find_modules_directly_imported_by(module)):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_import_contracts_hold():
    """`lint-imports` (import-linter) checks the contracts of pyproject.toml: the layers and drivers alone."""
    lint_imports = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_no_module_imports_itself_back():
    """No import cycle between modules, counting imports made only for type checking (a cycle hidden
    behind TYPE_CHECKING is still two modules that need each other)."""
    graph = grimp.build_graph("orchestrator", "drivers", exclude_type_checking_imports=False)
    assert _cycles(graph) == []


#: the command-line modules that may reach the store or the runtime themselves: the daemon (`run`), the
#: simulator (`simulate`) and the calibration campaign (`calibrate`); every other command goes through a
#: backend (`orchestrator.service.backend`: the server's client or the local store)
MOST_CLI_MODULES_BELOW_THE_SERVICE = 4


def test_commands_reach_the_store_and_the_runtime_through_the_service():
    graph = grimp.build_graph("orchestrator", "drivers", exclude_type_checking_imports=False)
    below = ("orchestrator.state", "orchestrator.runtime")
    commands = graph.find_children("orchestrator.cli")
    assert "orchestrator.cli.leases" in commands
    reaching = sorted(module for module in commands
                      if any(target == layer or target.startswith(layer + ".")
                             for target in graph.find_modules_directly_imported_by(module) for layer in below))
    assert len(reaching) <= MOST_CLI_MODULES_BELOW_THE_SERVICE, reaching
