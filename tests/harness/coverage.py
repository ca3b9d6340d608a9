"""Every test belongs to a suite: the check behind tests/host/test_suite_coverage.py.

Two levels:

- files: every ``test_*.py``/``*_test.py`` under ``tests/`` lies under the
  ``paths`` of at least one suite;
- items: every collected test is selected by at least one suite, i.e. lies
  under its paths and satisfies its marker expression (a ``gpu`` test in
  ``tests/host`` would be in no suite's selection).

``python -m pytest --collect-only -p tests.harness.coverage`` with
``MEGAMOE_COLLECT_MARKERS=<file>`` writes ``{nodeid: [markers]}`` as JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from _pytest.mark.expression import Expression

from tests.suites import Suite

MARKERS_ENV = "MEGAMOE_COLLECT_MARKERS"


def find_test_files(root: Path) -> list[str]:
    tests = root / "tests"
    found = set(tests.rglob("test_*.py")) | set(tests.rglob("*_test.py"))
    return sorted(p.relative_to(root).as_posix() for p in found)


def _under(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def suites_with_tests(suites: Mapping[str, Suite]) -> list[Suite]:
    return [s for s in suites.values() if s.paths]


def uncovered_files(root: Path, suites: Mapping[str, Suite]) -> list[str]:
    owners = suites_with_tests(suites)
    return [f for f in find_test_files(root) if not any(_under(f, p) for s in owners for p in s.paths)]


def selects(suite: Suite, nodeid: str, markers: Iterable[str]) -> bool:
    path = nodeid.split("::", 1)[0]
    if not any(_under(path, p) for p in suite.paths):
        return False
    if not suite.markexpr:
        return True
    names = set(markers)
    return Expression.compile(suite.markexpr).evaluate(lambda name, **_: name in names)


def uncovered_items(items: Mapping[str, list[str]], suites: Mapping[str, Suite]) -> list[str]:
    owners = suites_with_tests(suites)
    return sorted(n for n, m in items.items() if not any(selects(s, n, m) for s in owners))


def pytest_collection_finish(session) -> None:  # pytest plugin hook
    out = os.environ.get(MARKERS_ENV)
    if not out:
        return
    root = Path(str(session.config.rootpath))
    data = {}
    for item in session.items:
        rel = Path(str(item.fspath)).resolve().relative_to(root.resolve()).as_posix()
        nodeid = rel + item.nodeid[item.nodeid.index("::"):] if "::" in item.nodeid else rel
        data[nodeid] = sorted({m.name for m in item.iter_markers()})
    Path(out).write_text(json.dumps(data))
