"""The multi tier in a CPU world (docs/contract.md s7, s10, s11), in CI: P processes started by
torchrun, the EP layer's PyTorch paths exchanging through CPU shared memory, every test of
``tests/multi`` but the CUDA-graph ones (the record says so). It proves the exchange protocol,
the launcher and the runner on every change; it runs no kernel."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.harness.qualify_main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("world_size", [2, 4])
def test_the_multi_tier_passes_in_a_cpu_world(tmp_path: Path, world_size: int) -> None:
    out = tmp_path / "out"
    rc = main(["--suite", "multi", "--mode", "cpu", "--world-size", str(world_size),
               "--timeout", "900", "--output-dir", str(out)], python=sys.executable)
    rec = json.loads((out / "qualification.json").read_text())
    suite = rec["suites"][0]
    assert rc == 0, suite["message"]
    assert (suite["mode"], suite["world_size"], suite["backend"]) == ("cpu", world_size, "host")
    assert len(suite["ranks"]) == world_size
    assert all(r["counts"]["passed"] >= 30 for r in suite["ranks"]), suite["ranks"]
    assert "cuda_graphs" in suite["deselected"]
