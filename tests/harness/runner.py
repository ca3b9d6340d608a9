"""Run one command in its own process group, bounded by a timeout.

Contract: the command runs as the leader of a new session (so torchrun and
its workers, pytest-xdist workers, or a sanitizer and its target all share
one process group). On expiry of ``timeout_s`` the whole group gets SIGTERM,
then SIGKILL after ``grace_s``; the result says ``timed_out`` and its return
code is ``TIMEOUT_EXIT`` (124, as coreutils ``timeout``). After a normal exit
any stragglers left in the group are killed too, so nothing outlives a suite.

Because every group leads a new session, a signal that ends the runner itself (``timeout``
or a CI job limit sending SIGTERM, a closed terminal's SIGHUP, Ctrl-C's SIGINT, which does not
reach other sessions) would leave the suites running on the GPU: a sanitizer run outliving
its qualification holds the GPU while the next command's timing tests run. Inside
``terminate_groups_on_signals`` such a signal SIGKILLs every live group first, then ends
the process with ``128 + signal`` and no record (the run did not finish).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_EXIT = 124
DEFAULT_GRACE_S = 5.0
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
"""Signals that end a qualification; see ``terminate_groups_on_signals``."""

_live_groups: set[int] = set()
_live_lock = threading.RLock()
"""Reentrant: the signal handler runs in the main thread, possibly while that thread holds it."""


@dataclass(frozen=True)
class ProcessResult:
    """Outcome of one bounded command."""

    command: tuple[str, ...]
    returncode: int
    timed_out: bool
    duration_s: float
    log_path: Path


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def run_process(
    command: Sequence[str],
    *,
    cwd: Path,
    log_path: Path,
    timeout_s: float | None,
    env: Mapping[str, str] | None = None,
    grace_s: float = DEFAULT_GRACE_S,
) -> ProcessResult:
    """Run ``command`` with stdout+stderr appended to ``log_path``.

    ``timeout_s`` None means no limit. ``env`` replaces the environment when
    given (callers pass ``{**os.environ, ...}`` to extend it).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    timed_out = False
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        proc = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        pgid = proc.pid
        with _live_lock:
            _live_groups.add(pgid)
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_group(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
            _signal_group(pgid, signal.SIGKILL)
            proc.wait()
            returncode = TIMEOUT_EXIT
            log.write(
                f"\n[qualify] timeout after {timeout_s} s: process group {pgid} got SIGTERM, "
                f"then SIGKILL after {grace_s} s\n"
            )
        finally:
            # Stragglers (e.g. orphaned distributed workers) never outlive the suite.
            _signal_group(pgid, signal.SIGKILL)
            with _live_lock:
                _live_groups.discard(pgid)
    return ProcessResult(
        tuple(command), returncode, timed_out, round(time.monotonic() - t0, 3), log_path
    )


def live_groups() -> frozenset[int]:
    """Process groups of the ``run_process`` calls now running (any thread)."""
    with _live_lock:
        return frozenset(_live_groups)


def _kill_live_groups_and_exit(signum: int, _frame: object) -> None:
    groups = sorted(live_groups())
    for pgid in groups:
        _signal_group(pgid, signal.SIGKILL)
    name = signal.Signals(signum).name
    print(f"[qualify] {name}: killed process group(s) {groups or 'none'}; no record written",
          file=sys.stderr, flush=True)
    # os._exit, not sys.exit: suite threads blocked in wait() must not hold the exit up.
    os._exit(128 + signum)


@contextlib.contextmanager
def terminate_groups_on_signals() -> Iterator[None]:
    """While inside: SIGTERM, SIGHUP or SIGINT SIGKILLs every live process group, then exits
    with ``128 + signal``. Outside the main thread (where Python cannot set handlers) it
    does nothing. The previous handlers come back on leaving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _kill_live_groups_and_exit) for s in TERMINATING_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
