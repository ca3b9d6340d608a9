"""Run one command in its own process group, bounded by a timeout.

Contract: the command runs as the leader of a new session (so torchrun and
its workers, pytest-xdist workers, or a sanitizer and its target all share
one process group). On expiry of ``timeout_s`` the whole group gets SIGTERM,
then SIGKILL after ``grace_s``; the result says ``timed_out`` and its return
code is ``TIMEOUT_EXIT`` (124, as coreutils ``timeout``). After a normal exit
any stragglers left in the group are killed too, so nothing outlives a suite.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_EXIT = 124
DEFAULT_GRACE_S = 5.0


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
    return ProcessResult(
        tuple(command), returncode, timed_out, round(time.monotonic() - t0, 3), log_path
    )
