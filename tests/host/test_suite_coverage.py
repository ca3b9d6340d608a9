"""No test can be silently left out of qualification: every test belongs to a suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.coverage import MARKERS_ENV, uncovered_files, uncovered_items
from tests.suites import SUITES, Suite

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_file_under_tests_belongs_to_a_suite() -> None:
    orphans = uncovered_files(ROOT, SUITES)
    assert not orphans, f"test files in no suite of tests/suites.py: {orphans}"


@pytest.mark.slow  # collects the whole tree (~30 s on the CI machine); runs in the host suite
def test_every_collected_test_is_selected_by_some_suite(tmp_path: Path) -> None:
    out = tmp_path / "markers.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "tests.harness.coverage", "tests"],
        cwd=ROOT, env={**os.environ, MARKERS_ENV: str(out)}, capture_output=True, text=True,
        check=False,
    )
    assert proc.returncode == 0, f"collection failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
    items = json.loads(out.read_text())
    assert items, "nothing collected"
    orphans = uncovered_items(items, SUITES)
    assert not orphans, f"tests no suite selects (check their markers): {orphans}"


def test_an_orphan_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "tests" / "host").mkdir(parents=True)
    (tmp_path / "tests" / "host" / "test_a.py").write_text("")
    (tmp_path / "tests" / "stray").mkdir()
    (tmp_path / "tests" / "stray" / "test_forgotten.py").write_text("")
    suites = {"host": Suite("host", "", paths=("tests/host",))}
    assert uncovered_files(tmp_path, suites) == ["tests/stray/test_forgotten.py"]


def test_a_test_whose_markers_no_suite_selects_is_reported() -> None:
    items = {
        "tests/host/test_a.py::test_cpu": [],
        "tests/host/test_a.py::test_marked_gpu_in_host": ["gpu"],
        "tests/single/test_b.py::test_kernel": ["gpu"],
        "tests/single/test_sanitizer_selftests.py::test_selftest_target[memcheck-clean]":
            ["gpu", "sanitizer", "parametrize"],
    }
    assert uncovered_items(items, SUITES) == ["tests/host/test_a.py::test_marked_gpu_in_host"]
