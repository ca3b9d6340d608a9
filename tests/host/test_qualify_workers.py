"""``qualify.py --workers N`` (``tests.harness.suite_run.run_split``): an exclusive-GPU suite
runs its tests marked neither ``timing`` nor ``alone`` in N pytest-xdist workers, then those
in one process, and passes only when both phases pass; the record holds both commands, both
JUnit reports and their summed counts. On the CPU, with a throwaway suite whose tests write down the xdist worker
they ran in."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.harness.gpu_neighbours import NeighbourReport
from tests.harness.qualify_main import main
from tests.harness.suite_run import (
    THREAD_VARIABLES,
    RunContext,
    run_split,
    worker_env,
    worker_threads,
)
from tests.host.test_gpu_neighbours import StubWatch
from tests.suites import Suite

CONFTEST = '''\
def pytest_configure(config):
    config.addinivalue_line("markers", "timing: reads GPU timings")
    config.addinivalue_line("markers", "alone: a heavy child process under a deadline")
'''
FAST = '''\
import os, pathlib
def _note(name):
    where = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (pathlib.Path(os.environ["WHERE_DIR"]) / name).write_text(where)
def test_a(): _note("a")
def test_b(): _note("b")
def test_c():
    _note("c")
    assert os.environ.get("FAIL_FAST") != "1"
'''
TIMED = '''\
import os, pathlib, pytest
pytestmark = pytest.mark.timing
def test_timed():
    where = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (pathlib.Path(os.environ["WHERE_DIR"]) / "timed").write_text(where)
    assert os.environ.get("FAIL_TIMED") != "1"
'''
ALONE = '''\
import os, pathlib, pytest
@pytest.mark.alone
def test_alone():
    where = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (pathlib.Path(os.environ["WHERE_DIR"]) / "alone").write_text(where)
'''


def throwaway_tree(tmp_path: Path, monkeypatch, files: dict[str, str]) -> Path:  # type: ignore[no-untyped-def]
    """A suite root with ``t/conftest.py`` (the ``timing`` and ``alone`` markers) and
    ``files`` (name -> text) under ``t/``."""
    root = tmp_path / "tree"
    (root / "t").mkdir(parents=True)
    for name, text in {"conftest.py": CONFTEST, **files}.items():
        (root / "t" / name).write_text(text)
    # this test may itself run in an xdist worker: its children must not inherit the mark
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    return root


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch) -> Path:
    root = throwaway_tree(tmp_path, monkeypatch, {"test_fast.py": FAST,
                                                  "test_timed.py": TIMED,
                                                  "test_alone.py": ALONE})
    where = tmp_path / "where"
    where.mkdir()
    monkeypatch.setenv("WHERE_DIR", str(where))
    return root


def _qualify(tree: Path, *extra: str) -> tuple[int, dict]:
    suites = {"host": Suite("host", "throwaway", paths=("t",), exclusive_gpu=True,
                            extra_args=("-p", "no:cacheprovider"))}
    out = tree.parent / "out"
    rc = main(["--suite", "host", "--output-dir", str(out), *extra], root=tree, suites=suites,
              python=sys.executable, environment={"gpus": []},
              neighbour_watch=lambda: StubWatch(NeighbourReport(True, 3)))
    return rc, json.loads((out / "qualification.json").read_text())


def _where(tree: Path) -> dict[str, str]:
    d = tree.parent / "where"
    return {p.name: p.read_text() for p in d.iterdir()}


def test_workers_run_the_other_tests_in_xdist_and_the_timing_tests_alone_after(tree) -> None:
    rc, rec = _qualify(tree, "--workers", "2")
    suite = rec["suites"][0]
    assert rc == 0 and suite["status"] == "pass", suite["message"]
    assert rec["arguments"]["workers"] == 2
    assert suite["counts"]["tests"] == 5 and suite["counts"]["passed"] == 5
    where = _where(tree)
    # the timing and alone tests ran in a process of their own, without workers
    assert where["timed"] == "main" and where["alone"] == "main"
    assert {where[t] for t in "abc"} <= {"gw0", "gw1"}  # the others ran in xdist workers
    parallel, alone = suite["commands"]
    assert parallel[parallel.index("-n") + 1] == "2"
    assert "not (timing or alone)" in " ".join(parallel)
    assert "-n" not in alone and "(timing or alone)" in " ".join(alone)
    assert len(suite["junit"]) == 2 and [p["phase"] for p in suite["phases"]] == [
        "host.parallel", "host.alone"]
    assert suite["gpu_neighbours"]["available"] is True  # one watch over both phases


def test_a_failing_timing_phase_fails_the_suite(tree, monkeypatch) -> None:
    monkeypatch.setenv("FAIL_TIMED", "1")
    rc, rec = _qualify(tree, "--workers", "2")
    suite = rec["suites"][0]
    assert rc == 1 and suite["status"] == "fail"
    assert suite["counts"]["passed"] == 4 and suite["counts"]["failed"] == 1
    assert "test_timed" in suite["message"]


def test_a_failing_parallel_phase_fails_the_suite_even_when_the_timing_phase_passes(tree, monkeypatch) -> None:
    monkeypatch.setenv("FAIL_FAST", "1")
    rc, rec = _qualify(tree, "--workers", "2")
    suite = rec["suites"][0]
    assert rc == 1 and suite["status"] == "fail"
    assert [p["status"] for p in suite["phases"]] == ["fail", "pass"]
    assert suite["counts"]["passed"] == 4 and suite["counts"]["failed"] == 1
    assert "test_c" in suite["message"]


def test_a_filter_that_selects_no_timing_test_leaves_that_phase_out(tree) -> None:
    rc, rec = _qualify(tree, "--workers", "2", "--filter", "test_b or test_c")
    suite = rec["suites"][0]
    assert rc == 0 and suite["status"] == "pass", suite["message"]
    assert suite["counts"]["passed"] == 2
    assert [p["status"] for p in suite["phases"]] == ["pass", "empty"]
    assert "FAIL" not in suite["message"]  # the empty phase is not reported as a failure


def test_a_filter_that_selects_nothing_fails_strictly(tree) -> None:
    rc, rec = _qualify(tree, "--workers", "2", "--filter", "no_such_test")
    assert rc == 1 and rec["suites"][0]["status"] == "fail"


def test_without_workers_the_suite_is_one_process_as_before(tree) -> None:
    rc, rec = _qualify(tree)
    suite = rec["suites"][0]
    assert rc == 0 and len(suite["commands"]) == 1 and "-n" not in suite["commands"][0]
    assert set(_where(tree).values()) == {"main"}
    assert suite["counts"]["passed"] == 5


def test_workers_below_one_are_refused() -> None:
    with pytest.raises(SystemExit):
        main(["--suite", "host", "--output-dir", "/tmp/x", "--workers", "0"])


def test_work_beside_the_xdist_phase_starts_with_it_and_the_timing_phase_waits_for_it(
        tree, tmp_path) -> None:
    """``RunContext.beside`` (``--sanitizers-beside``): started with the xdist phase, waited
    for before the one-process phase, whose GPU neighbour watch starts only then."""
    marks: dict[str, float] = {}

    def beside() -> None:
        marks["start"] = time.time()
        time.sleep(2.0)
        marks["end"] = time.time()

    watches: list[float] = []

    def watch() -> StubWatch:
        watches.append(time.time())
        return StubWatch(NeighbourReport(True, 3))

    suite = Suite("host", "throwaway", paths=("t",), exclusive_gpu=True,
                  extra_args=("-p", "no:cacheprovider"))
    out = tmp_path / "out"
    out.mkdir()
    ctx = RunContext(tree, sys.executable, out, timeout=300.0, neighbour_watch=watch, workers=2,
                     beside=beside)
    run = run_split(suite, ctx).as_dict()
    assert run["status"] == "pass" and run["counts"]["passed"] == 5, run["message"]
    assert run["sanitizers_beside"] is True and "beside the sanitizer tools" in run["message"]
    ran = {p.name: p.stat().st_mtime for p in (tmp_path / "where").iterdir()}
    assert marks["start"] <= min(ran[t] for t in "abc")  # it started with the xdist phase
    assert ran["timed"] >= marks["end"] and ran["alone"] >= marks["end"]  # they waited for it
    assert len(watches) == 1 and watches[0] >= max(ran[t] for t in "abc")  # watch: last phase
    assert run["gpu_neighbours"]["available"] is True


THREADS = '''\
import os, pathlib, pytest
def _note(name):
    (pathlib.Path(os.environ["WHERE_DIR"]) / name).write_text(os.environ.get("OMP_NUM_THREADS", "unset"))
def test_worker_a(): _note("worker_a")
def test_worker_b(): _note("worker_b")
@pytest.mark.timing
def test_timed(): _note("timed")
'''


@pytest.mark.parametrize("workers, cpus, want", [(12, 16, 1), (2, 16, 8), (4, 2, 1), (1, 3, 3)])
def test_each_worker_gets_its_share_of_the_cores(workers, cpus, want) -> None:
    assert worker_threads(workers, cpus) == want


def test_the_xdist_workers_share_the_cores_and_the_one_process_phase_keeps_them_all(
        tmp_path, monkeypatch) -> None:
    """Twelve workers of torch's default pool each (a thread per core) oversubscribe the
    machine: the xdist phase's processes see ``OMP_NUM_THREADS`` at their share, the
    timing phase (alone on the machine) sees the caller's environment, and the record says
    what the workers had."""
    for v in THREAD_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    root = throwaway_tree(tmp_path, monkeypatch, {"test_threads.py": THREADS})
    (tmp_path / "where").mkdir()
    monkeypatch.setenv("WHERE_DIR", str(tmp_path / "where"))
    rc, rec = _qualify(root, "--workers", "2")
    suite = rec["suites"][0]
    assert rc == 0 and suite["status"] == "pass", suite["message"]
    share = str(worker_threads(2))
    seen = _where(root)
    assert seen["worker_a"] == seen["worker_b"] == share
    assert seen["timed"] == "unset"
    assert suite["worker_cpu_threads"] == share


def test_a_thread_count_the_caller_sets_stands(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert worker_env({"X": "1"}, 12, 16) == {"X": "1"}
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert worker_env({"OMP_NUM_THREADS": "5"}, 12, 16) == {"OMP_NUM_THREADS": "5"}
    assert worker_env(None, 12, 16) == dict.fromkeys(THREAD_VARIABLES, "1")
