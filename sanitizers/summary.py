"""Parse compute-sanitizer output into a verdict.

Contract: a run passes only when the tool printed its summary and that
summary reports zero errors (and, for racecheck, zero warnings; for a leak
check, zero leaked bytes). A missing summary means the tool did not finish
(crash, kill, wrong tool, output lost): the status is ``unknown`` and
``unknown`` is a failure, never a pass.

Lines this parser reads (each prefixed with ``========= `` by the tool)::

    ERROR SUMMARY: 3 errors
    ERROR SUMMARY: 1200 errors (200 errors not displayed)
    RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
    LEAK SUMMARY: 256 bytes leaked in 1 allocations
    Internal Sanitizer Error: ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.harness.json_fields import json_fields

STATUS_PASS = "pass"
STATUS_FAIL = "fail"
STATUS_UNKNOWN = "unknown"

_PREFIX = r"^=+\s*"
_ERROR_SUMMARY = re.compile(_PREFIX + r"ERROR SUMMARY:\s*(\d+)\s+errors?\b", re.MULTILINE)
_RACECHECK_SUMMARY = re.compile(
    _PREFIX
    + r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s*"
    + r"\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)",
    re.MULTILINE,
)
_LEAK_SUMMARY = re.compile(
    _PREFIX + r"LEAK SUMMARY:\s*(\d+)\s+bytes?\s+leaked\s+in\s+(\d+)\s+allocations?",
    re.MULTILINE,
)
_INTERNAL_ERROR = re.compile(_PREFIX + r"(Internal Sanitizer Error.*)$", re.MULTILINE)


@dataclass(frozen=True)
class SanitizerSummary:
    """What one sanitized process reported.

    ``errors``/``warnings``/``leaked_bytes`` are None when the tool printed no
    such line. ``status`` is pass, fail or unknown; ``reason`` says why.
    """

    tool: str
    status: str
    errors: int | None
    warnings: int | None
    hazards: int | None
    leaked_bytes: int | None
    leaked_allocations: int | None
    reason: str

    @property
    def caught(self) -> bool:
        """True when the tool finished and reported at least one problem."""
        return self.status == STATUS_FAIL and bool(
            (self.errors or 0) + (self.warnings or 0) + (self.leaked_bytes or 0)
        )

    def as_dict(self) -> dict[str, object]:
        return json_fields(self)


def _sum(matches: list[re.Match[str]], group: int) -> int | None:
    return sum(int(m.group(group)) for m in matches) if matches else None


def parse_summary(text: str, tool: str) -> SanitizerSummary:
    """Parse the output of one ``compute-sanitizer --tool <tool>`` run.

    Several processes may print several summaries; their counts add up.
    For racecheck the ``RACECHECK SUMMARY`` line is authoritative (its
    warnings count too); an ``ERROR SUMMARY`` line is also accepted.
    """
    errors_m = list(_ERROR_SUMMARY.finditer(text))
    race_m = list(_RACECHECK_SUMMARY.finditer(text))
    leak_m = list(_LEAK_SUMMARY.finditer(text))
    internal = [m.group(1).strip() for m in _INTERNAL_ERROR.finditer(text)]

    errors = _sum(errors_m, 1)
    hazards = warnings = None
    if race_m:
        hazards = _sum(race_m, 1)
        race_errors = _sum(race_m, 2) or 0
        warnings = _sum(race_m, 3)
        errors = max(errors or 0, race_errors)
    leaked_bytes = _sum(leak_m, 1)
    leaked_allocs = _sum(leak_m, 2)

    def make(status: str, reason: str) -> SanitizerSummary:
        return SanitizerSummary(
            tool, status, errors, warnings, hazards, leaked_bytes, leaked_allocs, reason
        )

    if internal:
        return make(STATUS_UNKNOWN, f"sanitizer internal error: {internal[0]}")
    have_summary = bool(race_m) if tool == "racecheck" and not errors_m else bool(errors_m)
    if not have_summary:
        want = "RACECHECK SUMMARY or ERROR SUMMARY" if tool == "racecheck" else "ERROR SUMMARY"
        return make(STATUS_UNKNOWN, f"no {want} line in the output: the tool did not finish")
    problems = []
    if errors:
        problems.append(f"{errors} error(s)")
    if warnings:
        problems.append(f"{warnings} warning(s)")
    if leaked_bytes:
        problems.append(f"{leaked_bytes} byte(s) leaked in {leaked_allocs} allocation(s)")
    if problems:
        return make(STATUS_FAIL, ", ".join(problems))
    return make(STATUS_PASS, "0 errors")
