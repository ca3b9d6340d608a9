"""The suite table and run_tests.sh behave as the foundation issue specifies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.suites import SUITES, main

ROOT = Path(__file__).resolve().parents[2]


def test_unknown_suite_prints_the_list_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-suite"]) == 2
    err = capsys.readouterr().err
    assert "unknown suite 'no-such-suite'" in err
    for name in SUITES:
        assert name in err


def test_run_tests_sh_unknown_suite_exits_2() -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "run_tests.sh"), "no-such-suite"],
        capture_output=True, text=True, env={"MEGAMOE_PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2
    assert "suites:" in proc.stderr


def test_ci_suite_covers_host_and_property_tiers_on_cpu() -> None:
    ci = SUITES["ci"]
    assert set(ci.paths) == {"tests/host", "tests/property"}
    assert "not gpu" in ci.markexpr


def test_an_empty_selection_is_a_failure() -> None:
    """pytest exits 5 when nothing runs; the runner passes that on (non-zero)."""
    rc = main(["host", "-k", "this_selects_nothing_at_all", "-p", "no:cacheprovider", "-n", "0"])
    assert rc == 5


def test_markers_are_strict() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "--strict-markers" in pyproject
    for marker in ("gpu:", "multirank:", "sanitizer:", "slow:"):
        assert marker in pyproject
