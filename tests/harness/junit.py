"""Read pytest JUnit XML into counts and the ids of skipped and failing tests.

pytest writes module-level (collection) skips and collection errors into the
same report, so a skip at collection time is counted like a run-time skip. An
xfail is reported as skipped and counted as one: strict mode treats every
test that did not pass as not passed.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.group_names import plain_nodeid
from tests.harness.json_fields import json_fields


@dataclass(frozen=True)
class JUnitCounts:
    """Counts over one or more JUnit reports; ``skipped_ids`` holds "id (reason)"."""

    tests: int = 0
    passed: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0
    skipped_ids: tuple[str, ...] = field(default=())
    failed_ids: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        return json_fields(self, renamed={"failures": "failed"})

    def __add__(self, other: JUnitCounts) -> JUnitCounts:
        return JUnitCounts(
            self.tests + other.tests,
            self.passed + other.passed,
            self.failures + other.failures,
            self.errors + other.errors,
            self.skipped + other.skipped,
            self.skipped_ids + other.skipped_ids,
            self.failed_ids + other.failed_ids,
        )


def case_id(case: ET.Element) -> str:
    """A testcase's id, ``classname::name`` (without a compile group's suffix:
    ``tests.harness.group_names.plain_nodeid``)."""
    classname = case.get("classname", "")
    name = plain_nodeid(case.get("name", ""))
    return f"{classname}::{name}" if classname else name


def case_module(case: ET.Element) -> str:
    """The dotted module of a testcase: its classname without the test classes pytest
    appends (``Test...``)."""
    parts = case.get("classname", "").split(".")
    while len(parts) > 1 and parts[-1].startswith("Test"):
        parts.pop()
    return ".".join(parts)


def _skip_reason(el: ET.Element) -> str:
    """pytest puts a collection skip's reason in the element text, not its message."""
    message = el.get("message", "")
    text = (el.text or "").strip()
    return text if text and message in ("", "collection skipped") else message


def parse_junit(path: Path) -> JUnitCounts:
    """Counts from one JUnit XML file, taken from its testcases (not the header totals)."""
    root = ET.parse(path).getroot()
    tests = passed = failures = errors = skipped = 0
    skipped_ids: list[str] = []
    failed_ids: list[str] = []
    for case in root.iter("testcase"):
        tests += 1
        cid = case_id(case)
        if (el := case.find("error")) is not None:
            errors += 1
            failed_ids.append(f"{cid} (error: {el.get('message', '')[:200]})")
        elif (el := case.find("failure")) is not None:
            failures += 1
            failed_ids.append(f"{cid} (failed: {el.get('message', '')[:200]})")
        elif (el := case.find("skipped")) is not None:
            skipped += 1
            kind = "xfail" if el.get("type") == "pytest.xfail" else "skipped"
            skipped_ids.append(f"{cid} ({kind}: {_skip_reason(el)[:200]})")
        else:
            passed += 1
    return JUnitCounts(tests, passed, failures, errors, skipped, tuple(skipped_ids),
                       tuple(failed_ids))


def parse_many(paths: Iterable[Path]) -> JUnitCounts:
    """Sum of ``parse_junit`` over ``paths``."""
    total = JUnitCounts()
    for p in paths:
        total = total + parse_junit(p)
    return total


def collection_errors(path: Path) -> tuple[list[str], bool]:
    """The modules of one report that failed to collect (each with its error's last line),
    and whether any test itself failed or errored; no report: ``([], False)``. A collection
    error is a broken run, not a test's verdict (``tests.harness.mutants``: found on an H100,
    2026-12-05, an ``ImportError`` under ``-x`` exited 1 and read as a kill)."""
    if not path.is_file():
        return [], False
    bad, failed = [], False
    for case in ET.parse(path).getroot().iter("testcase"):
        for el in (*case.findall("failure"), *case.findall("error")):
            if (el.get("message") or "").startswith("collection failure"):
                lines = (el.text or "").strip().splitlines()
                bad.append(f"{case.get('name', '')}: {lines[-1] if lines else ''}"[:300])
            else:
                failed = True
    return bad, failed


def case_ids(path: Path) -> list[str]:
    """The ids of the testcases of one report, in report order."""
    return [case_id(case) for case in ET.parse(path).getroot().iter("testcase")]
