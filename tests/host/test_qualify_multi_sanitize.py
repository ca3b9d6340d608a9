"""The multi tier under compute-sanitizer (``qualify.py --suite multi --sanitizer-tool T``):
the tool's planted self-test must be caught in the same run, then every rank's process runs
the tier's designated cases (marker ``sanitizer``) under the tool, logging to its own file,
and a rank passes only with its tests passed and a clean summary. On the CPU with a
stand-in compute-sanitizer over a throwaway tree; a CPU world is refused (no kernels)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.harness.qualify_main import main
from tests.host.scratch_tree import import_this_checkout, write_executable, write_tree
from tests.host.test_qualify_multi import H200, throwaway_multi_suites
from tests.suites import SanitizerCoverage

FAKE_TOOL = r"""#!/bin/bash
# Stand-in for compute-sanitizer: runs its target, reports errors for a planted node id or
# for the rank named in FAKE_BAD_RANK, to --log-file when given (else stdout).
declare -A opt
while [[ "$1" == --* ]]; do opt[$1]=$2; shift 2; done
echo "${opt[--tool]} ${opt[--log-file]:-stdout} ${PYTORCH_NO_CUDA_MEMORY_CACHING:-unset} $* ${opt[--error-exitcode]:+--error-exitcode}" >>"$FAKE_CALLS"
out="${opt[--log-file]:-/dev/stdout}"
"$@" > "$out.target" 2>&1
rc=$?
cat "$out.target"; rm -f "$out.target"
errors=0
case "$*" in *test_planted*) errors=3 ;; esac
[[ -n "$FAKE_BAD_RANK" && "$RANK" == "$FAKE_BAD_RANK" ]] && errors=2
{
  echo "========= COMPUTE-SANITIZER"
  for ((i = 0; i < errors; i++)); do echo "========= Invalid __global__ write of size 4 bytes"; done
  echo "========= ERROR SUMMARY: $errors errors"
} >> "$out"
((errors)) && [[ -n "${opt[--error-exitcode]}" ]] && exit "${opt[--error-exitcode]}"
exit $rc
"""
TESTS = '''\
import pytest

@pytest.mark.sanitizer
def test_designated():
    pass

def test_not_designated():
    pass
'''


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = write_tree(tmp_path / "tree", {"m/test_world.py": TESTS,
                                          "p/test_self.py": "def test_planted():\n    pass\n"})
    write_executable(tmp_path / "compute-sanitizer", FAKE_TOOL)
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")  # run_multi must remove it
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    import_this_checkout(monkeypatch)
    return root


def run(tree: Path, mode: str = "emulated") -> tuple[int, dict]:
    suites = throwaway_multi_suites()
    coverage = {"memcheck": SanitizerCoverage("memcheck", planted="p/test_self.py::test_planted",
                                              planted_report="Invalid __global__ write",
                                              cases=())}
    out = tree.parent / "out"
    rc = main(["--suite", "multi", "--sanitizer-tool", "memcheck", "--mode", mode,
               "--world-size", "2", "--timeout", "240", "--output-dir", str(out)],
              root=tree, suites=suites, coverage=coverage, python=sys.executable,
              environment={"gpus": [H200]})
    return rc, json.loads((out / "qualification.json").read_text())


def test_every_rank_runs_the_designated_cases_under_the_tool(tree) -> None:
    rc, rec = run(tree)
    suite = rec["suites"][0]
    assert rc == 0, suite["message"]
    assert suite["name"] == "multi-sanitize" and suite["tool"] == "memcheck"
    assert suite["planted"]["ok"], suite["planted"]
    assert [r["sanitizer"]["status"] for r in suite["ranks"]] == ["pass", "pass"]
    assert [r["counts"]["passed"] for r in suite["ranks"]] == [1, 1]  # designated only
    calls = (tree.parent / "calls.txt").read_text().splitlines()
    ranks = [c for c in calls if "rank_pytest" in c]
    # the caching allocator stays on, even when the caller's environment turns it off: the EP
    # forward's capture allocates from the graph pool
    assert len(ranks) == 2 and all(c.split()[2] == "unset" for c in ranks)
    # a rank's errors come from its summary, never from its exit code: torchrun would stop
    # the other ranks before they write theirs
    assert all("--error-exitcode" not in c for c in ranks)
    assert {c.split()[1].rsplit(".rank", 1)[1] for c in ranks} == {"0.memcheck.log",
                                                                  "1.memcheck.log"}


def test_errors_on_one_rank_fail_the_run_and_name_the_rank(tree, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_BAD_RANK", "1")
    rc, rec = run(tree)
    suite = rec["suites"][0]
    assert rc == 1 and suite["status"] == "fail"
    r0, r1 = suite["ranks"]
    assert (r0["status"], r1["status"]) == ("pass", "fail")
    assert r1["sanitizer"]["errors"] == 2 and "memcheck: fail" in r1["message"]


def test_a_cpu_world_is_refused_under_a_sanitizer(tree) -> None:
    rc, rec = run(tree, mode="cpu")
    assert rc == 2 and rec["suites"] == []
    assert any(c["name"] == "multi: sanitizer" and not c["ok"] for c in rec["preflight"])
