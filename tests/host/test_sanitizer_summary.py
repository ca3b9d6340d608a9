"""compute-sanitizer summary parsing (sanitizers.summary) against recorded output.

Fixtures in sanitizers/testdata/: ``h200_*`` are real runs of the self-test
kernels on the H200 (host frames stripped); the others are written in the
tool's format for cases the self-tests do not produce (leaks, warnings only,
a killed run, an internal error).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sanitizers.summary import STATUS_FAIL, STATUS_PASS, STATUS_UNKNOWN, parse_summary

DATA = Path(__file__).resolve().parents[2] / "sanitizers" / "testdata"


def parse(name: str, tool: str):
    return parse_summary((DATA / name).read_text(), tool)


@pytest.mark.parametrize(
    ("name", "tool", "errors"),
    [
        ("h200_memcheck_planted.txt", "memcheck", 52),
        ("h200_initcheck_planted.txt", "initcheck", 64),
        ("h200_synccheck_planted.txt", "synccheck", 16),
        ("memcheck_oob_write.txt", "memcheck", 17),
        ("initcheck_uninit_read.txt", "initcheck", 64),
        ("synccheck_divergent_barrier.txt", "synccheck", 2),
    ],
)
def test_error_summary_with_errors_is_a_failure_with_the_count(name, tool, errors) -> None:
    s = parse(name, tool)
    assert s.status == STATUS_FAIL
    assert s.errors == errors
    assert s.caught


@pytest.mark.parametrize(
    ("name", "tool"),
    [
        ("h200_memcheck_clean_no_api_errors.txt", "memcheck"),
        ("h200_initcheck_clean.txt", "initcheck"),
        ("h200_synccheck_clean.txt", "synccheck"),
        ("h200_racecheck_clean.txt", "racecheck"),
        ("memcheck_clean.txt", "memcheck"),
        ("racecheck_clean.txt", "racecheck"),
    ],
)
def test_zero_error_summary_is_a_pass(name, tool) -> None:
    s = parse(name, tool)
    assert s.status == STATUS_PASS
    assert s.errors == 0
    assert not s.caught


def test_memcheck_api_error_noise_counts_as_errors_when_reported() -> None:
    """Without --report-api-errors no, cuda-bindings' failed probes are 34 errors."""
    s = parse("h200_memcheck_clean.txt", "memcheck")
    assert s.status == STATUS_FAIL and s.errors == 34


def test_racecheck_summary_gives_hazards_errors_and_warnings() -> None:
    s = parse("h200_racecheck_planted.txt", "racecheck")
    assert (s.status, s.hazards, s.errors, s.warnings) == (STATUS_FAIL, 1, 1, 0)
    s = parse("racecheck_hazard.txt", "racecheck")
    assert (s.hazards, s.errors, s.warnings) == (1, 1, 0)


def test_racecheck_warnings_alone_fail() -> None:
    s = parse("racecheck_warning_only.txt", "racecheck")
    assert s.status == STATUS_FAIL
    assert (s.errors, s.warnings) == (0, 1)
    assert "1 warning" in s.reason


def test_leak_summary_reports_bytes_and_allocations_and_fails() -> None:
    s = parse("memcheck_leak.txt", "memcheck")
    assert (s.leaked_bytes, s.leaked_allocations) == (1024, 1)
    assert s.status == STATUS_FAIL
    assert "1024 byte(s) leaked" in s.reason


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "initcheck", "synccheck"])
def test_missing_summary_is_unknown_never_a_pass(tool) -> None:
    s = parse("missing_summary_killed.txt", tool)
    assert s.status == STATUS_UNKNOWN
    assert s.errors is None
    assert not s.caught


def test_racecheck_output_parsed_as_another_tool_is_unknown() -> None:
    """A RACECHECK SUMMARY does not satisfy memcheck: the wrong tool ran."""
    assert parse("h200_racecheck_clean.txt", "memcheck").status == STATUS_UNKNOWN


def test_internal_sanitizer_error_is_unknown_even_with_a_zero_summary() -> None:
    s = parse("internal_error.txt", "memcheck")
    assert s.status == STATUS_UNKNOWN
    assert "internal error" in s.reason


def test_summaries_of_several_processes_add_up() -> None:
    text = "========= ERROR SUMMARY: 0 errors\n========= ERROR SUMMARY: 3 errors\n"
    s = parse_summary(text, "memcheck")
    assert (s.status, s.errors) == (STATUS_FAIL, 3)


def test_error_summary_with_not_displayed_suffix_counts_the_total() -> None:
    s = parse_summary("========= ERROR SUMMARY: 1200 errors (200 errors not displayed)\n",
                      "memcheck")
    assert s.errors == 1200


def test_a_summary_line_inside_test_output_without_the_tool_prefix_is_ignored() -> None:
    s = parse_summary("print('ERROR SUMMARY: 0 errors')\n", "memcheck")
    assert s.status == STATUS_UNKNOWN
