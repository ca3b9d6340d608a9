"""``tests.harness.compile_clock``: every test's seconds inside ``cute.compile`` reach its
JUnit report and the record's ``time_profile`` (where a GPU suite's time goes, issue 40
item 11). On the CPU, with a stand-in ``cutlass.cute`` whose compile sleeps."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import pytest

from tests.harness.compile_clock import CompileClock, TimedCompile, install
from tests.harness.time_profile import format_profile, time_profile
from tests.host.test_qualify_workers import _qualify, throwaway_tree

ROOT = Path(__file__).resolve().parents[2]
COMPILE_SLEEP_S = 0.3


def test_a_timed_compile_counts_every_call_and_changes_nothing_else() -> None:
    clock = CompileClock()

    class Options:
        def __call__(self, x: int) -> int:
            time.sleep(COMPILE_SLEEP_S / 3)
            return x + 1

        def __getitem__(self, key: str) -> Options:
            return self

        hint = "kept"

    timed = TimedCompile(Options(), clock)
    assert timed(1) == 2 and timed["--opt"](2) == 3  # the options form is timed too
    assert clock.calls == 2 and clock.seconds >= 2 * COMPILE_SLEEP_S / 3
    assert timed.hint == "kept"
    with pytest.raises(TypeError):
        timed("a")  # what it raises comes through, and the call still counts
    assert clock.calls == 3


def test_the_dsl_is_wrapped_once_and_only_once_it_is_imported(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "cutlass.cute", raising=False)
    assert install() is False
    cute = types.ModuleType("cutlass.cute")
    cute.compile = lambda f: f  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cutlass.cute", cute)
    assert install() is True
    first = cute.compile
    assert isinstance(first, TimedCompile) and install() and cute.compile is first


FAKE_CUTE = f'''\
import time
def compile(fn, *args):
    time.sleep({COMPILE_SLEEP_S})
    return fn
'''
CONFTEST = '''\
pytest_plugins = ["tests.harness.compile_clock"]
def pytest_configure(config):
    config.addinivalue_line("markers", "timing: reads GPU timings")
    config.addinivalue_line("markers", "alone: a heavy child process under a deadline")
'''
COMPILING = '''\
import cutlass.cute as cute
def test_compiles_twice():
    assert cute.compile(len)("ab") == 2
    cute.compile(len)
def test_compiles_nothing():
    pass
'''


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch) -> Path:  # type: ignore[no-untyped-def]
    root = throwaway_tree(tmp_path, monkeypatch, {"test_compiling.py": COMPILING})
    (root / "cutlass").mkdir()
    (root / "cutlass" / "__init__.py").write_text("")
    (root / "cutlass" / "cute.py").write_text(FAKE_CUTE)
    monkeypatch.setenv("PYTHONPATH", f"{root}:{ROOT}")  # the stand-in DSL, and our plugin
    return root


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_record_says_how_long_each_module_spent_compiling(tree: Path, workers: str) -> None:
    (tree / "t" / "conftest.py").write_text(CONFTEST)
    rc, rec = _qualify(tree, "--workers", workers)
    profile = rec["suites"][0]["time_profile"]
    assert rc == 0 and profile["clocked"] == 2, profile
    assert 2 * COMPILE_SLEEP_S <= profile["compile_s"] < profile["tests_s"] + 0.01
    (module,) = profile["compile_modules"]
    assert module["module"].endswith("test_compiling") and module["compiles"] == 2


def test_without_the_plugin_no_compile_time_is_claimed(tree: Path) -> None:
    """The measurement is the plugin's: the same tests without it report none."""
    rc, rec = _qualify(tree)
    profile = rec["suites"][0]["time_profile"]
    assert rc == 0 and profile["clocked"] == 0 and profile["compile_s"] == 0.0


def test_the_table_shows_the_compile_time(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.single.test_gemm" name="test_a" time="9.5"><properties>'
        '<property name="compile_s" value="7.25"/><property name="compiles" value="3"/>'
        '</properties></testcase>'
        '<testcase classname="tests.single.test_gemm" name="test_b" time="1.0"><properties>'
        '<property name="compile_s" value="0.0"/><property name="compiles" value="0"/>'
        '</properties></testcase>'
        '<testcase classname="tests.single.test_stage" name="test_c" time="2.0"/>'
        '</testsuite></testsuites>')
    profile = time_profile([report])
    assert (profile.clocked, profile.compile_s) == (2, 7.25)
    assert profile.compile_modules == (("tests.single.test_gemm", 7.25, 3),)
    assert "compiling kernels: 7.2 s in 2 tests" in format_profile(profile)
