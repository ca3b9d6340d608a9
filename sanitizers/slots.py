"""How many compute-sanitizer processes run at once on this machine: a semaphore of lock files.

compute-sanitizer's front end and its target meet over a TCP port taken from a range of ten
by default (2025.3.1's help: "--port arg (=49152) Base port for connecting to target
application", "--max-connections arg (=10) Maximum number of ports"). Found on an H100
(2026-12-06): with twelve sanitized cases started together (four tools, three cases each,
``qualify.py --sanitize-workers 3``) beside ``single``'s xdist phase, whose four tool
self-tests start compute-sanitizer too, nine cases never ran: the tool printed "No attachable
process found. compute-sanitizer timed-out" and then waited on its target until the case's
timeout (542 s each). With at most eight at once, none of 72 cases did so in the next run and
one of 72 in the run after it, among the first eight started: the tool's 10 s launch timeout
under that load was the other cause (``wrapper.LAUNCH_TIMEOUT_S``, now 300 s; none hung in the
three runs since, 72 + 40 + 60 cases, on an H100 the same day). So every process that starts
the tool here takes a slot first: at most ``slots()`` of them run at once, across the threads
of one run and the processes of several (xdist workers, tools side by side). A slot is a lock
file held with ``fcntl.flock``: the kernel frees it when its holder exits, however it exits,
so a killed run never leaves a slot taken.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SLOTS_ENV = "MEGAMOE_SANITIZER_SLOTS"
"""The number of slots (default ``DEFAULT_SLOTS``)."""
SLOTS_DIR_ENV = "MEGAMOE_SANITIZER_SLOTS_DIR"
"""Where the lock files live (default ``<tmp>/megamoe-sanitizer-slots``): every process that
shares the machine's compute-sanitizer ports must share it."""
DEFAULT_SLOTS = 8
"""Below the ten ports. The multi tier's sanitized ranks (``suite_run.run_multi``) take no
slot: they run with the GPU alone, at most four."""
POLL_S = 0.1


def slots() -> int:
    raw = os.environ.get(SLOTS_ENV, str(DEFAULT_SLOTS))
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"${SLOTS_ENV}: expected a whole number of slots, got {raw!r}") from None
    if n < 1:
        raise ValueError(f"${SLOTS_ENV}: expected at least 1 slot, got {n}")
    return n


def slots_dir() -> Path:
    return Path(os.environ.get(SLOTS_DIR_ENV)
                or Path(tempfile.gettempdir()) / "megamoe-sanitizer-slots")


@contextmanager
def sanitizer_slot(timeout_s: float | None) -> Iterator[float | None]:
    """Hold one slot while the body runs; yields the seconds spent waiting for it, or None
    when none was free within ``timeout_s`` (None: wait as long as it takes); the body then
    must not start the tool."""
    n, where = slots(), slots_dir()
    where.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    while True:
        for i in range(n):
            f = open(where / f"slot-{i}", "a")  # noqa: SIM115 - held open for the body
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield time.monotonic() - t0
            finally:
                f.close()  # closing the file releases the lock
            return
        if timeout_s is not None and time.monotonic() - t0 >= timeout_s:
            yield None
            return
        time.sleep(POLL_S)
