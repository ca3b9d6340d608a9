"""qualify.py --check-ledger: kernel changes need committed passing GPU records for their hash:
``single`` (and, once the multi tier has tests, ``multi`` and the tier under memcheck and
synccheck) and one ``sanitize`` run per compute-sanitizer tool.

Each test builds a small fake repository in a temp dir (megamoe/ with a kernel
module, docs/qualification/ with records) and checks it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.hashing import hash_group, source_hashes
from tests.harness.ledger import LEDGER_DIR, RECORD_KIND, check_ledger
from tests.harness.qualify_main import main
from tests.harness.suite_run import MULTI_SANITIZE
from tests.suites import MULTI_SANITIZER_TOOLS, SANITIZER_TOOLS

H200 = {"index": 0, "name": "NVIDIA H200", "arch": "sm_90", "total_memory_bytes": 1}


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    (tmp_path / "megamoe" / "staging").mkdir(parents=True)
    (tmp_path / "megamoe" / "__init__.py").write_text("")
    (tmp_path / "megamoe" / "staging" / "route_kernel.py").write_text("KERNEL = 1\n")
    (tmp_path / "megamoe" / "layer.py").write_text("LAYER = 1\n")
    (tmp_path / "megamoe" / "bench").mkdir()
    (tmp_path / "megamoe" / "bench" / "run.py").write_text("BENCH = 1\n")
    (tmp_path / "tests" / "multi").mkdir(parents=True)
    (tmp_path / LEDGER_DIR).mkdir(parents=True)
    return tmp_path


def _suite(entry: str, status: str) -> dict:
    """``"single"``, ``"sanitize:memcheck"`` for a sanitizer run of one tool,
    ``"multi:emulated"`` (``"multi"``: emulated) for a multi run in that world, or
    ``"multi-sanitize:memcheck:cpu"`` (default world emulated) for the tier under a tool."""
    name, _, tool = entry.partition(":")
    if name == MULTI_SANITIZE:  # ``"multi-sanitize:memcheck[:mode]"``: the tier under a tool
        tool, _, mode = tool.partition(":")
        return {"name": name, "status": status, "tool": tool, "mode": mode or "emulated"}
    if name == "multi" or name.endswith("-multi"):  # the multi tier, or a seed suite's part
        return {"name": name, "status": status, "mode": tool or "emulated", "world_size": 2,
                "backend": "torch_symm"}
    return {"name": name, "status": status, **({"tool": tool} if tool else {})}


def record(repo: Path, name: str, *suites: str, status: str = "pass", gpus=(H200,),
           filter: str | None = None, shard: str | None = None,
           tests_digest: str | None = None) -> Path:
    """A record as qualify.py writes it; ``tests_digest`` overrides the test sources' digest
    (a shard run on other test sources)."""
    hashes = {k: v.as_dict() for k, v in source_hashes(repo).items()}
    if tests_digest is not None:
        hashes["tests"] = {**hashes["tests"], "digest": tests_digest}
    rec = {
        "kind": RECORD_KIND,
        "schema": 1,
        "finished_at": f"2026-01-01T00:00:{len(list((repo / LEDGER_DIR).iterdir())):02d}Z",
        "arguments": {"filter": filter, "shard": shard},
        "environment": {"gpus": list(gpus)},
        "suites": [_suite(s, status) for s in suites],
        "source_hashes": hashes,
    }
    path = repo / LEDGER_DIR / name
    path.write_text(json.dumps(rec))
    return path


def sanitized(repo: Path, *, skip: str | None = None) -> None:
    """One passing sanitizer record per tool (but ``skip``), as four qualify.py runs write."""
    for tool in SANITIZER_TOOLS:
        if tool != skip:
            record(repo, f"san-{tool}.json", f"sanitize:{tool}")


def multi_sanitized(repo: Path, *, skip: str | None = None, mode: str = "emulated") -> None:
    """One passing record of the multi tier under each of its tools (but ``skip``)."""
    for tool in MULTI_SANITIZER_TOOLS:
        if tool != skip:
            record(repo, f"msan-{tool}.json", f"{MULTI_SANITIZE}:{tool}:{mode}")


@pytest.mark.parametrize("tool", MULTI_SANITIZER_TOOLS)
def test_the_multi_tier_needs_each_of_its_sanitizer_records(repo: Path, tool: str) -> None:
    (repo / "tests" / "multi" / "test_world.py").write_text("def test_x(): pass\n")
    record(repo, "a.json", "single", "multi")
    sanitized(repo)
    multi_sanitized(repo, skip=tool)
    result = check_ledger(repo)
    assert not result.ok  # the one-process suite's record of the tool (sanitized) is not the tier's
    fails = [line for line in result.lines if "FAIL" in line]
    assert fails == [f"ledger: multi-sanitize {tool}: FAIL: no passing 'multi-sanitize {tool}' "
                     f"record in {LEDGER_DIR}/ for kernel-source digest "
                     f"{hash_group(repo, 'kernel').digest[:16]}"]


def test_a_multi_sanitizer_record_of_a_cpu_world_never_counts(repo: Path) -> None:
    (repo / "tests" / "multi" / "test_world.py").write_text("def test_x(): pass\n")
    record(repo, "a.json", "single", "multi")
    sanitized(repo)
    multi_sanitized(repo, mode="cpu")
    assert not check_ledger(repo).ok
    multi_sanitized(repo)
    assert check_ledger(repo).ok


def test_no_kernels_yet_passes_with_a_line_saying_so(tmp_path: Path) -> None:
    (tmp_path / "megamoe").mkdir()
    (tmp_path / "megamoe" / "layer.py").write_text("x = 1\n")
    result = check_ledger(tmp_path)
    assert result.ok
    assert "no kernel modules yet" in "\n".join(result.lines)


def test_unchanged_kernels_with_passing_single_and_sanitizer_records_pass(repo: Path) -> None:
    record(repo, "a.json", "single")
    sanitized(repo)
    result = check_ledger(repo)
    assert result.ok, result.lines
    text = "\n".join(result.lines)
    assert "single: qualified by docs/qualification/a.json" in text
    for tool in SANITIZER_TOOLS:
        assert f"sanitize {tool}: qualified by docs/qualification/san-{tool}.json" in text


@pytest.mark.parametrize("tool", SANITIZER_TOOLS)
def test_a_missing_sanitizer_record_fails_and_names_the_tool(repo: Path, tool: str) -> None:
    record(repo, "a.json", "single")
    sanitized(repo, skip=tool)
    result = check_ledger(repo)
    assert not result.ok
    assert f"no passing 'sanitize {tool}' record exists at all" in "\n".join(result.lines)


@pytest.mark.parametrize(
    ("entry", "kwargs", "why"),
    [
        ("sanitize:memcheck", {"status": "fail"}, "a failing sanitizer run"),
        ("sanitize:racecheck", {}, "another tool's run"),
        ("sanitize", {}, "a sanitizer run that names no tool"),
        ("sanitize:memcheck", {"gpus": ()}, "a run without a GPU"),
        ("sanitize:memcheck", {"filter": "layer"}, "a filtered run"),
    ],
)
def test_sanitizer_records_that_do_not_vouch_for_the_tool_do_not_count(
        repo: Path, entry: str, kwargs, why) -> None:
    record(repo, "a.json", "single")
    sanitized(repo, skip="memcheck")
    record(repo, "m.json", entry, **kwargs)
    assert not check_ledger(repo).ok, why


def test_a_sanitizer_record_for_older_kernels_names_the_changed_files(repo: Path) -> None:
    sanitized(repo)
    (repo / "megamoe" / "staging" / "route_kernel.py").write_text("KERNEL = 2\n")
    record(repo, "a.json", "single")
    sanitized(repo, skip="racecheck")  # rewritten for the new kernels, but racecheck
    text = "\n".join(check_ledger(repo).lines)
    assert "sanitize racecheck: FAIL" in text and "  M megamoe/staging/route_kernel.py" in text
    assert "single: qualified by" in text


def test_a_changed_kernel_file_fails_and_is_named(repo: Path) -> None:
    record(repo, "a.json", "single")
    (repo / "megamoe" / "staging" / "route_kernel.py").write_text("KERNEL = 2\n")
    (repo / "megamoe" / "new_kernel.py").write_text("NEW = 1\n")
    result = check_ledger(repo)
    text = "\n".join(result.lines)
    assert not result.ok
    assert "no passing 'single' record" in text
    assert "  M megamoe/staging/route_kernel.py" in text
    assert "  A megamoe/new_kernel.py" in text
    assert "megamoe/layer.py" not in text


def test_a_removed_launcher_counts_as_a_kernel_change(repo: Path) -> None:
    record(repo, "a.json", "single")
    (repo / "megamoe" / "layer.py").unlink()
    result = check_ledger(repo)
    assert not result.ok and "  D megamoe/layer.py" in result.lines


def test_benchmark_and_bytecode_changes_do_not_invalidate_the_record(repo: Path) -> None:
    record(repo, "a.json", "single")
    sanitized(repo)
    (repo / "megamoe" / "bench" / "run.py").write_text("BENCH = 2\n")
    (repo / "megamoe" / "__pycache__").mkdir()
    (repo / "megamoe" / "__pycache__" / "layer.cpython-311.pyc").write_bytes(b"\0")
    assert check_ledger(repo).ok


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"status": "fail"}, "a failing record"),
        ({"gpus": ()}, "a record made without a GPU"),
        ({"filter": "sanitizer"}, "a filtered run"),
    ],
)
def test_records_that_do_not_vouch_for_the_suite_do_not_count(repo: Path, kwargs, why) -> None:
    record(repo, "a.json", "single", **kwargs)
    assert not check_ledger(repo).ok, why


def test_a_record_of_another_suite_does_not_count(repo: Path) -> None:
    record(repo, "a.json", "host")
    assert not check_ledger(repo).ok


def test_once_multi_tests_exist_a_passing_multi_record_is_required_too(repo: Path) -> None:
    (repo / "tests" / "multi" / "test_world.py").write_text("def test_x(): pass\n")
    record(repo, "a.json", "single")
    sanitized(repo)
    result = check_ledger(repo)
    assert not result.ok
    assert "no passing 'multi' record" in "\n".join(result.lines)
    record(repo, "b.json", "multi")
    result = check_ledger(repo)
    assert not result.ok  # the tier under its sanitizers is still missing
    assert all(f"no passing 'multi-sanitize {t}' record" in "\n".join(result.lines)
               for t in MULTI_SANITIZER_TOOLS)
    multi_sanitized(repo)
    result = check_ledger(repo)
    assert result.ok
    text = "\n".join(result.lines)
    assert "proves no cross-GPU memory ordering" in text
    assert "no real-world record for this digest yet" in text
    record(repo, "c.json", "multi:real")
    text = "\n".join(check_ledger(repo).lines)
    assert "(real, P = 2" in text and "emulated on one GPU" in text  # both listed
    assert "no real-world record" not in text


def test_a_cpu_world_multi_record_never_vouches_for_kernels(repo: Path) -> None:
    (repo / "tests" / "multi" / "test_world.py").write_text("def test_x(): pass\n")
    record(repo, "a.json", "single")
    sanitized(repo)
    record(repo, "b.json", "multi:cpu")
    result = check_ledger(repo)
    assert not result.ok and "no passing 'multi' record" in "\n".join(result.lines)


def test_the_change_list_compares_with_the_latest_qualified_record(repo: Path) -> None:
    record(repo, "a.json", "single")
    (repo / "megamoe" / "layer.py").write_text("LAYER = 2\n")
    record(repo, "b.json", "single")
    (repo / "megamoe" / "staging" / "route_kernel.py").write_text("KERNEL = 3\n")
    lines = check_ledger(repo).lines
    assert "  M megamoe/staging/route_kernel.py" in lines
    assert "  M megamoe/layer.py" not in lines
    assert any("b.json" in line for line in lines)


def test_check_ledger_cli_exit_codes(repo: Path, capsys) -> None:
    assert main(["--check-ledger"], root=repo) == 1
    assert "no passing 'single' record exists at all" in capsys.readouterr().out
    record(repo, "a.json", "single")
    assert main(["--check-ledger"], root=repo) == 1  # the sanitizer records are missing
    sanitized(repo)
    assert main(["--check-ledger"], root=repo) == 0


def test_kernel_digest_changes_with_any_byte(repo: Path) -> None:
    before = hash_group(repo, "kernel").digest
    path = repo / "megamoe" / "layer.py"
    path.write_text(path.read_text() + " ")
    assert hash_group(repo, "kernel").digest != before


def test_passing_records_of_every_shard_qualify_the_suite(repo: Path) -> None:
    sanitized(repo)
    record(repo, "s1.json", "single", shard="1/3")
    record(repo, "s2.json", "single", shard="2/3")
    assert not check_ledger(repo).ok  # shard 3 of 3 is missing
    record(repo, "s3.json", "single", shard="3/3")
    result = check_ledger(repo)
    assert result.ok, result.lines
    assert ("ledger: single: qualified by 3 shards: docs/qualification/s1.json, "
            "docs/qualification/s2.json, docs/qualification/s3.json") in result.lines


def test_a_sharded_gpu_run_gives_its_single_shard_and_its_whole_sanitizer_tools(
        repo: Path) -> None:
    """``qualify.py --suite gpu --shard 1/2 --sanitizers-beside``: the shard splits single
    only, so its sanitizer tools count as whole runs and its single as shard 1 of 2."""
    tools = [f"sanitize:{tool}" for tool in SANITIZER_TOOLS]
    record(repo, "g1.json", "single", *tools, shard="1/2")
    text = "\n".join(check_ledger(repo).lines)
    assert "no passing 'single' record exists at all" in text  # one shard is not the suite
    for tool in SANITIZER_TOOLS:
        assert f"ledger: sanitize {tool}: qualified" in text, text
    record(repo, "s2.json", "single", shard="2/2")
    result = check_ledger(repo)
    assert result.ok, result.lines


def test_a_sharded_gpu_runs_failing_tool_does_not_count(repo: Path) -> None:
    tools = [f"sanitize:{tool}" for tool in SANITIZER_TOOLS[1:]]
    record(repo, "g1.json", "single", *tools, shard="1/2")
    record(repo, "g1-fail.json", f"sanitize:{SANITIZER_TOOLS[0]}", status="fail", shard="1/2")
    record(repo, "s2.json", "single", shard="2/2")
    result = check_ledger(repo)
    assert not result.ok
    assert [line for line in result.lines if "FAIL" in line and "sanitize" in line] == [
        f"ledger: sanitize {SANITIZER_TOOLS[0]}: FAIL: no passing 'sanitize "
        f"{SANITIZER_TOOLS[0]}' record in {LEDGER_DIR}/ for kernel-source digest "
        f"{hash_group(repo, 'kernel').digest[:16]}"], result.lines


@pytest.mark.parametrize(
    ("second", "why"),
    [
        ({"shard": "2/3"}, "shards of different counts are not one set"),
        ({"shard": "2/2", "status": "fail"}, "a failing shard"),
        ({"shard": "2/2", "filter": "layer"}, "a filtered shard"),
        ({"shard": "2/2", "tests_digest": "other"}, "a shard of other test sources"),
        ({"shard": "1/2"}, "the same shard twice"),
        ({"shard": "2/2", "gpus": ()}, "a shard run without a GPU"),
    ],
)
def test_an_incomplete_or_mixed_shard_set_does_not_count(repo: Path, second: dict,
                                                         why: str) -> None:
    sanitized(repo)
    record(repo, "s1.json", "single", shard="1/2")
    record(repo, "s2.json", "single", **second)
    assert not check_ledger(repo).ok, why


def test_a_shard_alone_never_counts_as_the_whole_suite(repo: Path) -> None:
    sanitized(repo)
    record(repo, "s1.json", "single", shard="1/2")
    text = "\n".join(check_ledger(repo).lines)
    assert "no passing 'single' record exists at all" in text
    assert "passing shards of this digest: 1/2 (every shard of one count is needed)" in text


def test_shards_of_older_kernels_do_not_count(repo: Path) -> None:
    sanitized(repo)
    record(repo, "s1.json", "single", shard="1/2")
    record(repo, "s2.json", "single", shard="2/2")
    (repo / "megamoe" / "staging" / "route_kernel.py").write_text("KERNEL = 2\n")
    sanitized(repo)
    assert not check_ledger(repo).ok


SEED_PARTS = ("mega_sm107-single", "mega_sm107-multi",
              *(f"mega_sm107-sanitize:{t}" for t in SANITIZER_TOOLS))


def _seed_line(repo: Path, suite: str = "mega_sm107") -> str:
    lines = [ln for ln in check_ledger(repo).lines if ln.startswith(f"ledger: seed suite {suite}:")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_seed_suite_run_in_parts_is_qualified_once_every_part_passes(repo: Path) -> None:
    record(repo, "a.json", "single")
    sanitized(repo)
    record(repo, "p1.json", *SEED_PARTS[:2])
    line = _seed_line(repo)
    assert "not qualified" in line and "mega_sm107-single," not in line
    assert all(f"mega_sm107-sanitize {t}" in line for t in SANITIZER_TOOLS)
    assert check_ledger(repo).ok  # information only: no kernel change needs a seed suite
    record(repo, "p2.json", *SEED_PARTS[2:])
    assert _seed_line(repo) == (f"ledger: seed suite mega_sm107: qualified by {LEDGER_DIR}/p1.json, "
                                f"{LEDGER_DIR}/p2.json")
    assert "not qualified" in _seed_line(repo, "mega_sm90_mxfp4")


@pytest.mark.parametrize(("kwargs", "missing"), [
    ({"status": "fail"}, "mega_sm107-single"),
    ({"filter": "layer"}, "mega_sm107-single"),
    ({"gpus": ()}, "mega_sm107-single"),
])
def test_seed_parts_that_do_not_vouch_do_not_count(repo: Path, kwargs, missing) -> None:
    record(repo, "p.json", *SEED_PARTS, **kwargs)
    assert "not qualified" in _seed_line(repo) and missing in _seed_line(repo)


def test_a_seed_suite_multi_part_in_a_cpu_world_or_on_older_kernels_does_not_count(
        repo: Path) -> None:
    record(repo, "p.json", *(p if p != "mega_sm107-multi" else "mega_sm107-multi:cpu"
                             for p in SEED_PARTS))
    line = _seed_line(repo)
    assert "not qualified" in line and "mega_sm107-multi" in line and "single" not in line
    record(repo, "q.json", *SEED_PARTS)
    assert "qualified by" in _seed_line(repo)
    (repo / "megamoe" / "staging" / "route_kernel.py").write_text("KERNEL = 2\n")
    assert "not qualified" in _seed_line(repo)


def test_seed_parts_count_together_only_on_one_version_of_the_tests(repo: Path) -> None:
    record(repo, "p1.json", *SEED_PARTS[:2], tests_digest="old-tests")
    record(repo, "p2.json", *SEED_PARTS[2:])
    line = _seed_line(repo)
    assert "not qualified" in line and "mega_sm107-single" in line  # newest tests: p2 only
    record(repo, "p3.json", *SEED_PARTS[:2])
    assert _seed_line(repo).endswith(f"{LEDGER_DIR}/p2.json, {LEDGER_DIR}/p3.json")


def test_the_change_list_compares_with_the_latest_digest_qualified_in_shards(
        repo: Path) -> None:
    """A complete shard set qualifies its digest, so the files named as changed are those
    since that digest, not since the last whole single record before it."""
    record(repo, "a.json", "single")
    (repo / "megamoe" / "layer.py").write_text("LAYER = 2\n")
    record(repo, "b1.json", "single", shard="1/2")
    record(repo, "b2.json", "single", shard="2/2")
    (repo / "megamoe" / "staging" / "route_kernel.py").write_text("KERNEL = 3\n")
    record(repo, "c1.json", "single", shard="1/2")  # an incomplete set qualifies nothing
    (repo / "megamoe" / "staging" / "route_kernel.py").write_text("KERNEL = 4\n")
    lines = check_ledger(repo).lines
    assert "  M megamoe/staging/route_kernel.py" in lines
    assert "  M megamoe/layer.py" not in lines, lines
    assert any("last qualified digest" in line and "b2.json" in line for line in lines), lines
