"""The timing devtools of issue 40 item 11: ``devtools.profile_tests`` (a pytest selection
under cProfile, own time per package) and ``devtools.compile_split`` (the trace's share of a
kernel's compile, offline)."""

from __future__ import annotations

import cProfile
import importlib.util
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


def _spin_from(folder: Path):  # type: ignore[no-untyped-def]
    """A busy loop defined in a file of ``folder`` (loaded under a name of its own)."""
    path = folder / "busy.py"
    path.write_text("def spin(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n")
    spec = importlib.util.spec_from_file_location("megamoe_profile_busy", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.spin


def test_the_report_puts_a_busy_loop_under_its_package(tmp_path: Path) -> None:
    """A loop in a file under a folder named ``oracle`` is most of a profile of it: the
    report's table puts that time under ``oracle``."""
    (tmp_path / "oracle").mkdir()
    spin = _spin_from(tmp_path / "oracle")
    prof = cProfile.Profile()
    prof.runcall(spin, 5_000_000)
    rows = _table(profile_tests.report(prof, 3))
    assert rows["oracle"] >= 0.9 * sum(rows.values()), rows


def test_main_runs_a_selection_and_writes_the_report(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    out = tmp_path / "report.md"
    assert profile_tests.main(["--top", "3", "--output", str(out), "--", "-q",
                               str(tmp_path / "test_one.py")]) == 0
    assert "| package | own s | share |" in out.read_text()
    (tmp_path / "test_two.py").write_text("def test_two():\n    assert 1 + 1 == 3\n")
    assert profile_tests.main(["--", "-q", str(tmp_path / "test_two.py")]) == 1  # its rc


def _table(text: str) -> dict[str, float]:
    return {line.split("|")[1].strip(): float(line.split("|")[2])
            for line in text.splitlines() if line.startswith("| ") and "own s" not in line}


def test_the_compile_split_times_a_kernel_and_its_trace() -> None:
    proc = subprocess.run([sys.executable, "-m", "devtools.compile_split", "--match",
                           "masked_combine_v1_i64"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = next(line for line in proc.stdout.splitlines() if "masked_combine_v1_i64" in line)
    compile_s, trace_s = (float(c) for c in row.strip("|").split("|")[1:3])
    assert 0 < trace_s <= compile_s
    assert "1 kernels: compile" in proc.stdout
