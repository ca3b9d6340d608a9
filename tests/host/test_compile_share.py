"""``tests.harness.compile_share`` and ``qualify.py --share-compiles``: a kernel compiled by one
process of a run is loaded, not compiled again, by every other; nothing else changes.

On the CPU, with a stand-in DSL (``FAKE_DSL``) that keeps the CuTe DSL 4.3.5 file-cache rule
the plugin relies on (``compile_and_cache`` with ``no_cache`` false loads a file named by the
module hash when one is there, else compiles through ``compile_and_jit`` and writes the file
by an atomic rename). That the real DSL has that shape is pinned below on the installed DSL,
and that its cache gives back the compiled bytes it was given is checked on one of our real
kernels, lowered offline; the single tier checks the whole path on a GPU
(``tests/single/test_compile_share.py``)."""

from __future__ import annotations

import inspect
import json
import multiprocessing
import os
import subprocess
import sys
import types
from contextlib import nullcontext
from pathlib import Path

import pytest

from tests.harness import compile_share
from tests.harness.compile_share import (
    CACHE_DIR_PREFIX,
    DSL_CACHE_ENV,
    SHARE_ENV,
    ShareCounter,
    install,
    shared_compile_and_cache,
    shared_compiles,
)
from tests.host.test_qualify_workers import _qualify, throwaway_tree

ROOT = Path(__file__).resolve().parents[2]

FAKE_CACHE_HELPERS = '''\
import os
default_generated_ir_path = os.environ.get("CUTE_DSL_CACHE_DIR") or "/nonexistent/fake-cache"
'''
FAKE_DSL = '''\
"""A stand-in for cutlass.base_dsl.dsl: the file-cache rule of BaseDSL.compile_and_cache."""
import os, pathlib, time
from cutlass.base_dsl import cache_helpers

class Envar:
    keep_ptx = False
    keep_cubin = False
    disable_file_caching = False

class BaseDSL:
    name = "CuTeDSL"

    def __init__(self):
        self.jit_cache = {}
        self.envar = Envar()

    def compile_and_jit(self, module, pipeline, shared_libs, function_name=""):
        marks = os.environ.get("COMPILE_MARKS")
        if marks:
            pathlib.Path(marks, f"{module}.{os.getpid()}.{time.time_ns()}").write_text("")
        time.sleep(float(os.environ.get("COMPILE_SLEEP", "0")))
        return f"compiled {module}"

    def compile_and_cache(self, module, module_hash, function_name, pipeline, args_spec,
                          no_cache, func_type=None, **kwargs):
        path = os.path.join(cache_helpers.default_generated_ir_path,
                            f"{self.name.lower()}_{module_hash}.mlir")
        if not no_cache and os.path.exists(path):
            fn = "loaded " + pathlib.Path(path).read_text()
            self.jit_cache[module_hash] = fn
            return fn
        fn = self.compile_and_jit(module, pipeline, None, function_name=function_name)
        if not no_cache:
            self.jit_cache[module_hash] = fn
            if not self.envar.disable_file_caching:
                os.makedirs(cache_helpers.default_generated_ir_path, exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                pathlib.Path(tmp).write_text(fn)
                os.replace(tmp, path)
        return fn

def explicit_compile(dsl, module):
    """What cute.compile does: compile_and_cache with no_cache=True."""
    return dsl.compile_and_cache(module, "hash-" + module, "f", None, None, True)
'''


