"""The timing devtools of issue 40 item 11: ``devtools.profile_tests`` (a pytest selection
under cProfile, own time per package) and ``devtools.compile_split`` (the trace's share of a
kernel's compile, offline)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devtools import profile_tests
from devtools.profile_tests import package_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("filename", "package"), [
    ("/work/main/megamoe/experts/api.py", "megamoe"),
    ("/work/main/oracle/experts.py", "oracle"),
    ("/work/main/tests/layer_check.py", "tests"),
    ("/x/site-packages/nvidia_cutlass_dsl/python_packages/cutlass/base_dsl/dsl.py", "cute-dsl"),
    ("/x/site-packages/torch/nn/functional.py", "torch"),
    ("/x/site-packages/hypothesis/core.py", "hypothesis"),
    ("~", "builtin"),
    ("/usr/lib/python3.11/json/decoder.py", "other"),
])
def test_a_function_is_counted_under_its_package(filename, package) -> None:
    assert package_of(filename) == package


def test_the_report_splits_a_selection_by_package(tmp_path: Path, capsys) -> None:
    """A throwaway test, in a folder named ``oracle``, that spends its time in a loop of its
    own: the report puts most of the profiled time under ``oracle``."""
    folder = tmp_path / "oracle"
    folder.mkdir()
    (folder / "test_busy.py").write_text(
        "def spin():\n    s = 0\n    for i in range(3_000_000):\n        s += i\n    return s\n"
        "def test_spin():\n    assert spin() > 0\n")
    out = tmp_path / "report.md"
    rc = profile_tests.main(["--top", "3", "--output", str(out), "--", "-q",
                             str(folder / "test_busy.py")])
    assert rc == 0
    rows = {line.split("|")[1].strip(): float(line.split("|")[2])
            for line in out.read_text().splitlines() if line.startswith("| ") and "own s" not in line}
    assert rows["oracle"] == max(rows.values()), rows


def test_the_compile_split_times_a_kernel_and_its_trace() -> None:
    proc = subprocess.run([sys.executable, "-m", "devtools.compile_split", "--match",
                           "masked_combine_v1_i64"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = next(line for line in proc.stdout.splitlines() if "masked_combine_v1_i64" in line)
    compile_s, trace_s = (float(c) for c in row.strip("|").split("|")[1:3])
    assert 0 < trace_s <= compile_s
    assert "1 kernels: compile" in proc.stdout
