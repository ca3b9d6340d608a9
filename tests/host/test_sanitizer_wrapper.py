"""sanitizers.wrapper on the CPU, with a stand-in compute-sanitizer over throwaway test trees.

The stand-in runs its target like the real tool, prints the tool's banner and
summary lines (an error for every node id containing "planted"), exits with
``--error-exitcode`` on errors, and logs its argv and environment so the
tests can check the flags the wrapper passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sanitizers.slots import SLOTS_DIR_ENV, SLOTS_ENV, sanitizer_slot, slots
from sanitizers.wrapper import (
    EXPECT_CAUGHT,
    EXPECT_CLEAN,
    LAUNCH_TIMEOUT_S,
    SANITIZER_ERROR_EXITCODE,
    collect_node_ids,
    expand_cases,
    run_case,
    run_tool,
    sanitizer_command,
    write_junit,
)
from tests.harness.junit import parse_junit
from tests.host.scratch_tree import write_executable, write_tree
from tests.suites import SanitizerCoverage

FAKE_TOOL = r"""#!/bin/bash
# Stand-in for compute-sanitizer: logs its call, fakes the target's outcome from the node id.
declare -A opt
while [[ "$1" == --* ]]; do opt[$1]=$2; shift 2; done
node="$4"
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${opt[--tool]}" "${opt[--error-exitcode]}" \
  "${opt[--target-processes]}" "${opt[--launch-timeout]}" "${opt[--report-api-errors]}" \
  "$PYTORCH_NO_CUDA_MEMORY_CACHING" "$MEGAMOE_SANITIZER_TOOL" "${OMP_NUM_THREADS:-unset}" \
  "$*" >>"$FAKE_SANITIZER_CALLS"
[[ -n "$FAKE_SANITIZER_SPANS" ]] && echo "start $node $(date +%s.%N)" >>"$FAKE_SANITIZER_SPANS"
sleep "${FAKE_SANITIZER_SLEEP:-0}"
echo "========= COMPUTE-SANITIZER"
rc=0; errors=0
case "$node" in
  *::test_planted) errors=3 ;;
  *::test_clean) sleep "${FAKE_SANITIZER_CLEAN_SLEEP:-0}"; echo "1 passed" ;;
  *::test_fails) echo "1 failed"; rc=1 ;;
  *::test_hangs) sleep 120 ;;
  *) echo "1 passed" ;;
