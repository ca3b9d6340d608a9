"""The multi suite's runner (docs/contract.md s11; ``tests.harness.worlds``, ``run_multi``): every
mode starts one process per rank with torchrun (the launcher of every world), each rank
knows its world and writes its own JUnit report and exit code; the suite passes only when
every rank passes and every rank ran the same tests; one failing rank fails the suite
without cutting the others' reports short; the group timeout kills every rank and records
TIMEOUT with the world; a world the machine cannot serve is refused before any test runs.
Runs on the CPU over a throwaway tree (the GPU preflight is given a stand-in GPU list)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.harness.qualify_main import main
from tests.host.scratch_tree import import_this_checkout, write_tree
from tests.suites import Suite

H200 = {"index": 0, "name": "stand-in", "arch": "sm_90", "total_memory_bytes": 1}
LEAN = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:cacheprovider")


def throwaway_multi_suites() -> dict[str, Suite]:
    """The ``multi`` suite over the throwaway tree's ``m/`` (the tests of ``tree``), lean."""
    return {"multi": Suite("multi", "throwaway", paths=("m",), markexpr="not nothing",
                           extra_args=LEAN)}
WORLD_TEST = '''\
import os, time
import pytest

def test_world():
    assert os.environ["MEGAMOE_EP_MODE"] == os.environ["EXPECT_MODE"]
    assert os.environ["MEGAMOE_EP_BACKEND"] == os.environ["EXPECT_BACKEND"]
    assert os.environ["MEGAMOE_WORLD_SIZE"] == "2" == os.environ["WORLD_SIZE"]
    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    with open(os.path.join(os.environ["PIDS_DIR"], str(os.getpid())), "w") as f:
        f.write(os.environ["RANK"])

@pytest.mark.cuda_graphs
def test_graph():
    assert os.environ["MEGAMOE_EP_MODE"] != "cpu", "a CPU world must not select this test"

def test_plant():
    plant = os.environ.get("PLANT", "")
    if plant == "fail-rank-1":
        assert os.environ["RANK"] != "1", "rank 1 fails"
    if plant == "hang":
        time.sleep(600)
'''
EXTRA_TEST = '''\
def test_only_on_rank_1():
    pass
'''


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = write_tree(tmp_path / "tree", {
        "m/test_world.py": WORLD_TEST,
        "m/conftest.py": "import os\n"
                         "def pytest_ignore_collect(collection_path, config):\n"
                         "    return (collection_path.name == 'test_extra.py'\n"
                         "            and os.environ.get('RANK') != '1')\n"})
    (tmp_path / "pids").mkdir()
    monkeypatch.setenv("PIDS_DIR", str(tmp_path / "pids"))
    import_this_checkout(monkeypatch)
    return root


def run(tree: Path, monkeypatch, *args: str, gpus=(H200,), backend: str,
        mode: str | None, timeout: float = 240) -> tuple[int, dict]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EXPECT_MODE", mode or "")
    monkeypatch.setenv("EXPECT_BACKEND", backend)
    suites = throwaway_multi_suites()
    out = tree.parent / "out"
    argv = ["--suite", "multi", "--world-size", "2", "--output-dir", str(out),
            "--timeout", str(timeout), *args]
    if mode is not None:
        argv += ["--mode", mode]
    rc = main(argv, root=tree, suites=suites, python=sys.executable,
              environment={"gpus": list(gpus)})
    return rc, json.loads((out / "qualification.json").read_text())


def ranks_that_ran(tree: Path) -> list[str]:
    return sorted(p.read_text() for p in (tree.parent / "pids").iterdir())


@pytest.mark.contract("s11.emulated-world")
@pytest.mark.parametrize(("mode", "backend"), [("emulated", "torch_symm"), ("cpu", "host")])
def test_every_mode_runs_a_process_per_rank_with_its_own_report(tree, monkeypatch, mode,
                                                                 backend) -> None:
    if mode == "cpu":
        monkeypatch.setenv("PLANT", "")
    rc, rec = run(tree, monkeypatch, backend=backend, mode=mode)
    suite = rec["suites"][0]
    assert rc == 0, suite["message"]
    cmd = suite["commands"][0]
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node=2" in cmd
    assert ranks_that_ran(tree) == ["0", "1"]
    assert (suite["mode"], suite["world_size"], suite["backend"]) == (mode, 2, backend)
    assert suite["junit"] == ["multi.rank0.junit.xml", "multi.rank1.junit.xml"]
    assert [r["returncode"] for r in suite["ranks"]] == [0, 0]
    per_rank = 2 if mode == "cpu" else 3
    assert suite["counts"]["passed"] == 2 * per_rank
    # each rank's own time profile (its tests run beside the other ranks', so never summed)
    assert [r["time_profile"]["tests"] for r in suite["ranks"]] == [per_rank, per_rank]
    if mode == "cpu":
        assert "cuda_graphs" in suite["deselected"] and "runs no kernel" in suite["world"]
    else:
        assert "proves no cross-GPU memory ordering" in suite["world"]


def test_one_failing_rank_fails_the_suite_and_the_other_still_reports(tree, monkeypatch) -> None:
    monkeypatch.setenv("PLANT", "fail-rank-1")
    rc, rec = run(tree, monkeypatch, backend="torch_symm", mode="emulated")
    suite = rec["suites"][0]
    assert rc == 1 and suite["status"] == "fail"
    r0, r1 = suite["ranks"]
    assert (r0["status"], r1["status"]) == ("pass", "fail")
    assert r1["returncode"] == 1 and "test_plant" in r1["message"]
    assert r0["counts"]["passed"] == 3  # rank 0's report was not cut short


def test_ranks_that_collect_different_tests_fail_the_suite(tree, monkeypatch) -> None:
    (tree / "m" / "test_extra.py").write_text(EXTRA_TEST)
    rc, rec = run(tree, monkeypatch, backend="torch_symm", mode="emulated")
    suite = rec["suites"][0]
    assert rc == 1, suite["message"]
    assert "ranks collected different tests" in suite["message"]
    assert "test_only_on_rank_1" in suite["message"]


def test_the_group_timeout_kills_every_rank_and_records_the_world(tree, monkeypatch) -> None:
    monkeypatch.setenv("PLANT", "hang")
    rc, rec = run(tree, monkeypatch, backend="host", mode="cpu", timeout=30)
    suite = rec["suites"][0]
    assert rc == 124 and suite["status"] == "timeout" and rec["status"] == "timeout"
    assert (suite["mode"], suite["world_size"]) == ("cpu", 2)
    assert all(r["status"] == "timeout" for r in suite["ranks"])


@pytest.mark.contract("s11.unservable-world-refused")
def test_without_a_mode_a_machine_without_gpus_is_refused_before_any_test(tree,
                                                                          monkeypatch) -> None:
    rc, rec = run(tree, monkeypatch, gpus=(), backend="", mode=None)
    assert rc == 2 and rec["status"] == "preflight-failed" and rec["suites"] == []
    world = next(c for c in rec["preflight"] if c["name"] == "multi: world")
    assert not world["ok"] and "--mode cpu" in world["detail"]
    assert not (tree.parent / "pids").exists() or ranks_that_ran(tree) == []


def test_without_a_mode_one_gpu_serves_an_emulated_world(tree, monkeypatch) -> None:
    rc, rec = run(tree, monkeypatch, backend="torch_symm", mode=None)
    assert rec["arguments"]["mode"] == "emulated", rec["preflight"]
    assert rc == 1  # EXPECT_MODE is empty here, so test_world fails on every rank
    assert [r["returncode"] for r in rec["suites"][0]["ranks"]] == [1, 1]
