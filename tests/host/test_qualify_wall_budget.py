"""``qualify.py --wall-budget S`` (``tests.harness.suite_run.within_budget``): the whole run
ends inside S seconds, every suite, every phase of a split suite and the work beside one cut
to what is left, so that its record and logs are written before a caller's own limit (a
device call's 600 s) kills it and nothing comes back. On the CPU, with throwaway suites whose
tests sleep."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.harness.gpu_neighbours import NeighbourReport
from tests.harness.qualify_main import TIMEOUT_EXIT, main
from tests.harness.suite_run import MIN_SUITE_TIMEOUT_S, RunContext, run_split, within_budget
from tests.host.test_gpu_neighbours import StubWatch
from tests.host.test_qualify_workers import throwaway_tree
from tests.suites import Suite

SLEEPS = '''\
import os, time, pytest
def test_quick(): pass
@pytest.mark.timing
def test_sleeps():
    time.sleep(float(os.environ.get("SLEEP_S", "0")))
'''
SLEEP_S = 60.0
"""How long the throwaway test sleeps: far past every budget below, so a run that is not
cut to its budget is caught by its wall time."""


def _ctx(tmp_path: Path, **kw) -> RunContext:  # type: ignore[no-untyped-def]
    return RunContext(tmp_path, sys.executable, tmp_path, **kw)


def test_without_a_budget_the_timeout_is_left_alone(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, timeout=560.0)
    assert within_budget(ctx) is ctx


def test_the_timeout_is_cut_to_what_is_left_of_the_budget(tmp_path: Path) -> None:
    now = time.monotonic()
    far = within_budget(_ctx(tmp_path, timeout=30.0, deadline=now + 1000.0))
    assert far.timeout == 30.0
    near = within_budget(_ctx(tmp_path, timeout=560.0, deadline=now + 100.0))
    assert near.timeout is not None and 90.0 < near.timeout <= 100.0
    unbounded = within_budget(_ctx(tmp_path, timeout=None, deadline=now + 100.0))
    assert unbounded.timeout is not None and 90.0 < unbounded.timeout <= 100.0
    spent = within_budget(_ctx(tmp_path, timeout=560.0, deadline=now - 5.0))
    assert spent.timeout == MIN_SUITE_TIMEOUT_S  # it still runs, and times out at once


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch) -> Path:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SLEEP_S", str(SLEEP_S))
    return throwaway_tree(tmp_path, monkeypatch, {"test_sleeps.py": SLEEPS})


def test_a_run_past_its_budget_ends_inside_it_and_writes_a_timeout_record(tree: Path) -> None:
    suites = {"host": Suite("host", "throwaway", paths=("t",),
                            extra_args=("-p", "no:cacheprovider"))}
    out = tree.parent / "out"
    t0 = time.monotonic()
    rc = main(["--suite", "host", "--output-dir", str(out), "--timeout", "300",
               "--wall-budget", "8"], root=tree, suites=suites, python=sys.executable,
              environment={"gpus": []})
    took = time.monotonic() - t0
    record = json.loads((out / "qualification.json").read_text())
    assert rc == TIMEOUT_EXIT and record["status"] == "timeout"
    assert took < 8.0 + 15.0, took  # the 300 s timeout alone would wait out the 60 s sleep
    assert record["arguments"]["wall_budget"] == 8.0
    suite = record["suites"][0]
    assert suite["timed_out"] and "TIMEOUT" in suite["message"]
    assert (out / "host.log").exists()  # the log is there to bring back


def test_a_split_suite_with_work_beside_it_ends_inside_the_budget(tree: Path) -> None:
    """``--sanitizers-beside``: the wait for the work beside does not count against
    ``--timeout`` but does against the budget, so the one-process phase after it gets only
    what is left."""
    suite = Suite("host", "throwaway", paths=("t",), exclusive_gpu=True,
                  extra_args=("-p", "no:cacheprovider"))
    out = tree.parent / "out"
    out.mkdir()
    ctx = RunContext(tree, sys.executable, out, timeout=300.0, workers=2,
                     neighbour_watch=lambda: StubWatch(NeighbourReport(True, 3)),
                     beside=lambda: time.sleep(6.0), deadline=time.monotonic() + 12.0)
    t0 = time.monotonic()
    run = run_split(suite, ctx).as_dict()
    took = time.monotonic() - t0
    assert run["status"] == "timeout" and run["timed_out"], run["message"]
    assert took < 12.0 + 15.0, took
    parallel, alone = run["phases"]
    assert parallel["status"] == "pass" and alone["status"] == "timeout"


def test_a_budget_that_is_not_positive_is_refused() -> None:
    with pytest.raises(SystemExit):
        main(["--suite", "host", "--output-dir", "/tmp/x", "--wall-budget", "0"])