def fake_dsl_package(root: Path) -> Path:
    """``root/cutlass/base_dsl/{dsl,cache_helpers}.py``: the stand-in DSL as a package."""
    pkg = root / "cutlass" / "base_dsl"
    pkg.mkdir(parents=True)
    (root / "cutlass" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cache_helpers.py").write_text(FAKE_CACHE_HELPERS)
    (pkg / "dsl.py").write_text(FAKE_DSL)
    return root


def fake_dsl_module(cache_dir: Path) -> types.ModuleType:
    """The stand-in DSL as a module object whose cache lives in ``cache_dir``."""
    helpers = types.ModuleType("cache_helpers")
    helpers.default_generated_ir_path = str(cache_dir)  # type: ignore[attr-defined]
    dsl = types.ModuleType("fake_dsl")
    code = FAKE_DSL.replace("from cutlass.base_dsl import cache_helpers\n", "")
    dsl.cache_helpers = helpers  # type: ignore[attr-defined]
    exec(compile(code, "fake_dsl", "exec"), dsl.__dict__)
    return dsl


def shared_class(dsl: types.ModuleType, counter: ShareCounter) -> type:
    """A subclass of the stand-in's BaseDSL with the plugin's two wrappers installed."""
    base = dsl.BaseDSL
    cls = type("Shared", (base,), {})
    cls.compile_and_cache = shared_compile_and_cache(  # type: ignore[attr-defined]
        base.compile_and_cache, lambda: dsl.cache_helpers.default_generated_ir_path, counter)
    cls.compile_and_jit = compile_share.counted_compile_and_jit(  # type: ignore[attr-defined]
        base.compile_and_jit)
    return cls


def test_a_kernel_compiled_by_one_process_is_loaded_by_the_next(tmp_path: Path) -> None:
    dsl = fake_dsl_module(tmp_path / "cache")
    counter = ShareCounter()
    cls = shared_class(dsl, counter)
    first, second = cls(), cls()  # two processes' DSLs: no in-memory cache in common
    assert dsl.explicit_compile(first, "gemm") == "compiled gemm"
    assert (counter.compiles, counter.hits) == (1, 0)
    assert dsl.explicit_compile(second, "gemm") == "loaded compiled gemm"
    assert (counter.compiles, counter.hits) == (2, 1)
    assert dsl.explicit_compile(second, "combine") == "compiled combine"  # another key
    assert (counter.compiles, counter.hits) == (3, 1)
    assert sorted(p.name for p in (tmp_path / "cache").glob("*.mlir")) == [
        "cutedsl_hash-combine.mlir", "cutedsl_hash-gemm.mlir"]


def test_the_in_process_cache_is_left_as_it_was(tmp_path: Path) -> None:
    """The DSL's own jit_cache gains nothing and loses nothing: the kernels stay held by our
    compile_once caches alone, as without sharing."""
    dsl = fake_dsl_module(tmp_path / "cache")
    one = shared_class(dsl, ShareCounter())()
    one.jit_cache["hash-older"] = "kept"
    dsl.explicit_compile(one, "gemm")
    one.jit_cache["hash-gemm"] = "held before"
    dsl.explicit_compile(one, "gemm")
    assert one.jit_cache == {"hash-older": "kept", "hash-gemm": "held before"}


@pytest.mark.parametrize("flag", ["keep_ptx", "keep_cubin", "disable_file_caching"])
def test_a_compile_that_must_write_ptx_or_cubins_or_has_no_file_cache_is_not_shared(
        tmp_path: Path, flag: str) -> None:
    dsl = fake_dsl_module(tmp_path / "cache")
    counter = ShareCounter()
    one = shared_class(dsl, counter)()
    setattr(one.envar, flag, True)
    assert dsl.explicit_compile(one, "gemm") == "compiled gemm"
    assert dsl.explicit_compile(one, "gemm") == "compiled gemm"
    assert counter.compiles == 0 and not (tmp_path / "cache").exists()


def test_an_implicit_call_goes_through_unchanged(tmp_path: Path) -> None:
    """A call that already uses the cache (an implicit @cute.jit call) is the DSL's alone."""
    dsl = fake_dsl_module(tmp_path / "cache")
    counter = ShareCounter()
    one = shared_class(dsl, counter)()
    one.compile_and_cache("gemm", "hash-gemm", "f", None, None, False)
    assert one.jit_cache == {"hash-gemm": "compiled gemm"} and counter.compiles == 0


def _race(cache_dir: str, marks: str, start: object, lock: bool) -> None:
    os.environ["COMPILE_MARKS"], os.environ["COMPILE_SLEEP"] = marks, "0.5"
    if not lock:
        compile_share.key_lock = lambda directory, key: nullcontext()  # the planted bug
    dsl = fake_dsl_module(Path(cache_dir))
    one = shared_class(dsl, ShareCounter())()
    start.wait()  # type: ignore[attr-defined]
    dsl.explicit_compile(one, "gemm")


@pytest.mark.parametrize("lock", [True, False], ids=["locked", "planted-no-lock"])
def test_processes_that_need_one_kernel_at_once_compile_it_once(tmp_path: Path,
                                                                 lock: bool) -> None:
    """Four processes start compiling one kernel together: under the key's lock one compiles
    and three load; without it (planted) all four compile, which the count catches."""
    marks = tmp_path / "marks"
    marks.mkdir()
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(4)
    procs = [ctx.Process(target=_race, args=(str(tmp_path / "cache"), str(marks), start, lock))
             for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert all(p.exitcode == 0 for p in procs)
    compiled = len(list(marks.iterdir()))
    assert compiled == 1 if lock else compiled == 4


def test_nothing_is_shared_unless_asked(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(SHARE_ENV, raising=False)
    dsl = types.ModuleType("cutlass.base_dsl.dsl")
    dsl.BaseDSL = type("BaseDSL", (), {"compile_and_cache": lambda *a: None,  # type: ignore[attr-defined]
                                       "compile_and_jit": lambda *a: None})
    monkeypatch.setitem(sys.modules, compile_share.DSL_MODULE, dsl)
    assert install() is False
    assert not hasattr(dsl.BaseDSL.compile_and_cache, "__wrapped__")


def test_a_dsl_version_it_was_not_written_for_is_refused_by_name(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(SHARE_ENV, "1")
    dsl = types.ModuleType("cutlass.base_dsl.dsl")
    dsl.BaseDSL = type("BaseDSL", (), {"compile_and_cache": lambda *a: None,  # type: ignore[attr-defined]
                                       "compile_and_jit": lambda *a: None})
    monkeypatch.setitem(sys.modules, compile_share.DSL_MODULE, dsl)
    monkeypatch.setattr(compile_share, "dsl_version", lambda: "9.9.9")
    monkeypatch.setattr(compile_share, "_REFUSED", [])
    assert install() is False
    assert "nvidia-cutlass-dsl 9.9.9 is not one this plugin was written for" in \
        capsys.readouterr().err
    assert not hasattr(dsl.BaseDSL.compile_and_cache, "__wrapped__")


def test_the_installed_dsl_has_the_shape_the_plugin_relies_on() -> None:
    """The installed CuTe DSL is a known version; ``cute.compile`` asks for no cache (so each
    process compiles alone unless shared); ``compile_and_cache`` takes ``no_cache`` where the
    wrapper passes it, ``compile_and_jit`` is its real compilation, and the DSL our kernels
    use (``CuTeDSL``) ends in BaseDSL's, where the plugin wraps it."""
    from cutlass.base_dsl.compiler import CompileCallable
    from cutlass.base_dsl.dsl import BaseDSL

    assert compile_share.dsl_version() in compile_share.KNOWN_DSL_VERSIONS
    params = list(inspect.signature(BaseDSL.compile_and_cache).parameters)
    assert params[:7] == ["self", "module", "module_hash", "function_name", "pipeline",
                          "args_spec", "no_cache"]
    body = inspect.getsource(BaseDSL.compile_and_cache)
    assert "load_cache_from_path" in body and "dump_cache_to_path" in body
    assert "self.compile_and_jit" in body  # profiler(self.compile_and_jit)(module, ...)
    assert 'kwargs["no_cache"] = True' in inspect.getsource(CompileCallable._compile)
    # our kernels' DSL reaches BaseDSL's method through super(), where the wrapper sits
    from cutlass.cutlass_dsl import CuTeDSL

    owner = next(c for c in CuTeDSL.__mro__ if "compile_and_cache" in vars(c))
    assert owner is BaseDSL or "super().compile_and_cache(" in inspect.getsource(
        owner.compile_and_cache)


ROUNDTRIP = '''\
import json, sys, types
from pathlib import Path
from tests.harness.compile_gate import LoweredOffline
from megamoe.kernel_registry import load_all
from cutlass.base_dsl.compiler import PostCompileHookContext
from cutlass.base_dsl.cache_helpers import (dump_cache_to_path, load_cache_from_path,
    read_bytecode_and_check_crc32, write_bytecode_with_crc32)
from cutlass.cutlass_dsl import CuTeDSL
import io
out = {}
cache = Path(sys.argv[2])
def bytecode(module):
    s = io.BytesIO(); module.operation.write_bytecode(s); return s.getvalue()
def hook(module):
    fn = types.SimpleNamespace(ir_module=module)
    dump_cache_to_path("CuTeDSL", fn, "roundtrip", path=str(cache),
                       bytecode_writer=lambda f: write_bytecode_with_crc32(f, module))
    back = load_cache_from_path("CuTeDSL", "roundtrip", path=str(cache),
                                bytecode_reader=read_bytecode_and_check_crc32)
    out["same"] = back is not None and bytecode(back.ir_module) == bytecode(module)
    out["gpu_binary"] = "@kernels_binary" in str(back.ir_module) if back is not None else False
    path = cache / "cutedsl_roundtrip.mlir"
    data = bytearray(path.read_bytes()); data[len(data) // 2] ^= 0xFF; path.write_bytes(data)
    out["corrupt_refused"] = load_cache_from_path(
        "CuTeDSL", "roundtrip", path=str(cache),
        bytecode_reader=read_bytecode_and_check_crc32) is None
    raise LoweredOffline
with PostCompileHookContext(CuTeDSL._get_dsl().compiler_provider, hook):
    try:
        load_all()[sys.argv[1]].build()
    except Exception:
        pass
print(json.dumps(out))
'''


def test_the_dsl_cache_gives_back_a_compiled_kernel_byte_for_byte(tmp_path: Path) -> None:
    """One of our kernels (``ep_signal``), lowered offline to its cubin: the compiled module
    written through the DSL's cache writer and read back by its reader is the same bytecode,
    its GPU binary (the module's ``@kernels_binary``, the cubin) included; a file with one byte flipped is refused (its CRC), so a torn or
    damaged file is compiled again, never loaded."""
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", ROUNDTRIP, "ep_signal", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, proc.stderr[-3000:]
    assert json.loads(lines[-1]) == {"same": True, "gpu_binary": True, "corrupt_refused": True}


def test_a_run_shares_through_a_fresh_directory_it_removes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(DSL_CACHE_ENV, "/tmp/cc")
    monkeypatch.delenv(SHARE_ENV, raising=False)
    with shared_compiles(True) as directory:
        assert directory is not None and directory.is_dir()
        assert directory.name.startswith(CACHE_DIR_PREFIX)
        assert os.environ[SHARE_ENV] == "1" and os.environ[DSL_CACHE_ENV] == str(directory)
    assert not directory.exists()
    assert os.environ[DSL_CACHE_ENV] == "/tmp/cc" and SHARE_ENV not in os.environ
    with shared_compiles(False) as nothing:
        assert nothing is None and SHARE_ENV not in os.environ


COMPILING = '''\
import json, os, pathlib, pytest
from cutlass.base_dsl.dsl import BaseDSL, explicit_compile
def _note(name):
    seen = {k: os.environ.get(k, "") for k in ("MEGAMOE_SHARE_COMPILES", "CUTE_DSL_CACHE_DIR")}
    (pathlib.Path(os.environ["WHERE_DIR"]) / name).write_text(json.dumps(seen))
@pytest.mark.parametrize("i", range(9))
def test_builds_two_kernels(i):
    dsl = BaseDSL()
    assert explicit_compile(dsl, "gemm").endswith("compiled gemm")
    assert explicit_compile(dsl, "combine").endswith("compiled combine")
    _note(f"t{i}")
'''


def _qualify_compiling(tmp_path: Path, monkeypatch, *extra: str):  # type: ignore[no-untyped-def]
    conftest = ("pytest_plugins = ['tests.harness.compile_share_plugin']\n"
                "def pytest_configure(config):\n"
                "    config.addinivalue_line('markers', 'timing: t')\n"
                "    config.addinivalue_line('markers', 'alone: a')\n")
    tree = throwaway_tree(tmp_path, monkeypatch, {"conftest.py": conftest,
                                                  "test_compiling.py": COMPILING})
    fake_dsl_package(tree / "t")  # on the test processes' path (pytest puts t/ first), not qualify's
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("COMPILE_MARKS", str(marks))
    monkeypatch.setenv("COMPILE_SLEEP", "0.2")
    monkeypatch.delenv(SHARE_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    where_dir = tmp_path / "where"
    where_dir.mkdir()
    monkeypatch.setenv("WHERE_DIR", str(where_dir))
    rc, rec = _qualify(tree, "--workers", "3", *extra)
    where = {p.name: p.read_text() for p in where_dir.iterdir()}
    return rc, rec, where, len(list(marks.iterdir()))


def test_qualify_share_compiles_compiles_each_kernel_once_in_the_whole_run(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Nine tests in three xdist workers each build the same two kernels: with the option
    they are compiled twice in all and the other 16 builds load; the record says so, and the
    run's cache directory is gone afterwards."""
    rc, rec, where, compiled = _qualify_compiling(tmp_path, monkeypatch, "--share-compiles")
    suite = rec["suites"][0]
    assert rc == 0 and suite["status"] == "pass", suite["message"]
    assert rec["arguments"]["share_compiles"] is True
    assert compiled == 2
    assert suite["time_profile"]["compile_hits"] == 16
    seen = {json.loads(v)["CUTE_DSL_CACHE_DIR"] for v in where.values()}
    assert len(seen) == 1 and Path(next(iter(seen))).name.startswith(CACHE_DIR_PREFIX)
    assert not Path(next(iter(seen))).exists()
    assert {json.loads(v)["MEGAMOE_SHARE_COMPILES"] for v in where.values()} == {"1"}


def test_without_the_option_every_build_compiles(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rc, rec, where, compiled = _qualify_compiling(tmp_path, monkeypatch)
    suite = rec["suites"][0]
    assert rc == 0 and rec["arguments"]["share_compiles"] is False
    assert compiled == 18 and suite["time_profile"]["compile_hits"] == 0
    assert {json.loads(v)["MEGAMOE_SHARE_COMPILES"] for v in where.values()} == {""}


def test_the_profile_sums_the_compiles_the_shared_cache_served(tmp_path: Path) -> None:
    from tests.harness.time_profile import format_profile, time_profile

    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.single.test_gemm" name="test_a" time="9.5"><properties>'
        '<property name="compile_s" value="7.25"/><property name="compiles" value="3"/>'
        '<property name="compile_hits" value="2"/></properties></testcase>'
        '<testcase classname="tests.single.test_gemm" name="test_b" time="1.0"><properties>'
        '<property name="compile_s" value="0.5"/><property name="compiles" value="1"/>'
        '<property name="compile_hits" value="1"/></properties></testcase>'
        '<testcase classname="tests.single.test_stage" name="test_c" time="2.0"/>'
        '</testsuite></testsuites>')
    profile = time_profile([report])
    assert profile.compile_hits == 3 and profile.as_dict()["compile_hits"] == 3
    assert "3 compiles served by the shared cache" in format_profile(profile)
