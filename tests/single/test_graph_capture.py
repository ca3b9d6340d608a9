"""``megamoe.graphs.capture`` on the GPU (docs/contract.md s9): a CUDA graph left to Python's
cyclic garbage collector and finalized inside another capture invalidates that capture
under plain ``torch.cuda.graph``; under ``capture`` it is finalized before the capture
begins. Each arm runs in its own process (an invalidated capture must not touch the test
process's CUDA state); ``gc.collect()`` inside the block stands for an automatic
collection, which may happen at any allocation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import gc, sys
import torch
from megamoe.graphs import capture

gc.disable()  # the cycle below survives until a collection we control
x = torch.zeros(4, device="cuda")


def leave_a_graph_in_a_cycle():
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        x.add_(1)
    holder = {"graph": g}
    holder["self"] = holder


leave_a_graph_in_a_cycle()
y = torch.zeros(4, device="cuda")
g2 = torch.cuda.CUDAGraph()
ctx = torch.cuda.graph(g2) if sys.argv[1] == "plain" else capture(g2)
try:
    with ctx:
        y.add_(1)
        gc.collect()
        y.add_(1)
    g2.replay()
    torch.cuda.synchronize()
    print("OK", y.tolist())
except Exception as exc:  # the invalidated capture
    print("FAILED", type(exc).__name__, str(exc).splitlines()[0])
"""


def _arm(mode: str) -> str:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.usefixtures("cuda_device")
def test_a_collected_graph_invalidates_a_plain_capture() -> None:
    """The failure ``capture`` exists for (the planted bug: no collection before capture)."""
    line = _arm("plain")
    assert line.startswith("FAILED"), line


@pytest.mark.usefixtures("cuda_device")
def test_capture_collects_first_and_the_graph_replays() -> None:
    line = _arm("capture")
    assert line == "OK [2.0, 2.0, 2.0, 2.0]", line
