"""The seeds' named suites (``tests.suites.SEED_SUITES``: ``mega_sm107``, ``mega_sm90_mxfp4``):
each item of each suite is carried by at least one test (or is pending with its reason, and
a pending item that gains a test must leave the list); a test names only items that exist;
``./run_tests.sh`` and ``qualify.py`` know the suites, plan their three parts and refuse a
machine without a GPU before anything runs, with a reason, never "unknown suite"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import seed_suite
from tests.harness.cli import parse_args
from tests.harness.qualify_main import EXIT_PREFLIGHT, main, planned_runs, preflight, resolve_args
from tests.suites import SANITIZER_TOOLS, SEED_SUITE_PATHS, SEED_SUITES, SUITES

ROOT = Path(__file__).resolve().parents[2]
H200 = {"index": 0, "name": "NVIDIA H200", "arch": "sm_90", "total_memory_bytes": 1}


@pytest.fixture(scope="module")
def seed_map(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[str]]]:
    """``{suite: {item: [node ids]}}`` from a collect-only run over the suites' paths."""
    out = tmp_path_factory.mktemp("seed") / "map.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "tests.harness.seed_suite", *SEED_SUITE_PATHS],
        cwd=ROOT, env={**os.environ, seed_suite.MAP_ENV: str(out)}, capture_output=True,
        text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def items_without_tests(found: dict[str, dict[str, list[str]]]) -> list[str]:
    return [f"{s}:{i}" for s, suite in SEED_SUITES.items() for i in suite.items
            if not found.get(s, {}).get(i) and (s, i) not in seed_suite.PENDING]


def unknown_items(found: dict[str, dict[str, list[str]]]) -> list[str]:
    return [f"{s}:{i}" for s, items in found.items() for i in items
            if i not in SEED_SUITES[s].items]


def test_every_item_of_every_seed_suite_is_carried_by_a_test(seed_map) -> None:
    assert items_without_tests(seed_map) == []
    assert unknown_items(seed_map) == []
    stale = [f"{s}:{i}" for s, i in seed_map_pending() if seed_map.get(s, {}).get(i)]
    assert stale == [], f"pending items that have tests now: drop them from PENDING: {stale}"


def seed_map_pending() -> list[tuple[str, str]]:
    return sorted(seed_suite.PENDING)


def test_the_check_reports_an_item_without_a_test_and_an_unknown_item() -> None:
    found = {"mega_sm107": {"masked-routes": ["t"], "no-such-item": ["t"]},
             "mega_sm90_mxfp4": {}}
    missing = items_without_tests(found)
    assert "mega_sm107:graph-replay" in missing and "mega_sm107:masked-routes" not in missing
    assert not [f"{s}:{i}" for s, i in seed_suite.PENDING if f"{s}:{i}" in missing]  # pending
    assert "mega_sm90_mxfp4:tiny-values" in missing
    assert unknown_items(found) == ["mega_sm107:no-such-item"]


def test_the_suites_run_through_their_runner_and_are_listed() -> None:
    for name in SEED_SUITES:
        suite = SUITES[name]
        assert suite.module == "tests.harness.seed_suite" and suite.needs_gpu
        assert suite.command("py", ["--world-size", "4"]) == [
            "py", "-m", "tests.harness.seed_suite", name, "--world-size", "4"]
    listing = subprocess.run(["./run_tests.sh", "--list"], cwd=ROOT, capture_output=True,
                             text=True, timeout=600, check=False).stdout
    assert "mega_sm107" in listing and "mega_sm90_mxfp4" in listing


def test_each_part_selects_the_suite_marker_in_its_tier() -> None:
    single = seed_suite.single_part("mega_sm107")
    assert single.markexpr == "mega_sm107 and gpu and not multirank and not sanitizer"
    assert seed_suite.multi_part("mega_sm107").markexpr == "mega_sm107 and multirank"
    cov = seed_suite.sanitize_part("mega_sm90_mxfp4", "memcheck")
    assert cov.markexpr == "sanitizer and mega_sm90_mxfp4" and cov.tool == "memcheck"
    assert seed_suite.plan("mega_sm107") == [
        ("mega_sm107-single", None), ("mega_sm107-multi", None),
        *[("mega_sm107-sanitize", t) for t in SANITIZER_TOOLS]]
    assert seed_suite.split_part("mega_sm107-multi") == ("mega_sm107", "multi")
    assert seed_suite.split_part("multi") is None
    assert [seed_suite.part_kind(n) for n in ("mega_sm107-multi", "mega_sm90_mxfp4-sanitize",
                                              "multi", "sanitize", "multi-sanitize")] == [
        "multi", "sanitize", "multi", "sanitize", "multi-sanitize"]


def test_run_tests_sh_refuses_a_seed_suite_on_a_machine_without_a_gpu() -> None:
    proc = subprocess.run(["./run_tests.sh", "mega_sm107"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "refused: no CUDA GPU" in proc.stderr and "unknown suite" not in proc.stderr


def test_qualify_plans_the_three_parts_and_refuses_without_a_gpu(tmp_path, capsys) -> None:
    args = resolve_args(parse_args(["--suite", "mega_sm90_mxfp4", "--output-dir", "x"]), [H200])
    assert [n for n, _ in planned_runs(args)] == [
        "mega_sm90_mxfp4-single", "mega_sm90_mxfp4-multi", *["mega_sm90_mxfp4-sanitize"] * 4]
    names = {c.name for c in preflight(args, planned_runs(args), [H200], sys.executable)}
    assert {"mega_sm90_mxfp4-single: gpus", "multi: world", "compute-sanitizer"} <= names
    rc = main(["--suite", "mega_sm107", "--output-dir", str(tmp_path)], root=tmp_path,
              python=sys.executable, environment={"gpus": []})
    assert rc == EXIT_PREFLIGHT
    rec = json.loads((tmp_path / "qualification.json").read_text())
    assert rec["status"] == "preflight-failed"
    err = capsys.readouterr().err
    assert "suite mega_sm107-single needs 1 CUDA GPU(s), found 0" in err


def test_qualify_runs_only_the_parts_asked_for_in_suite_order() -> None:
    args = resolve_args(parse_args(["--suite", "mega_sm107", "--parts", "sanitize,single",
                                    "--sanitizer-tool", "memcheck", "--output-dir", "x"]), [H200])
    assert args.parts == ("single", "sanitize") and args.as_dict()["parts"] == ["single",
                                                                              "sanitize"]
    assert planned_runs(args) == [("mega_sm107-single", None), ("mega_sm107-sanitize", "memcheck")]
    names = {c.name for c in preflight(args, planned_runs(args), [H200], sys.executable)}
    assert "multi: world" not in names  # the multi part is not run: its world is not checked


@pytest.mark.parametrize(("argv", "why"), [
    (["--suite", "single", "--parts", "single"], "--parts: only for a seed suite"),
    (["--suite", "mega_sm107", "--parts", "single,graph"], "expected some of single, multi"),
    (["--suite", "mega_sm107", "--parts", "multi,multi"], "each once"),
    (["--suite", "mega_sm107", "--parts", ","], "expected some of"),
])
def test_qualify_refuses_parts_it_cannot_run(argv, why, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args([*argv, "--output-dir", "x"])
    assert exc.value.code == 2 and why in capsys.readouterr().err
