"""Where a suite's time goes (``tests.harness.time_profile``): the record's profile is read
from the JUnit reports' per-test times, summed per module, longest first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.time_profile import format_profile, main, time_profile
from tests.host.test_qualify_workers import _qualify, throwaway_tree

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.single.test_layer" name="test_every_row[bf16]" time="170.5"/>
<testcase classname="tests.single.test_layer" name="test_every_row[mxfp8]" time="20.25"/>
<testcase classname="tests.single.test_staging.TestTails" name="test_tail[3]" time="1.0"/>
<testcase classname="tests.single.test_staging" name="test_offsets" time="2.0"/>
<testcase classname="tests.single.test_combine" name="test_no_time"/>
<testcase classname="tests.single.test_combine" name="test_bad_time" time="n/a"/>
</testsuite></testsuites>
"""


@pytest.fixture()
def report(tmp_path: Path) -> Path:
    path = tmp_path / "single.junit.xml"
    path.write_text(REPORT)
    return path


def test_the_profile_sums_every_test_and_ranks_modules_and_tests_longest_first(report) -> None:
    p = time_profile([report])
    assert p.tests == 6 and p.tests_s == pytest.approx(193.75)
    assert p.slowest[0] == ("tests.single.test_layer::test_every_row[bf16]", 170.5)
    assert [t for t, _ in p.slowest[:4]] == [
        "tests.single.test_layer::test_every_row[bf16]",
        "tests.single.test_layer::test_every_row[mxfp8]",
        "tests.single.test_staging::test_offsets",
        "tests.single.test_staging.TestTails::test_tail[3]"]
    # a test class belongs to its module; a test without a readable time counts 0 s
    assert p.modules == (("tests.single.test_layer", 190.75, 2),
                         ("tests.single.test_staging", 3.0, 2),
                         ("tests.single.test_combine", 0.0, 2))


def test_the_lists_are_cut_and_reports_that_were_not_written_are_left_out(report, tmp_path) -> None:
    p = time_profile([report, tmp_path / "timed-out-phase.junit.xml"], slowest=1, modules=1)
    assert p.tests == 6 and len(p.slowest) == 1 and len(p.modules) == 1
    assert p.as_dict()["slowest"] == [{"test": "tests.single.test_layer::test_every_row[bf16]",
                                       "s": 170.5}]


def test_the_table_shows_the_overlap_of_workers(report, capsys) -> None:
    text = format_profile(time_profile([report]), wall_s=96.875)
    assert text.splitlines()[0] == "6 tests, 193.8 s of test time in 96.9 s of wall time (2.0x)"
    assert main([str(report), "--slowest", "2"]) == 0
    out = capsys.readouterr().out
    assert "170.5  tests.single.test_layer::test_every_row[bf16]" in out
    assert "test_offsets" not in out.split("slowest tests")[1]
    with pytest.raises(SystemExit) as exc:
        main([str(report.parent / "missing.xml")])
    assert exc.value.code == 2


SLOW = '''\
import time
def test_slow(): time.sleep(0.4)
def test_quick(): pass
'''


def test_a_qualification_record_carries_the_profile_and_each_phase_s_wall_time(
        tmp_path, monkeypatch) -> None:
    tree = throwaway_tree(tmp_path, monkeypatch, {"test_slow.py": SLOW})
    rc, rec = _qualify(tree, "--workers", "2")
    suite = rec["suites"][0]
    assert rc == 0, suite["message"]
    profile = suite["time_profile"]
    assert profile["tests"] == 2 and profile["slowest"][0]["test"].endswith("::test_slow")
    assert profile["slowest"][0]["s"] >= 0.4 and profile["modules"][0]["tests"] == 2
    parallel, alone = suite["phases"]
    assert parallel["duration_s"] >= 0.4 and alone["status"] == "empty"
    assert parallel["duration_s"] + alone["duration_s"] <= suite["duration_s"] + 0.01
    json.dumps(rec)  # the record stays plain JSON


def test_a_plain_suite_record_carries_the_profile_too(tmp_path, monkeypatch) -> None:
    tree = throwaway_tree(tmp_path, monkeypatch, {"test_slow.py": SLOW})
    rc, rec = _qualify(tree)
    assert rc == 0 and rec["suites"][0]["time_profile"]["tests"] == 2
