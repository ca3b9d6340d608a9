"""Builders for the remote-arm tests (``tests/host/test_bench_remote.py``), imported by the
worker process (``megamoe.bench.remote_worker``): a sleeper whose time per call is known, and
arms that fail their check, hang, die or raise."""

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
