"""Builders for the remote-arm tests (``tests/host/test_bench_remote.py``), imported by the
worker process (``megamoe.bench.remote_worker``): a sleeper whose time per call is known, and
arms that fail their check, hang, die or raise; ``after_build`` counts the worker's calls, which
``after_build_seen`` checks."""

from __future__ import annotations

import os
import time

from megamoe.bench.registry import BuildContext, Case, Workload


def sleeper(case: Case, ctx: BuildContext) -> Workload:
    """Sleeps ``case.shape["ms"]`` per call; declares ``$REMOTE_TEST_BYTES`` bytes; prints."""
    print("a builder that prints to stdout")  # must not reach the answers
    seconds = case.shape["ms"] / 1000
    return Workload(lambda: time.sleep(seconds),
                    bytes_moved=int(os.environ.get("REMOTE_TEST_BYTES", "1")), ceiling="copy_bw")


def bad_check(case: Case, ctx: BuildContext) -> Workload:
    def check() -> None:
        raise AssertionError("planted: its rows differ from the oracle's")

    return Workload(lambda: None, check=check)


def hangs(case: Case, ctx: BuildContext) -> Workload:
    """Its first call never returns (a kernel spinning on a flag that never comes)."""
    return Workload(lambda: time.sleep(3600))


def dies(case: Case, ctx: BuildContext) -> Workload:
    os._exit(7)


def refuses(case: Case, ctx: BuildContext) -> Workload:
    raise ValueError("backend planted takes H a multiple of 256")


AFTER_BUILD_CALLS: list[int] = []


def after_build() -> None:
    """The worker calls this once a workload of this module is built."""
    AFTER_BUILD_CALLS.append(1)


def after_build_seen(case: Case, ctx: BuildContext) -> Workload:
    """Its check passes when the worker called ``after_build`` once, after this build (the
    count it expects: ``case.shape["calls"]``)."""
    before = len(AFTER_BUILD_CALLS)

    def check() -> None:
        seen = len(AFTER_BUILD_CALLS) - before
        assert seen == case.shape["calls"], f"after_build called {seen} times after the build"

    return Workload(lambda: None, check=check)