esac
for ((i = 0; i < errors; i++)); do echo "========= Invalid __global__ write of size 4 bytes"; done
[[ -n "$FAKE_SANITIZER_SPANS" ]] && echo "end $node $(date +%s.%N)" >>"$FAKE_SANITIZER_SPANS"
[[ "$FAKE_SANITIZER_MODE" == no-summary ]] && exit $rc
echo "========= ERROR SUMMARY: $errors errors"
((errors)) && exit "${opt[--error-exitcode]}"
exit $rc
"""

TESTS = '''\
import time
def test_planted(): pass
def test_clean(): pass
def test_clean_too(): pass
def test_fails(): assert False, "planted test failure"
def test_hangs(): time.sleep(120)
'''


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = write_tree(tmp_path / "tree", {
        "t/test_cases.py": TESTS,
        "t/test_marked.py": "import pytest\n@pytest.mark.sanitizer\ndef test_designated(): pass\n"
                            "def test_unmarked(): pass\n",
        "t/test_targets.py": "import pytest\n@pytest.mark.sanitizer\n"
                             "def test_planted_target(): pass\n"})
    write_executable(tmp_path / "compute-sanitizer", FAKE_TOOL)
    monkeypatch.setenv("FAKE_SANITIZER_CALLS", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv(SLOTS_DIR_ENV, str(tmp_path / "slots"))  # this test's own slots
    return root


_CALL_FIELDS = ("tool", "exitcode", "targets", "launch_timeout", "api_errors", "no_caching", "tool_env", "threads",
                "argv")


def calls(tree: Path) -> list[dict]:
    path = tree.parent / "calls.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [dict(zip(_CALL_FIELDS, line.split("\t"), strict=True)) for line in lines]


def exe(tree: Path) -> str:
    return str(tree.parent / "compute-sanitizer")


def coverage(planted: str = "t/test_cases.py::test_planted",
             cases: tuple[str, ...] = ("t/test_cases.py::test_clean",),
             report: str = "Invalid __global__ write") -> SanitizerCoverage:
    return SanitizerCoverage("memcheck", planted, report, cases)


def tool_run(tree: Path, cov: SanitizerCoverage, **kw):
    return run_tool(cov, exe=exe(tree), python=sys.executable, root=tree,
                    out_dir=tree.parent / "out", **kw)


def test_planted_case_caught_and_clean_case_clean_pass_the_tool_run(tree: Path) -> None:
    run = tool_run(tree, coverage())
    assert run.status == "pass", run.message
    planted, clean = run.results
    assert (planted.expect, planted.ok, planted.summary.errors) == (EXPECT_CAUGHT, True, 3)
    assert planted.returncode == SANITIZER_ERROR_EXITCODE
    assert (clean.expect, clean.ok, clean.summary.errors) == (EXPECT_CLEAN, True, 0)


def test_wrapper_passes_the_required_flags_and_environment(tree: Path) -> None:
    tool_run(tree, coverage())
    (first, _) = calls(tree)
    assert first["tool"] == "memcheck"
    assert first["exitcode"] == str(SANITIZER_ERROR_EXITCODE)
    assert first["targets"] == "application-only"
    assert first["launch_timeout"] == str(LAUNCH_TIMEOUT_S) and LAUNCH_TIMEOUT_S >= 60
    assert first["api_errors"] == "no"
    assert first["no_caching"] == "1"
    assert first["tool_env"] == "memcheck"
    assert first["argv"].split()[:4] == [sys.executable, "-m", "pytest",
                                         "t/test_cases.py::test_planted"]


def test_extra_environment_reaches_every_case_process(tree: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``run_tool(env=...)``: every case's process gets it (qualify.py's thread share for
    sanitizer tools that run together, ``RunContext.cpu_sharers``); without it, this
    process's environment as before."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    tool_run(tree, coverage(), env={"OMP_NUM_THREADS": "4"})
    assert [c["threads"] for c in calls(tree)] == ["4", "4"]
    (tree.parent / "calls.jsonl").unlink()
    tool_run(tree, coverage())
    assert [c["threads"] for c in calls(tree)] == ["unset", "unset"]


def test_each_test_runs_in_its_own_process(tree: Path) -> None:
    cov = coverage(cases=("t/test_cases.py::test_clean", "t/test_cases.py::test_clean_too"))
    run = tool_run(tree, cov)
    assert run.status == "pass", run.message
    targets = [c["argv"].split()[3] for c in calls(tree)]
    assert targets == ["t/test_cases.py::test_planted", "t/test_cases.py::test_clean",
                       "t/test_cases.py::test_clean_too"]


def most_at_once(spans: Path) -> int:
    """The largest number of fake tool processes alive together, from their start and end
    lines."""
    events = sorted((float(t), +1 if what == "start" else -1)
                    for what, _, t in (line.split() for line in spans.read_text().splitlines()))
    alive = peak = 0
    for _, step in events:
        alive += step
        peak = max(peak, alive)
    return peak


FOUR = ("t/test_cases.py::test_clean", "t/test_cases.py::test_clean_too",
        "t/test_marked.py::test_designated", "t/test_marked.py::test_unmarked")


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_cases_run_at_most_workers_at_once(tree: Path, monkeypatch, workers: int) -> None:  # type: ignore[no-untyped-def]
    """``run_tool(workers=K)`` (qualify.py ``--sanitize-workers``): K case processes at a
    time, never more, and with K = 1 one after the other as before."""
    spans = tree.parent / "spans.txt"
    monkeypatch.setenv("FAKE_SANITIZER_SPANS", str(spans))
    monkeypatch.setenv("FAKE_SANITIZER_SLEEP", "1")
    run = tool_run(tree, coverage(cases=FOUR), workers=workers)
    assert run.status == "pass", run.message
    assert len(run.results) == 5
    assert most_at_once(spans) == workers


def test_results_come_back_in_plan_order_whatever_order_the_cases_end_in(tree, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The slow first clean case ends last, yet the record lists the cases as planned; the
    progress callback sees them as they end, counting up."""
    monkeypatch.setenv("FAKE_SANITIZER_CLEAN_SLEEP", "2")
    seen: list[tuple[str, int, int]] = []
    run = tool_run(tree, coverage(cases=FOUR), workers=5,
                   on_case=lambda r, done, total: seen.append((r.case, done, total)))
    assert run.status == "pass", run.message
    assert [r.case for r in run.results] == ["t/test_cases.py::test_planted", *FOUR]
    assert seen[-1][0] == "t/test_cases.py::test_clean"
    assert sorted(case for case, *_ in seen) == sorted(r.case for r in run.results)
    assert [(done, total) for _, done, total in seen] == [(i, 5) for i in range(1, 6)]


