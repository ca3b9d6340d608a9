"""qualify.py runs its plan in order, except that consecutive sanitizer runs start together,
and only after every earlier suite has finished (``single`` and ``multi`` need the GPU alone;
``tests.harness.qualify_main.execute``)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.harness import seed_suite
from tests.harness.cli import parse_args
from tests.harness.qualify_main import execute
from tests.harness.suite_run import MULTI_SANITIZE, SuiteRun
from tests.suites import SANITIZER_TOOLS

PLAN = [("host", None), ("single", None), ("multi", None)] + [
    ("sanitize", t) for t in SANITIZER_TOOLS]


class Recorder:
    """A stand-in for ``run_one``: notes when each step ran and how many ran at once."""

    def __init__(self, seconds: float = 0.5) -> None:  # long enough to overlap on a busy CI
        self.seconds = seconds
        self.spans: dict[str, tuple[float, float]] = {}
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()
        self.sharers: dict[str, int] = {}

    def __call__(self, name: str, tool: str | None, sharers: int = 1) -> SuiteRun:
        label = name if tool is None else f"{name}-{tool}"
        self.sharers[label] = sharers
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        start = time.monotonic()
        time.sleep(self.seconds)
        end = time.monotonic()
        with self.lock:
            self.running -= 1
        self.spans[label] = (start, end)
        return SuiteRun(name, "pass", f"{label}: pass", end - start, 0, False, ())


def test_results_come_back_in_plan_order() -> None:
    runs = execute(PLAN, Recorder(0.01))
    assert [r.message.split(":")[0] for r in runs] == [
        n if t is None else f"{n}-{t}" for n, t in PLAN]


def test_the_sanitizers_run_together_and_only_after_the_exclusive_suites() -> None:
    rec = Recorder()
    execute(PLAN, rec)
    assert rec.most == len(SANITIZER_TOOLS)  # the four tools overlapped
    tools = [rec.spans[f"sanitize-{t}"] for t in SANITIZER_TOOLS]
    assert max(s for s, _ in tools) < min(e for _, e in tools)  # all were running at once
    for earlier in ("host", "single", "multi"):
        assert rec.spans[earlier][1] <= min(s for s, _ in tools)
    assert rec.spans["host"][1] <= rec.spans["single"][0]  # the rest one at a time
    assert rec.spans["single"][1] <= rec.spans["multi"][0]


def test_a_seed_suites_sanitize_part_runs_its_tools_together_after_its_other_parts() -> None:
    """Found on the H100 (mega_sm107, --parts sanitize): the part's four tools ran one after
    the other, about 200 s each, past one device call; the ``sanitize`` suite's run together."""
    rec = Recorder()
    plan = seed_suite.plan("mega_sm107")
    runs = execute(plan, rec)
    assert [r.message.split(":")[0] for r in runs] == [
        n if t is None else f"{n}-{t}" for n, t in plan]
    tools = [rec.spans[f"mega_sm107-sanitize-{t}"] for t in SANITIZER_TOOLS]
    assert rec.most == len(SANITIZER_TOOLS)
    assert max(s for s, _ in tools) < min(e for _, e in tools)
    assert rec.spans["mega_sm107-multi"][1] <= min(s for s, _ in tools)
    assert rec.spans["mega_sm107-single"][1] <= rec.spans["mega_sm107-multi"][0]


def test_the_multi_tier_under_a_tool_is_a_world_and_runs_alone() -> None:
    rec = Recorder(0.01)
    execute([(MULTI_SANITIZE, "memcheck"), (MULTI_SANITIZE, "synccheck")], rec)
    assert rec.most == 1


def test_a_lone_sanitizer_or_suite_runs_by_itself() -> None:
    rec = Recorder(0.01)
    execute([("single", None), ("sanitize", "memcheck")], rec)
    assert rec.most == 1


class SplitRecorder(Recorder):
    """``Recorder`` whose ``single`` behaves like ``run_split`` under ``--sanitizers-beside``:
    its xdist phase runs while ``beside`` does, its timing phase after both."""

    def __call__(self, name: str, tool: str | None, beside=None, sharers: int = 1) -> SuiteRun:  # type: ignore[no-untyped-def, override]
        if name != "single" or beside is None:
            return super().__call__(name, tool, sharers)
        t = threading.Thread(target=beside)
        t.start()
        parallel = super().__call__("single.parallel", None)
        t.join()
        alone = super().__call__("single.alone", None)
        return SuiteRun("single", "pass", "single: pass", parallel.duration_s + alone.duration_s,
                        0, False, ())


def test_sanitizers_beside_run_with_singles_xdist_phase_and_before_its_timing_phase() -> None:
    rec = SplitRecorder()
    plan = [("single", None)] + [("sanitize", t) for t in SANITIZER_TOOLS]
    runs = execute(plan, rec, sanitizers_beside=True)
    assert [r.message.split(":")[0] for r in runs] == [
        "single", *(f"sanitize-{t}" for t in SANITIZER_TOOLS)]  # plan order
    tools = [rec.spans[f"sanitize-{t}"] for t in SANITIZER_TOOLS]
    parallel, alone = rec.spans["single.parallel"], rec.spans["single.alone"]
    assert max(s for s, _ in tools) < parallel[1]  # every tool started during the xdist phase
    assert rec.most == len(SANITIZER_TOOLS) + 1
    assert max(e for _, e in tools) <= alone[0]  # the timing phase had the GPU alone


