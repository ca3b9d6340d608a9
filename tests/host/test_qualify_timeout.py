"""--timeout kills the whole process group (SIGTERM, then SIGKILL), records a timeout, exits 124."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tests.harness.qualify_main import main
from tests.harness.runner import TIMEOUT_EXIT, run_process
from tests.suites import Suite

LEAN = ("-p", "no:xdist", "-p", "no:hypothesispytest")

SLEEPER = '''\
import os, subprocess, time
def test_sleeps_with_a_grandchild():
    child = subprocess.Popen(["sleep", "300"])
    with open(os.environ["GRANDCHILD_PID_FILE"], "w") as f:
        f.write(str(child.pid))
    time.sleep(300)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose; ps would say Z.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_timeout_kills_the_process_group_records_timeout_and_exits_124(
    tmp_path: Path, monkeypatch
) -> None:
    tree = tmp_path / "tree"
    (tree / "t").mkdir(parents=True)
    (tree / "t" / "test_sleep.py").write_text(SLEEPER)
    pid_file = tmp_path / "grandchild.pid"
    monkeypatch.setenv("GRANDCHILD_PID_FILE", str(pid_file))
    suites = {"host": Suite("host", "sleeper", paths=("t",), extra_args=LEAN)}
    out = tmp_path / "out"
    t0 = time.monotonic()
    rc = main(["--suite", "host", "--output-dir", str(out), "--timeout", "4"], root=tree,
              suites=suites, python=sys.executable, environment={"gpus": []})
    assert time.monotonic() - t0 < 60
    assert rc == TIMEOUT_EXIT
    rec = json.loads((out / "qualification.json").read_text())
    assert rec["status"] == "timeout"
    suite = rec["suites"][0]
    assert suite["status"] == "timeout" and suite["timed_out"] is True
    assert "TIMEOUT after 4.0 s" in suite["message"]
    assert "SIGTERM" in (out / "host.log").read_text()
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild), "the grandchild outlived the suite"


def test_a_process_ignoring_sigterm_gets_sigkill(tmp_path: Path) -> None:
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(300)\n"
    t0 = time.monotonic()
    res = run_process([sys.executable, "-c", script], cwd=tmp_path, log_path=tmp_path / "log",
                      timeout_s=1, grace_s=1)
    assert res.timed_out and res.returncode == TIMEOUT_EXIT
    assert time.monotonic() - t0 < 30


def test_a_command_within_its_timeout_keeps_its_exit_code(tmp_path: Path) -> None:
    res = run_process([sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"],
                      cwd=tmp_path, log_path=tmp_path / "log", timeout_s=60)
    assert (res.returncode, res.timed_out) == (3, False)
    assert "hi" in (tmp_path / "log").read_text()