def test_a_case_at_the_deadline_with_others_beside_it_ends_the_tool_run_as_a_timeout(tree) -> None:  # type: ignore[no-untyped-def]
    """Several at once keep the deadline: the hanging case is cut there, the run is a
    timeout naming it, and nothing waits for the hang's own 120 s."""
    t0 = time.monotonic()
    run = tool_run(tree, coverage(cases=("t/test_cases.py::test_hangs", *FOUR)), workers=2,
                   deadline=time.monotonic() + 4)
    assert time.monotonic() - t0 < 60
    assert run.status == "timeout"
    assert run.message == "memcheck: suite timeout in t/test_cases.py::test_hangs"
    hung = next(r for r in run.results if r.case.endswith("test_hangs"))
    assert hung.timed_out and not hung.ok


def test_qualifys_sanitize_run_takes_its_case_workers_and_records_them(tree, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``run_sanitize`` under ``RunContext.sanitize_workers`` (qualify.py
    ``--sanitize-workers``): that many cases at once, each at its share of the cores, and the
    record says both."""
    from tests.harness.suite_run import THREAD_VARIABLES, RunContext, run_sanitize, worker_threads

    for v in THREAD_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    spans = tree.parent / "spans.txt"
    monkeypatch.setenv("FAKE_SANITIZER_SPANS", str(spans))
    monkeypatch.setenv("FAKE_SANITIZER_SLEEP", "1")
    ctx = RunContext(tree, sys.executable, tree.parent / "q", sanitize_workers=2, cpu_sharers=8)
    run = run_sanitize(coverage(cases=FOUR), ctx, exe(tree)).as_dict()
    assert run["status"] == "pass", run["message"]
    assert most_at_once(spans) == 2
    share = str(worker_threads(8))
    assert (run["case_workers"], run["cpu_sharers"], run["case_cpu_threads"]) == (2, 8, share)
    assert {c["threads"] for c in calls(tree)} == {share}


def test_no_more_cases_run_at_once_than_the_machine_has_sanitizer_slots(tree, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two tool runs side by side, four cases at once each, on a machine of three slots:
    never more than three tool processes alive (``sanitizers.slots``; on the H100 twelve at
    once left nine hanging unattached)."""
    spans = tree.parent / "spans.txt"
    monkeypatch.setenv("FAKE_SANITIZER_SPANS", str(spans))
    monkeypatch.setenv("FAKE_SANITIZER_SLEEP", "1")
    monkeypatch.setenv(SLOTS_ENV, "3")
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda i: run_tool(
            coverage(cases=FOUR), exe=exe(tree), python=sys.executable, root=tree,
            out_dir=tree.parent / f"out{i}", workers=4), [0, 1]))
    assert [r.status for r in runs] == ["pass", "pass"], [r.message for r in runs]
    assert most_at_once(spans) == 3