def test_sanitizers_beside_still_run_when_single_has_no_xdist_phase() -> None:
    rec = Recorder(0.01)  # a runner that never calls ``beside``
    plan = [("single", None), ("sanitize", "memcheck"), ("sanitize", "racecheck")]
    runs = execute(plan, lambda name, tool, beside=None, sharers=1: rec(name, tool, sharers),
                   sanitizers_beside=True, workers=12)
    assert [r.message.split(":")[0] for r in runs] == [
        "single", "sanitize-memcheck", "sanitize-racecheck"]
    assert rec.spans["single"][1] <= min(rec.spans["sanitize-memcheck"][0],
                                         rec.spans["sanitize-racecheck"][0])
    assert rec.sharers["sanitize-memcheck"] == 2  # the two tools, single over by then


def test_each_sanitizer_run_is_told_how_many_processes_share_the_cpu_with_it() -> None:
    """The four tools together share the cores four ways; beside ``single``'s 12 xdist
    workers sixteen ways; a lone tool and the exclusive suites are not told to share."""
    rec = Recorder(0.01)
    execute(PLAN, rec)
    assert {rec.sharers[f"sanitize-{t}"] for t in SANITIZER_TOOLS} == {len(SANITIZER_TOOLS)}
    assert rec.sharers["single"] == rec.sharers["multi"] == 1
    beside = SplitRecorder(0.01)
    execute([("single", None)] + [("sanitize", t) for t in SANITIZER_TOOLS], beside,
            sanitizers_beside=True, workers=12)
    assert {beside.sharers[f"sanitize-{t}"] for t in SANITIZER_TOOLS} == {
        len(SANITIZER_TOOLS) + 12}
    lone = Recorder(0.01)
    execute([("single", None), ("sanitize", "memcheck")], lone)
    assert lone.sharers["sanitize-memcheck"] == 1


def test_several_cases_of_each_tool_at_once_count_in_the_cpu_share() -> None:
    """``--sanitize-workers 3``: each tool runs three cases at once, so the four tools
    together are twelve processes, beside 12 xdist workers twenty-four, a lone tool three;
    the exclusive suites are still not told to share."""
    rec = Recorder(0.01)
    execute(PLAN, rec, case_workers=3)
    assert {rec.sharers[f"sanitize-{t}"] for t in SANITIZER_TOOLS} == {3 * len(SANITIZER_TOOLS)}
    assert rec.sharers["single"] == rec.sharers["multi"] == rec.sharers["host"] == 1
    beside = SplitRecorder(0.01)
    execute([("single", None)] + [("sanitize", t) for t in SANITIZER_TOOLS], beside,
            sanitizers_beside=True, workers=12, case_workers=3)
    assert {beside.sharers[f"sanitize-{t}"] for t in SANITIZER_TOOLS} == {
        3 * len(SANITIZER_TOOLS) + 12}
    lone = Recorder(0.01)
    execute([("single", None), ("sanitize", "memcheck")], lone, case_workers=3)
    assert (lone.sharers["single"], lone.sharers["sanitize-memcheck"]) == (1, 3)


def test_sanitize_workers_is_recorded_and_below_one_refused(capsys) -> None:  # type: ignore[no-untyped-def]
    args = parse_args(["--suite", "sanitize", "--sanitizer-tool", "memcheck", "--output-dir",
                       "o", "--sanitize-workers", "3"])
    assert args.sanitize_workers == 3 and args.as_dict()["sanitize_workers"] == 3
    assert parse_args(["--suite", "gpu", "--output-dir", "o"]).sanitize_workers == 1
    with pytest.raises(SystemExit):
        parse_args(["--suite", "gpu", "--output-dir", "o", "--sanitize-workers", "0"])
    assert "--sanitize-workers must be >= 1, got 0" in capsys.readouterr().err


def test_without_the_option_single_and_the_sanitizers_never_overlap() -> None:
    rec = SplitRecorder()
    execute([("single", None), ("sanitize", "memcheck")], rec)
    assert "single.parallel" not in rec.spans and rec.most == 1


def test_sanitizers_beside_is_only_for_the_gpu_suite_with_workers(capsys) -> None:
    args = parse_args(["--suite", "gpu", "--output-dir", "o", "--workers", "12",
                       "--sanitizers-beside"])
    assert args.sanitizers_beside and args.as_dict()["sanitizers_beside"] is True
    assert parse_args(["--suite", "gpu", "--output-dir", "o"]).sanitizers_beside is False
    for bad in (["--suite", "single", "--workers", "12"], ["--suite", "gpu"]):
        with pytest.raises(SystemExit):
            parse_args([*bad, "--output-dir", "o", "--sanitizers-beside"])
        assert "--sanitizers-beside: only for --suite gpu with --workers 2" in (
            capsys.readouterr().err)
