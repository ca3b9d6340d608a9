"""Multi suite: real mode starts one process per rank with torch.distributed.run (per-rank
JUnit), emulated mode runs one process; both tell the tests their world. Runs on the CPU
over a throwaway tree (the GPU preflight is given a stand-in GPU list)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.harness.qualify_main import main
from tests.suites import Suite

ROOT = Path(__file__).resolve().parents[2]
FAKE_GPUS = [{"index": i, "name": "stand-in", "arch": "sm_90", "total_memory_bytes": 1}
             for i in range(2)]
LEAN = ("-p", "no:xdist", "-p", "no:hypothesispytest")
WORLD_TEST = '''\
import os
def test_world():
    assert os.environ["MEGAMOE_EP_MODE"] == os.environ["EXPECT_MODE"]
    assert os.environ["MEGAMOE_WORLD_SIZE"] == "2"
    with open(os.path.join(os.environ["PIDS_DIR"], str(os.getpid())), "w") as f:
        f.write(os.environ.get("RANK", "none"))
'''


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "tree"
    (root / "m").mkdir(parents=True)
    (root / "m" / "test_world.py").write_text(WORLD_TEST)
    (tmp_path / "pids").mkdir()
    monkeypatch.setenv("PIDS_DIR", str(tmp_path / "pids"))
    # rank_pytest lives in this repository; the throwaway tree must still find it.
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return root


def run_multi(tree: Path, mode: str, monkeypatch) -> tuple[int, dict]:
    monkeypatch.setenv("EXPECT_MODE", mode)
    suites = {"multi": Suite("multi", "throwaway", paths=("m",), extra_args=LEAN)}
    out = tree.parent / "out"
    rc = main(["--suite", "multi", "--mode", mode, "--world-size", "2", "--output-dir", str(out),
               "--timeout", "240"],
              root=tree, suites=suites, python=sys.executable, environment={"gpus": FAKE_GPUS})
    return rc, json.loads((out / "qualification.json").read_text())


def test_emulated_mode_runs_one_process_that_knows_its_world(tree, monkeypatch) -> None:
    rc, rec = run_multi(tree, "emulated", monkeypatch)
    suite = rec["suites"][0]
    assert rc == 0, suite["message"]
    assert (suite["mode"], suite["world_size"]) == ("emulated", 2)
    assert len(list((tree.parent / "pids").iterdir())) == 1
    assert "torch.distributed.run" not in suite["commands"][0]


@pytest.mark.slow  # torchrun start-up: ~20 s on the CI machine; runs in the host suite
def test_real_mode_runs_one_process_per_rank_with_per_rank_junit(tree, monkeypatch) -> None:
    rc, rec = run_multi(tree, "real", monkeypatch)
    suite = rec["suites"][0]
    assert rc == 0, suite["message"]
    cmd = suite["commands"][0]
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node=2" in cmd
    ranks = sorted(p.read_text() for p in (tree.parent / "pids").iterdir())
    assert ranks == ["0", "1"]
    assert [r["rank"] for r in suite["ranks"]] == [0, 1]
    assert all(r["status"] == "pass" for r in suite["ranks"])
    assert suite["junit"] == ["multi.rank0.junit.xml", "multi.rank1.junit.xml"]
    assert suite["counts"]["passed"] == 2
