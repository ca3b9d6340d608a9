"""Preflight refuses clearly and records why: --require-arch, GPU count/arch, CuTe DSL, torchrun."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.harness.cli import parse_args
from tests.harness.preflight import (
    check_cute_dsl,
    check_gpus,
    check_require_arch,
    check_torchrun,
)
from tests.harness.qualify_main import EXIT_PREFLIGHT, main, planned_runs, preflight, resolve_args
from tests.suites import SANITIZER_TOOLS

H200 = {"index": 0, "name": "NVIDIA H200", "arch": "sm_90", "total_memory_bytes": 1}
A100 = {"index": 0, "name": "NVIDIA A100", "arch": "sm_80", "total_memory_bytes": 1}


def refused(tmp_path: Path, argv: list[str], gpus: list[dict], capsys) -> tuple[dict, str]:
    rc = main([*argv, "--output-dir", str(tmp_path)], root=tmp_path, python=sys.executable,
              environment={"gpus": gpus})
    assert rc == EXIT_PREFLIGHT
    rec = json.loads((tmp_path / "qualification.json").read_text())
    assert rec["status"] == "preflight-failed" and rec["suites"] == []
    return rec, capsys.readouterr().err


def test_require_arch_refuses_a_machine_without_a_gpu(tmp_path, capsys) -> None:
    rec, err = refused(tmp_path, ["--suite", "host", "--require-arch", "sm_90"], [], capsys)
    assert "--require-arch sm_90: this machine has no CUDA GPU" in err
    (check,) = [c for c in rec["preflight"] if c["name"] == "require-arch"]
    assert not check["ok"] and "refusing to run" in check["detail"]


def test_require_arch_refuses_another_arch_and_names_it(tmp_path, capsys) -> None:
    _, err = refused(tmp_path, ["--suite", "host", "--require-arch", "sm_90"], [A100], capsys)
    assert "found sm_80 (NVIDIA A100)" in err


def test_require_arch_accepts_the_arch_specific_spelling() -> None:
    assert check_require_arch("sm_90a", [H200]).ok


def test_gpu_suite_without_a_gpu_is_refused_with_the_count(tmp_path, capsys) -> None:
    _, err = refused(tmp_path, ["--suite", "single"], [], capsys)
    assert "suite single needs 1 CUDA GPU(s), found 0" in err


def _multi_checks(mode: str | None, world_size: int, gpus: list[dict]) -> dict[str, object]:
    argv = ["--suite", "multi", "--world-size", str(world_size), "--output-dir", "x"]
    args = parse_args([*argv, "--mode", mode] if mode else argv)
    args = resolve_args(args, gpus)
    return {c.name: c for c in preflight(args, planned_runs(args), gpus, sys.executable)}


@pytest.mark.contract("s11.real-world", "s11.unservable-world-refused")
def test_real_multi_needs_one_gpu_per_rank_and_torchrun() -> None:
    checks = _multi_checks("real", 4, [H200])
    world = checks["multi: world"]
    assert not world.ok and "needs 4 sm_90 GPU(s), found 1" in world.detail
    assert checks["torchrun"].ok


@pytest.mark.contract("s11.emulated-world")
def test_emulated_multi_needs_one_gpu_and_the_same_launcher() -> None:
    checks = _multi_checks("emulated", 8, [H200])
    assert all(c.ok for c in checks.values()), checks
    assert "proves no cross-GPU memory ordering" in checks["multi: world"].detail
    assert not _multi_checks("emulated", 2, [A100])["multi: world"].ok


def test_cpu_multi_needs_no_gpu_and_says_it_runs_no_kernel() -> None:
    checks = _multi_checks("cpu", 4, [])
    assert all(c.ok for c in checks.values()), checks
    assert "runs no kernel" in checks["multi: world"].detail


@pytest.mark.contract("s11.real-world", "s11.unservable-world-refused")
def test_without_a_mode_the_machine_chooses_or_refuses() -> None:
    assert resolve_args(parse_args(["--suite", "multi", "--world-size", "2", "--output-dir",
                                    "x"]), [H200, H200]).mode == "real"
    assert resolve_args(parse_args(["--suite", "multi", "--world-size", "4", "--output-dir",
                                    "x"]), [H200, H200]).mode == "emulated"
    refused = _multi_checks(None, 2, [])["multi: world"]
    assert not refused.ok and "--mode cpu" in refused.detail


def test_a_backend_that_cannot_serve_the_mode_is_refused_at_parse_time() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--suite", "multi", "--mode", "cpu", "--backend", "nvshmem",
                    "--output-dir", "x"])


def test_gpu_suites_refuse_a_gpu_the_kernels_cannot_run_on() -> None:
    check = check_gpus("single", [A100], 1)
    assert not check.ok and "sm_90" in check.detail


def test_cute_dsl_import_failure_is_reported() -> None:
    check = check_cute_dsl("/bin/false")
    assert not check.ok and "import cutlass.cute failed" in check.detail
    assert check_cute_dsl(sys.executable).ok


def test_torchrun_is_found_in_this_torch() -> None:
    assert check_torchrun().ok


def test_sanitize_needs_a_tool_and_all_runs_every_tool() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--suite", "sanitize", "--output-dir", "x"])
    args = parse_args(["--suite", "all", "--output-dir", "x"])
    assert planned_runs(args)[-4:] == [("sanitize", t) for t in SANITIZER_TOOLS]


def test_the_gpu_suite_is_single_then_every_sanitizer_tool() -> None:
    args = parse_args(["--suite", "gpu", "--output-dir", "x"])
    assert planned_runs(args) == [("single", None)] + [("sanitize", t) for t in SANITIZER_TOOLS]
    one = parse_args(["--suite", "gpu", "--sanitizer-tool", "racecheck", "--output-dir", "x"])
    assert planned_runs(one) == [("single", None), ("sanitize", "racecheck")]


def test_output_dir_and_suite_are_required_unless_checking_the_ledger() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--suite", "host"])
    with pytest.raises(SystemExit):
        parse_args(["--output-dir", "x"])
    assert parse_args(["--check-ledger"]).check_ledger