def test_a_case_that_gets_no_slot_in_its_time_fails_as_timed_out_without_starting(tree, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(SLOTS_ENV, "1")
    t0 = time.monotonic()
    with sanitizer_slot(None) as waited:  # someone else holds the machine's one slot
        assert waited is not None
        res = run_case("memcheck", "t/test_cases.py::test_clean", EXPECT_CLEAN, exe=exe(tree),
                       python=sys.executable, root=tree, out_dir=tree.parent / "out",
                       timeout_s=1.0)
    assert 1.0 <= time.monotonic() - t0 < 30
    assert not res.ok and res.timed_out and res.returncode == 124
    assert res.reason == "timed out waiting 1.0 s for a compute-sanitizer slot"
    assert "not started: no compute-sanitizer slot of 1" in Path(res.log).read_text()
    assert calls(tree) == []  # the tool never ran


def test_a_slot_comes_free_when_its_holder_is_killed(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The kernel drops a dead process's lock: a run killed mid-case leaves no slot taken."""
    monkeypatch.setenv(SLOTS_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(SLOTS_ENV, "1")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom sanitizers.slots import sanitizer_slot\n"
         "with sanitizer_slot(None):\n    print('held', flush=True)\n    time.sleep(600)"],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with sanitizer_slot(0.5) as waited:
            assert waited is None  # taken while the holder lives
        holder.kill()
        holder.wait(30)
        with sanitizer_slot(10.0) as waited:
            assert waited is not None and waited < 10.0
    finally:
        holder.kill()


@pytest.mark.parametrize("raw", ["0", "-2", "eight"])
def test_a_bad_slot_count_is_refused(monkeypatch, raw: str) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(SLOTS_ENV, raw)
    with pytest.raises(ValueError, match=r"\$MEGAMOE_SANITIZER_SLOTS: expected"):
        slots()


def test_workers_below_one_are_refused_before_any_case(tree: Path) -> None:
    with pytest.raises(ValueError, match="at least 1 case at a time, got 0"):
        tool_run(tree, coverage(), workers=0)
    assert calls(tree) == []


def test_declared_paths_expand_into_one_case_per_test(tree: Path) -> None:
    ids = collect_node_ids(sys.executable, ["t/test_cases.py"], root=tree, keyword="clean")
    assert ids == ["t/test_cases.py::test_clean", "t/test_cases.py::test_clean_too"]


def test_declared_paths_take_marked_tests_minus_the_excluded_self_test_targets(tree) -> None:
    ids = expand_cases(sys.executable, ("t/test_cases.py::test_clean", "t"), root=tree,
                       markexpr="sanitizer", exclude=("t/test_targets.py",))
    assert ids == ["t/test_cases.py::test_clean", "t/test_marked.py::test_designated"]


def test_missing_summary_is_unknown_and_fails(tree: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SANITIZER_MODE", "no-summary")
    run = tool_run(tree, coverage())
    assert run.status == "fail"
    planted, clean = run.results
    assert not planted.ok and "NOT caught" in planted.reason
    assert not clean.ok and clean.summary.status == "unknown"


def test_planted_bug_not_caught_fails_the_tool_run(tree: Path) -> None:
    run = tool_run(tree, coverage(planted="t/test_cases.py::test_clean_too"))
    assert run.status == "fail"
    assert "planted bug NOT caught" in run.message


def test_errors_that_are_not_the_planted_report_do_not_count_as_caught(tree: Path) -> None:
    run = tool_run(tree, coverage(report="Barrier error detected"))
    assert run.status == "fail"
    assert "not the planted one" in run.results[0].reason


def test_a_failing_test_is_a_failure_even_with_zero_sanitizer_errors(tree: Path) -> None:
    run = tool_run(tree, coverage(cases=("t/test_cases.py::test_fails",)))
    assert run.status == "fail"
    assert "exited 1" in run.results[1].reason


def test_a_filter_that_selects_no_declared_case_fails_strictly(tree: Path) -> None:
    run = tool_run(tree, coverage(), keyword="nothing_matches_this")
    assert run.status == "fail"
    assert "zero declared cases ran" in run.message


def test_a_hanging_case_is_killed_and_fails(tree: Path) -> None:
    t0 = time.monotonic()
    res = run_case("memcheck", "t/test_cases.py::test_hangs", EXPECT_CLEAN, exe=exe(tree),
                   python=sys.executable, root=tree, out_dir=tree.parent / "out", timeout_s=3)
    assert time.monotonic() - t0 < 60
    assert res.timed_out and not res.ok
    assert res.returncode == 124


def test_junit_report_has_one_testcase_per_process_and_marks_failures(tree: Path) -> None:
    run = tool_run(tree, coverage(cases=("t/test_cases.py::test_clean",
                                         "t/test_cases.py::test_fails")))
    path = tree.parent / "out.junit.xml"
    write_junit(run, path)
    counts = parse_junit(path)
    assert (counts.tests, counts.passed, counts.failures) == (3, 2, 1)


def test_sanitizer_command_rejects_an_unknown_tool_and_leak_check_outside_memcheck() -> None:
    with pytest.raises(ValueError, match="tool"):
        sanitizer_command("cs", "leakcheck", ["x"])
    with pytest.raises(ValueError, match="leak_check"):
        sanitizer_command("cs", "racecheck", ["x"], leak_check=True)
    cmd = sanitizer_command("cs", "memcheck", ["x"], leak_check=True)
    assert cmd[-3:] == ["--leak-check", "full", "x"]


def test_self_test_targets_fail_outside_the_wrapper() -> None:
    """A planted target run without the sanitizer must fail (never pass or skip)."""
    root = Path(__file__).resolve().parents[2]
    node = "tests/single/test_sanitizer_selftests.py::test_selftest_target[memcheck-planted]"
    env = {k: v for k, v in os.environ.items() if k != "MEGAMOE_SANITIZER_TOOL"}
    proc = subprocess.run([sys.executable, "-m", "pytest", node, "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist"], cwd=root, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "must run under compute-sanitizer --tool memcheck" in proc.stdout
    assert "skipped" not in proc.stdout
