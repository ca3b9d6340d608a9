"""A signal that ends qualify.py ends its suites too (``tests.harness.runner``:
``terminate_groups_on_signals``). Suites lead their own sessions, so without the handler
a SIGTERM from ``timeout`` or a CI job limit (or Ctrl-C's SIGINT, which stays in the
terminal's session) leaves them running on the GPU after qualify.py is gone. Each case runs
a real qualification (``qualify_main.main``, a sleeper suite) in a child process, signals
it once the suite's grandchild is up, and checks that the grandchild died; the planted case
runs the same child without the handler and shows the grandchild surviving."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.host.test_qualify_timeout import LEAN, SLEEPER, _alive

ROOT = Path(__file__).resolve().parents[2]

QUALIFY_CHILD = '''\
import contextlib, sys
sys.path.insert(0, {root!r})
from tests.harness import qualify_main
from tests.suites import Suite
if {planted!r}:
    qualify_main.terminate_groups_on_signals = contextlib.nullcontext
suites = {{"host": Suite("host", "sleeper", paths=("t",), extra_args={lean!r})}}
sys.exit(qualify_main.main(["--suite", "host", "--output-dir", {out!r}, "--timeout", "120"],
                           root=__import__("pathlib").Path({tree!r}), suites=suites,
                           python=sys.executable, environment={{"gpus": []}}))
'''


def _start(tmp_path: Path, planted: bool) -> tuple[subprocess.Popen, int]:
    """qualify_main.main in a child, running a suite whose test starts a grandchild; returns
    the child and the grandchild's pid once the grandchild is up."""
    tree = tmp_path / "tree"
    (tree / "t").mkdir(parents=True)
    (tree / "t" / "test_sleep.py").write_text(SLEEPER)
    pid_file = tmp_path / "grandchild.pid"
    script = QUALIFY_CHILD.format(root=str(ROOT), planted=planted, lean=LEAN,
                                  out=str(tmp_path / "out"), tree=str(tree))
    child = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path,
                             env={**os.environ, "GRANDCHILD_PID_FILE": str(pid_file)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        assert child.poll() is None, child.communicate()[0]
        time.sleep(0.1)
    return child, int(pid_file.read_text())


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda s: s.name)
def test_a_signal_that_ends_qualify_ends_its_running_suites(tmp_path: Path, sig) -> None:
    child, grandchild = _start(tmp_path, planted=False)
    child.send_signal(sig)
    output, _ = child.communicate(timeout=30)
    assert child.returncode == 128 + sig, output
    assert f"[qualify] {sig.name}: killed process group(s) [" in output
    assert _gone_within(grandchild, 10), "the suite's grandchild outlived qualify.py"
    assert not (tmp_path / "out" / "qualification.json").exists(), "an unfinished run left a record"


def test_planted_without_the_handler_the_suite_outlives_qualify(tmp_path: Path) -> None:
    child, grandchild = _start(tmp_path, planted=True)
    try:
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=30)
        assert child.returncode == -signal.SIGTERM
        # The check above would fail here: the grandchild is still running.
        assert not _gone_within(grandchild, 2)
    finally:
        os.killpg(os.getpgid(grandchild), signal.SIGKILL)
    assert _gone_within(grandchild, 10)
