"""Other processes holding the GPU while an exclusive suite runs.

The ``single`` and ``multi`` suites hold timing tests (``tests/single/test_bench_smoke.py``:
an A/A control must read "noise", a real difference must not), so they need the GPU alone.
Another process on it (a sanitizer run started alongside, a benchmark) makes those tests
fail, or pass by luck, and neither says why. ``NeighbourWatch`` samples, every
``interval_s`` while the suite runs and once more at the end, which processes are CUDA
programs on the GPU, a GPU device file (``/dev/nvidia<N>``) open and the CUDA driver library
(``libcuda.so``) mapped, and are neither this process nor one of its descendants (the
suite's pytest, torchrun ranks, compute workers). Processes that hold the device file
without the CUDA library (``nvidia-persistenced``, NVML monitors such as ``nvidia-smi``) run
no kernels: they are listed as ``driver_clients`` and gate nothing. ``suite_run`` records
the report and fails an exclusive suite that had neighbours (``judge_exclusive``;
docs/qualification/README.md).

Why ``/proc`` and not ``nvidia-smi --query-compute-apps``: the file-descriptor scan needs no
GPU tool, names the neighbour's command line, and cannot mistake a PID from another PID
namespace for a local process. Where ``/proc`` cannot be read (not Linux) the report says
``available: false`` and gates nothing; processes whose descriptors this user may not read
(or memory maps) this user may not read are counted as ``unreadable``, not as neighbours.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.strict import STATUS_FAIL, STATUS_PASS

GPU_DEVICE_FILE = re.compile(r"^/dev/nvidia\d+$")
"""A per-GPU device node (``/dev/nvidiactl`` and ``/dev/nvidia-uvm`` are not per GPU)."""
CUDA_LIBRARY = re.compile(r"/libcuda\.so")
"""In ``/proc/<pid>/maps`` of every process that uses the CUDA driver API (and so of every
PyTorch, CuPy or CuTe DSL program that touched the GPU)."""
COMMAND_CHARS = 200
"""How much of a neighbour's command line the record keeps."""


@dataclass(frozen=True)
class Neighbour:
    pid: int
    command: str


@dataclass(frozen=True)
class NeighbourReport:
    """What a watch saw over ``samples`` scans, each list in PID order: ``neighbours``, the
    CUDA programs outside our process tree; ``driver_clients``, processes outside it that
    held a GPU device file without the CUDA library; ``unreadable``, the most processes one
    scan could not inspect."""

    available: bool
    samples: int
    neighbours: tuple[Neighbour, ...] = ()
    unreadable: int = 0
    reason: str = ""
    driver_clients: tuple[Neighbour, ...] = ()

    def as_dict(self) -> dict[str, object]:
        def listing(ns: tuple[Neighbour, ...]) -> list[dict[str, object]]:
            return [{"pid": n.pid, "command": n.command} for n in ns]

        return {"available": self.available, "samples": self.samples,
                "neighbours": listing(self.neighbours),
                "driver_clients": listing(self.driver_clients),
                "unreadable": self.unreadable, "reason": self.reason}


def parent_pid(stat_text: str) -> int:
    """The parent PID from a ``/proc/<pid>/stat`` line (the command name, in parentheses,
    may itself hold spaces and parentheses: the fields after the last ``)`` are fixed)."""
    return int(stat_text[stat_text.rindex(")") + 2:].split()[1])


def _pids(proc: Path) -> list[int]:
    return [int(p.name) for p in proc.iterdir() if p.name.isdigit()]


def process_parents(proc: Path) -> dict[int, int]:
    """PID -> parent PID for every process still there."""
    parents = {}
    for pid in _pids(proc):
        try:
            parents[pid] = parent_pid((proc / str(pid) / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
    return parents


def descendants(root: int, parents: dict[int, int]) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def command_line(proc: Path, pid: int) -> str:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:COMMAND_CHARS] or "?"


def uses_cuda(proc: Path, pid: int, library: re.Pattern[str] = CUDA_LIBRARY) -> bool | None:
    """Whether ``pid`` has the CUDA driver library mapped (None: its maps cannot be read)."""
    try:
        return library.search((proc / str(pid) / "maps").read_text(errors="replace")) is not None
    except OSError:
        return None


def gpu_holders(proc: Path, device: re.Pattern[str] = GPU_DEVICE_FILE) -> tuple[set[int], int]:
    """PIDs with a file descriptor open on a GPU device file, and how many processes could not
    be inspected."""
    holders, unreadable = set(), 0
    for pid in _pids(proc):
        fd_dir = proc / str(pid) / "fd"
        try:
            fds = list(fd_dir.iterdir())
        except PermissionError:
            unreadable += 1
            continue
        except OSError:  # the process ended
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if device.match(target):
                holders.add(pid)
                break
    return holders, unreadable


@dataclass
class NeighbourWatch:
    """Sample GPU neighbours of ``root_pid``'s process tree from a background thread:
    ``start()``, run the suite, ``stop()`` -> ``NeighbourReport``."""

    proc: Path = Path("/proc")
    interval_s: float = 2.0
    root_pid: int = field(default_factory=os.getpid)
    device: re.Pattern[str] = GPU_DEVICE_FILE
    library: re.Pattern[str] = CUDA_LIBRARY
    _seen: dict[int, str] = field(default_factory=dict, init=False)
    _clients: dict[int, str] = field(default_factory=dict, init=False)
    _samples: int = field(default=0, init=False)
    _unreadable: int = field(default=0, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    @property
    def available(self) -> bool:
        return (self.proc / str(self.root_pid) / "stat").exists()

    def sample(self) -> None:
        """One scan: a GPU holder outside our process tree is a neighbour if it maps the CUDA
        library, a driver client if it does not."""
        holders, unreadable = gpu_holders(self.proc, self.device)
        own = descendants(self.root_pid, process_parents(self.proc))
        for pid in sorted(holders - own):
            cuda = uses_cuda(self.proc, pid, self.library)
            if cuda is None:
                unreadable += 1
                continue
            seen = self._seen if cuda else self._clients
            seen.setdefault(pid, command_line(self.proc, pid))
        self._samples += 1
        self._unreadable = max(self._unreadable, unreadable)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def start(self) -> NeighbourWatch:
        if self.available:
            self.sample()
            self._thread = threading.Thread(target=self._loop, name="gpu-neighbours",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> NeighbourReport:
        if not self.available:
            return NeighbourReport(False, 0, reason=f"no {self.proc}/{self.root_pid}/stat "
                                                    "(not Linux /proc): not watched")
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        neighbours = tuple(Neighbour(p, c) for p, c in sorted(self._seen.items()))
        clients = tuple(Neighbour(p, c) for p, c in sorted(self._clients.items()))
        return NeighbourReport(True, self._samples, neighbours, self._unreadable,
                               driver_clients=clients)


def judge_exclusive(status: str, message: str, report: NeighbourReport) -> tuple[str, str]:
    """An exclusive suite that shared the GPU fails (a timeout stays a timeout), and its
    message names the neighbours."""
    if not report.neighbours:
        return status, message
    names = "; ".join(f"pid {n.pid}: {n.command}" for n in report.neighbours)
    note = (f"GPU shared: {len(report.neighbours)} other process(es) held it during the run "
            f"({names}); this suite's timing tests need the GPU alone (docs/gpu.md)")
    return (STATUS_FAIL if status == STATUS_PASS else status), f"{message}; FAIL: {note}"
