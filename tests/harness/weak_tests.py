"""Find tests that cannot fail: a static scan of the test tree.

A test counts as checking something when its body, or a function of the tree it calls
(followed through ``from ... import`` names and the same module, to any depth), holds an
``assert``, a ``raise``, a ``with pytest.raises(...)``/``pytest.warns(...)``, or a call
whose name starts with ``assert`` (``Verdict.assert_clean``, ``torch.testing.assert_close``)
or is ``fail``. A test whose only checks are constant (``assert True``, ``assert x == x``)
does not count.

This is a floor, not a proof: a test can assert and still be weak. The planted-bug tests and
``tests/mutants/`` measure strength; this scan keeps out the test that asserts nothing.
``python -m tests.harness.weak_tests`` lists what it finds (exit 1 when anything is found).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKING_CALLS = ("fail", "raises", "warns")
"""Calls that check by themselves (``pytest.fail``, ``pytest.raises``, ``pytest.warns``)."""


@dataclass(frozen=True)
class Module:
    name: str
    tree: ast.Module


def _is_test_module(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("test")


def _call_name(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return ""


def _constant_assert(node: ast.Assert) -> bool:
    """``assert <constant>`` or ``assert a == a`` (the same expression on both sides)."""
    test = node.test
    if isinstance(test, ast.Constant):
        return True
    if isinstance(test, ast.Compare) and len(test.comparators) == 1 and isinstance(
            test.ops[0], ast.Eq | ast.Is | ast.GtE | ast.LtE):
        return ast.dump(test.left) == ast.dump(test.comparators[0])
    return False


class Scanner:
    """The functions of ``modules`` and whether each one checks something."""

    def __init__(self, modules: Iterable[Module]) -> None:
        self.functions: dict[str, tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.imports: dict[str, dict[str, str]] = {}
        self.tests: list[str] = []
        self._memo: dict[str, bool] = {}
        for mod in modules:
            names: dict[str, str] = {}
            for node in ast.walk(mod.tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    for alias in node.names:
                        names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            self.imports[mod.name] = names
            for node in mod.tree.body:
                self._add(mod.name, node, prefix="")
                if isinstance(node, ast.ClassDef):
                    for inner in node.body:
                        self._add(mod.name, inner, prefix=f"{node.name}.")

    def _add(self, module: str, node: ast.stmt, prefix: str) -> None:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return
        key = f"{module}.{prefix}{node.name}"
        self.functions[key] = (module, node)
        if prefix:  # a method is also found by its bare name (self.helper())
            self.functions.setdefault(f"{module}.{node.name}", (module, node))
        if _is_test_module(module) and node.name.startswith("test"):
            self.tests.append(key)

    def _resolve(self, module: str, call: ast.Call) -> str | None:
        f = call.func
        if isinstance(f, ast.Name):
            key = self.imports[module].get(f.id, f"{module}.{f.id}")
            return key if key in self.functions else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in (
                "self", "cls"):
            key = f"{module}.{f.attr}"
            return key if key in self.functions else None
        return None

    def checks(self, key: str) -> bool:
        """Whether the function ``key`` checks something (module docstring)."""
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # a recursive helper does not check through itself
        module, node = self.functions[key]
        found = any(self._checking_node(module, n) for n in ast.walk(node))
        self._memo[key] = found
        return found

    def _checking_node(self, module: str, n: ast.AST) -> bool:
        if isinstance(n, ast.Assert):
            return not _constant_assert(n)
        if isinstance(n, ast.Raise):
            return True
        if not isinstance(n, ast.Call):
            return False
        name = _call_name(n)
        if name.startswith("assert") or name in CHECKING_CALLS:
            return True
        callee = self._resolve(module, n)
        return callee is not None and self.checks(callee)

    def weak(self) -> list[str]:
        """The tests that check nothing."""
        return sorted(t for t in self.tests if not self.checks(t))


def tree_modules(root: Path = ROOT) -> list[Module]:
    """Every Python module under ``root/tests`` but the mutant catalog."""
    out = []
    for path in sorted((root / "tests").rglob("*.py")):
        rel = path.relative_to(root)
        if "mutants" in rel.parts[:2] or "__pycache__" in rel.parts:
            continue
        out.append(Module(".".join(rel.with_suffix("").parts), ast.parse(path.read_text())))
    return out


def main() -> int:
    scanner = Scanner(tree_modules())
    weak = scanner.weak()
    print(f"{len(scanner.tests)} tests scanned; {len(weak)} check nothing")
    for key in weak:
        print(f"  {key}")
    return 1 if weak else 0


if __name__ == "__main__":
    sys.exit(main())
