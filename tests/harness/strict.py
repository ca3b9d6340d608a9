"""Strict verdicts: a suite passes only when tests ran, all passed, none skipped.

Contract (issue 4): any skipped test (at collection or run time, xfail
included) or zero passed tests fails the suite, with a line that says how
many passed and which were skipped. A timeout is its own status.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.harness.junit import JUnitCounts

STATUS_PASS = "pass"
STATUS_FAIL = "fail"
STATUS_TIMEOUT = "timeout"
STATUS_PREFLIGHT = "preflight-failed"
_MAX_LISTED = 20


@dataclass(frozen=True)
class Verdict:
    status: str
    message: str


def _listing(ids: tuple[str, ...]) -> str:
    shown = "; ".join(ids[:_MAX_LISTED])
    more = len(ids) - _MAX_LISTED
    return shown + (f"; ... and {more} more" if more > 0 else "")


def strict_verdict(
    label: str,
    returncode: int,
    timed_out: bool,
    counts: JUnitCounts | None,
    timeout_s: float | None = None,
) -> Verdict:
    """The verdict for one pytest run (``counts`` None: no JUnit report was written)."""
    if timed_out:
        done = f"{counts.passed} passed before the kill" if counts else "no report"
        return Verdict(
            STATUS_TIMEOUT,
            f"{label}: TIMEOUT after {timeout_s} s (process group killed; {done})",
        )
    if counts is None:
        return Verdict(STATUS_FAIL, f"{label}: FAIL: no JUnit report written (exit {returncode})")
    head = (
        f"{label}: {counts.passed} passed, {counts.failures} failed, {counts.errors} errors, "
        f"{counts.skipped} skipped"
    )
    problems = []
    if counts.failed_ids:
        problems.append("failing: " + _listing(counts.failed_ids))
    if counts.skipped:
        problems.append("strict: skips are failures; skipped: " + _listing(counts.skipped_ids))
    if counts.passed == 0:
        problems.append("strict: zero tests passed (the selection ran nothing)")
    if not problems and returncode != 0:
        problems.append(f"pytest exited {returncode} although every reported test passed")
    if problems:
        return Verdict(STATUS_FAIL, f"{head}: FAIL: " + " | ".join(problems))
    return Verdict(STATUS_PASS, f"{head}: pass")
