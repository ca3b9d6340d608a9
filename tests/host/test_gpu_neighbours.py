"""An exclusive suite (``single``, ``multi``: they hold timing tests) fails when another
process held the GPU while it ran, and its record names that process
(``tests.harness.gpu_neighbours``). On the CPU: a fake ``/proc`` tree, a real orphaned
process holding a stand-in device file, and qualify.py over a throwaway tree."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.gpu_neighbours import (
    Neighbour,
    NeighbourReport,
    NeighbourWatch,
    judge_exclusive,
    parent_pid,
)
from tests.harness.qualify_main import main
from tests.suites import SUITES, Suite

LEAN = ("-p", "no:xdist", "-p", "no:hypothesispytest")
linux_only = pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/fd").is_dir(),
                                reason="needs Linux /proc")


def test_the_suites_with_timing_tests_are_exclusive() -> None:
    assert SUITES["single"].exclusive_gpu and SUITES["multi"].exclusive_gpu
    assert not SUITES["sanitize"].exclusive_gpu and not SUITES["host"].exclusive_gpu


def test_parent_pid_survives_spaces_and_parentheses_in_the_command_name() -> None:
    assert parent_pid("4242 (py (worker) 1) S 77 4242 4242 0 -1") == 77


CUDA_MAPS = "7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n"
NVML_MAPS = "7f00-7f10 r-xp 00000000 08:01 43 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n"


def _process(proc: Path, pid: int, ppid: int, cmd: list[str], fds: list[str],
             maps: str = "") -> None:
    d = proc / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "maps").write_text(maps)
    (d / "stat").write_text(f"{pid} ({Path(cmd[0]).name}) S {ppid} {pid} {pid} 0 -1\n")
    (d / "cmdline").write_bytes(b"\0".join(c.encode() for c in cmd) + b"\0")
    for i, target in enumerate(fds):
        (d / "fd" / str(i)).symlink_to(target)


@pytest.fixture()
def fake_proc(tmp_path: Path) -> Path:
    """qualify.py (100) -> pytest (101) -> a worker (102), all CUDA programs; a sanitizer
    run (200), a CUDA program; nvidia-smi (201) holding only /dev/nvidiactl;
    nvidia-persistenced (202) holding /dev/nvidia0 without the CUDA library; a shell (300)
    off the GPU."""
    proc = tmp_path / "proc"
    _process(proc, 1, 0, ["/sbin/init"], [])
    _process(proc, 100, 1, ["python3", "qualify.py", "--suite", "single"], ["/dev/nvidia0"],
             CUDA_MAPS)
    _process(proc, 101, 100, ["python3", "-m", "pytest", "tests/single"], ["/dev/nvidia0"],
             CUDA_MAPS)
    _process(proc, 102, 101, ["python3", "worker"], ["/dev/null", "/dev/nvidia0"], CUDA_MAPS)
    _process(proc, 200, 1, ["python3", "qualify.py", "--suite", "sanitize"],
             ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"], CUDA_MAPS)
    _process(proc, 201, 1, ["nvidia-smi"], ["/dev/nvidiactl"], NVML_MAPS)
    _process(proc, 202, 1, ["/usr/bin/nvidia-persistenced"], ["/dev/nvidia0"], NVML_MAPS)
    _process(proc, 300, 1, ["bash"], ["/dev/pts/0"])
    return proc


def test_a_process_outside_our_tree_holding_the_gpu_is_a_neighbour(fake_proc: Path) -> None:
    report = NeighbourWatch(proc=fake_proc, root_pid=100, interval_s=60).start().stop()
    assert report.available and report.samples == 2  # one at start, one at stop
    assert report.neighbours == (Neighbour(200, "python3 qualify.py --suite sanitize"),)
    assert report.driver_clients == (Neighbour(202, "/usr/bin/nvidia-persistenced"),)


def test_a_gpu_holder_whose_maps_cannot_be_read_is_unreadable_not_a_neighbour(
        fake_proc: Path) -> None:
    (fake_proc / "200" / "maps").unlink()
    report = NeighbourWatch(proc=fake_proc, root_pid=100, interval_s=60).start().stop()
    assert report.neighbours == () and report.unreadable == 1


def test_our_own_tree_alone_on_the_gpu_has_no_neighbours(fake_proc: Path) -> None:
    for pid in ("200", "201", "300"):
        for fd in (fake_proc / pid / "fd").iterdir():
            fd.unlink()
    report = NeighbourWatch(proc=fake_proc, root_pid=100, interval_s=60).start().stop()
    assert report.available and report.neighbours == ()


def test_without_proc_nothing_is_watched_or_gated(tmp_path: Path) -> None:
    report = NeighbourWatch(proc=tmp_path / "none", root_pid=1).start().stop()
    assert not report.available and report.neighbours == () and "not watched" in report.reason
    assert judge_exclusive("pass", "suite single: pass", report) == ("pass", "suite single: pass")


def test_judge_fails_a_pass_keeps_a_timeout_and_names_the_neighbour() -> None:
    report = NeighbourReport(True, 3, (Neighbour(7, "python3 -m megamoe.bench layer"),))
    status, message = judge_exclusive("pass", "suite single: 275 passed: pass", report)
    assert status == "fail"
    assert "GPU shared: 1 other process(es)" in message and "pid 7: python3 -m megamoe.bench" \
        in message
    assert judge_exclusive("timeout", "t", report)[0] == "timeout"


HOLD = """
import mmap, sys, time
f = open(sys.argv[1], "rb")                          # the stand-in GPU device file
lib = open(sys.argv[3], "rb")                        # the stand-in libcuda.so, mapped
m = mmap.mmap(lib.fileno(), 0, access=mmap.ACCESS_READ)
open(sys.argv[2], "w").write("ready")
time.sleep(120)
"""
ORPHAN = '''\
import subprocess, sys
holder = subprocess.Popen([sys.executable, "-c", sys.argv[4], *sys.argv[1:4]], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
   stderr=subprocess.DEVNULL)
print(holder.pid, flush=True)
'''  # the intermediate exits at once: the holder is reparented away from the test (and
# holds none of its pipes, so the test's read of the pid ends)


@linux_only
def test_a_real_orphan_holding_the_device_file_is_caught_and_our_child_is_not(
        tmp_path: Path) -> None:
    device = tmp_path / "nvidia7"
    device.write_bytes(b"")
    library = tmp_path / "libcuda.so.1"
    library.write_bytes(b"\0" * 4096)
    ready = tmp_path / "ready"
    out = subprocess.run([sys.executable, "-c", ORPHAN, str(device), str(ready), str(library),
                          HOLD], capture_output=True, text=True, check=True, timeout=60)
    orphan = int(out.stdout.split()[0])
    own_ready = tmp_path / "own-ready"
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(device), str(own_ready),
                              str(library)])
    try:
        deadline = time.monotonic() + 60
        while not (ready.exists() and own_ready.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        watch = NeighbourWatch(interval_s=0.05, device=re.compile(re.escape(str(device)) + "$"))
        watch.start()
        time.sleep(0.3)
        report = watch.stop()
    finally:
        child.kill()
        child.wait()
        os.kill(orphan, signal.SIGKILL)
    pids = [n.pid for n in report.neighbours]
    assert pids == [orphan], report
    assert child.pid not in pids and report.samples >= 3
    assert report.neighbours[0].command.startswith(f"{sys.executable} -c")  # its command line


@dataclass
class StubWatch:
    """What ``main`` is given instead of the /proc watch: a fixed report."""

    report: NeighbourReport
    started: bool = False

    def start(self) -> StubWatch:
        self.started = True
        return self

    def stop(self) -> NeighbourReport:
        assert self.started
        return self.report


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "t").mkdir(parents=True)
    (root / "t" / "test_pass.py").write_text("def test_one(): pass\n")
    return root


def qualify(tree: Path, exclusive: bool, watch) -> tuple[int, dict]:
    suites = {"host": Suite("host", "throwaway", paths=("t",), extra_args=LEAN,
                            exclusive_gpu=exclusive)}
    out = tree.parent / "out"
    rc = main(["--suite", "host", "--output-dir", str(out)], root=tree, suites=suites,
              python=sys.executable, environment={"gpus": []}, neighbour_watch=watch)
    return rc, json.loads((out / "qualification.json").read_text())


def test_an_exclusive_suite_that_shared_the_gpu_fails_and_the_record_says_with_whom(
        tree: Path) -> None:
    shared = NeighbourReport(True, 5, (Neighbour(4242, "python3 qualify.py --suite sanitize"),))
    rc, rec = qualify(tree, True, lambda: StubWatch(shared))
    suite = rec["suites"][0]
    assert rc == 1 and rec["status"] == "fail" and suite["status"] == "fail"
    assert suite["counts"]["passed"] == 1  # the tests passed; sharing the GPU failed the run
    assert "pid 4242: python3 qualify.py --suite sanitize" in suite["message"]
    assert suite["gpu_neighbours"]["neighbours"] == [
        {"pid": 4242, "command": "python3 qualify.py --suite sanitize"}]


def test_an_exclusive_suite_alone_on_the_gpu_passes_and_records_the_watch(tree: Path) -> None:
    rc, rec = qualify(tree, True, lambda: StubWatch(NeighbourReport(True, 5)))
    suite = rec["suites"][0]
    assert rc == 0 and suite["status"] == "pass"
    assert suite["gpu_neighbours"] == {"available": True, "samples": 5, "neighbours": [],
                                       "driver_clients": [], "unreadable": 0, "reason": ""}


def test_a_suite_that_is_not_exclusive_is_not_watched(tree: Path) -> None:
    def refuse() -> StubWatch:
        raise AssertionError("a non-exclusive suite must not be watched")

    rc, rec = qualify(tree, False, refuse)
    assert rc == 0 and "gpu_neighbours" not in rec["suites"][0]
