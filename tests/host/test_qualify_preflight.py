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
from tests.harness.qualify_main import EXIT_PREFLIGHT, main, planned_runs, preflight
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


def test_real_multi_needs_one_gpu_per_rank() -> None:
    check = check_gpus("multi", [H200], 4)
    assert not check.ok and "needs 4" in check.detail
    args = parse_args(["--suite", "multi", "--world-size", "4", "--mode", "real",
                       "--output-dir", "x"])
    names = {c.name for c in preflight(args, planned_runs(args), [H200], sys.executable)}
    assert "torchrun" in names


def test_emulated_multi_needs_one_gpu_and_no_torchrun() -> None:
    args = parse_args(["--suite", "multi", "--world-size", "8", "--mode", "emulated",
                       "--output-dir", "x"])
    checks = preflight(args, planned_runs(args), [H200], sys.executable)
    assert all(c.ok for c in checks), checks
    assert "torchrun" not in {c.name for c in checks}


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
