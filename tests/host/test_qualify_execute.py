"""qualify.py runs its plan in order, except that consecutive sanitizer runs start together,
and only after every earlier suite has finished (``single`` and ``multi`` need the GPU alone;
``tests.harness.qualify_main.execute``)."""

from __future__ import annotations

import threading
import time

from tests.harness.qualify_main import execute
from tests.harness.suite_run import SuiteRun
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

    def __call__(self, name: str, tool: str | None) -> SuiteRun:
        label = name if tool is None else f"{name}-{tool}"
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


def test_a_lone_sanitizer_or_suite_runs_by_itself() -> None:
    rec = Recorder(0.01)
    execute([("single", None), ("sanitize", "memcheck")], rec)
    assert rec.most == 1
