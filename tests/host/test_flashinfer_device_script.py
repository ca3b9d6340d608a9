"""``devtools/flashinfer_device.sh BACKEND bench [CASE_GLOB]``: one device call runs the
side-by-side benchmark with FlashInfer's files and tvm-ffi on the worker's path, small cases
first by default, and brings its record back; only the cake has a benchmark. Run here with a
stand-in ``python3``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from devtools.jit_cache import OLD

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "devtools" / "flashinfer_device.sh"

FAKE_PYTHON = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
if args[:1] == ["-c"]:  # the script's own one-liners run for real
    os.execv({sys.executable!r}, [{sys.executable!r}, *args])
if args[:2] == ["-m", "pip"]:  # installs tvm-ffi's headers, written now
    header = Path(args[args.index("--target") + 1], "tvm_ffi", "include", "c_api.h")
    header.parent.mkdir(parents=True, exist_ok=True)
    header.write_text("// tvm-ffi")
    sys.exit(0)
if args[:2] == ["-m", "devtools.jit_cache"]:  # ours, run for real
    os.execve({sys.executable!r}, [{sys.executable!r}, *args],
              {{**os.environ, "PYTHONPATH": {str(ROOT)!r}}})
if args[:2] == ["-m", "tests.harness.conformance"]:
    print("| rule | verdict |")
    sys.exit(0)
out = Path(args[args.index("--output-dir") + 1])
out.mkdir(parents=True, exist_ok=True)
ws = Path(os.environ["FLASHINFER_WORKSPACE_BASE"])
seen = {{str(f.relative_to(ws)): f.stat().st_mtime for f in ws.rglob("*") if f.is_file()}}
inputs = {{str(f): f.stat().st_mtime for d in (os.environ["MEGAMOE_FI_SITE"],
          os.environ["MEGAMOE_FLASHINFER_ROOT"]) for f in Path(d).rglob("*")}}
built = ws / ".cache" / "flashinfer" / "sm90_push_a2a" / "sm90_push_a2a.so"
built.parent.mkdir(parents=True, exist_ok=True)
built.write_text("a JIT build")
bench = args[args.index("megamoe.bench") + 1]
(out / f"{{bench}}.json").write_text(json.dumps({{
    "argv": args, "root": os.environ.get("MEGAMOE_FLASHINFER_ROOT"),
    "path": os.environ.get("PYTHONPATH", ""), "workspace": str(ws), "seen": seen,
    "inputs": inputs,
    "dsl_path": os.environ.get("MEGAMOE_FLASHINFER_DSL_PATH"),
    "prelude": os.environ.get("PRELUDE_RAN")}}))
"""
FAKE_RUN_TESTS = """#!/usr/bin/env bash
python3 -c "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'path': os.environ.get('PYTHONPATH', ''), 'prelude': os.environ.get('PRELUDE_RAN')}))" "$@" > "$OUT/run_tests.json"
"""
PRELUDE = "export PRELUDE_RAN=1 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}\n"


def _run(tmp_path: Path, *args: str, carried_cache: Path | None = None,
         fidsl: Path | None = None, dsl_parts: tuple[int, ...] = (1, 2),
         flashinfer: bool = True) -> tuple[int, Path, str]:
    """One call in a scratch checkout; ``fidsl``: where FlashInfer's CuTe DSL site is staged;
    ``dsl_parts``: which parts of it the call carries (``.whl-fidsl-<i>/site.tar.xz`` of a
    stand-in in two parts); ``flashinfer``: whether the packed FlashInfer files
    (``.flashinfer/flashinfer.tar.xz``) are carried."""
    repo, out, bindir = tmp_path / "repo", tmp_path / "out", tmp_path / "bin"
    for d in (repo / ".whl", repo / ".whl-fi", out, bindir):
        d.mkdir(parents=True)
    if flashinfer:
        (repo / ".flashinfer").mkdir()
        _archive(repo / ".flashinfer" / "flashinfer.tar.xz",
                 (("flashinfer/moe_ep/__init__.py", "# moe_ep"),))
    if carried_cache is not None:
        (repo / ".fi-jit").mkdir()
        (repo / ".fi-jit" / "cache.tgz").write_bytes(carried_cache.read_bytes())
    (repo / ".whl" / "prelude.sh").write_text(PRELUDE)
    (repo / "run_tests.sh").write_text(FAKE_RUN_TESTS)
    (repo / "run_tests.sh").chmod(0o755)
    (repo / ".whl-fi" / "apache_tvm_ffi-0.1.0-py3-none-any.whl").write_text("")
    for i in dsl_parts:
        (repo / f".whl-fidsl-{i}").mkdir()
        _archive(repo / f".whl-fidsl-{i}" / "site.tar.xz", FIDSL_PARTS[i - 1])
        (repo / f".whl-fidsl-{i}" / "part").write_text(f"{i} {len(FIDSL_PARTS)}\n")
    (bindir / "python3").write_text(FAKE_PYTHON)
    (bindir / "python3").chmod(0o755)
    env = {**os.environ, "OUT": str(out), "PATH": f"{bindir}:{os.environ['PATH']}",
           "MEGAMOE_FI_BENCH_DIR": str(tmp_path / "fib"), "MEGAMOE_GPU_LOCK": str(tmp_path / "gpu.lock"),
           "MEGAMOE_FI_WORKSPACE": str(tmp_path / "fiws"), "MEGAMOE_FI_ROOT": str(tmp_path / "fi-root"),
           "MEGAMOE_FI_SITE": str(tmp_path / "fisite"),
           "MEGAMOE_FI_DSL_SITE": str(fidsl or tmp_path / "fidsl")}
    r = subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, out, r.stdout + r.stderr


def _archive(path: Path, members: tuple[tuple[str, str], ...]) -> None:
    """An xz tar archive at ``path`` of ``(name, text)`` members."""
    with tarfile.open(path, "w:xz") as tar:
        for name, text in members:
            data = text.encode()
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


FIDSL_PARTS = (
    (("nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.so", "the compiler"),),
    (("nvidia_cutlass_dsl/dsl_packages/cutlass/__init__.py", ""),
     ("nvidia_cutlass_dsl-4.7.1.dist-info/METADATA",
      "Metadata-Version: 2.1\nName: nvidia-cutlass-dsl\nVersion: 4.7.1\n")),
)
"""A stand-in for ``python -m devtools.pack_device_wheels --fi-dsl``'s two parts: the
compiler's module alone, then the package and the metadata that says its version."""


def test_the_dsl_is_staged_part_by_part_in_calls_of_their_own_and_says_its_version(tmp_path) -> None:  # type: ignore[no-untyped-def]
    staged = tmp_path / "staged"
    rc, _, log = _run(tmp_path / "first", "stage-dsl", fidsl=staged, dsl_parts=(1,))
    assert rc == 0 and "staged 1 of 2 parts" in log and not staged.exists(), log
    rc, _, log = _run(tmp_path / "second", "stage-dsl", fidsl=staged, dsl_parts=(2,))
    assert rc == 0 and "staged nvidia-cutlass-dsl 4.7.1" in log, log
    libs = staged / "nvidia_cutlass_dsl" / "dsl_packages" / "cutlass" / "_mlir" / "_mlir_libs"
    assert (libs / "_cutlass_ir.so").read_text() == "the compiler"


def test_a_second_part_without_the_first_stages_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    staged = tmp_path / "staged"
    rc, _, log = _run(tmp_path / "only", "stage-dsl", fidsl=staged, dsl_parts=(2,))
    assert rc == 0 and "staged 1 of 2 parts" in log and not staged.exists(), log
    rc, _, log = _run(tmp_path / "none", "stage-dsl", fidsl=staged, dsl_parts=())
    assert rc == 2 and ".whl-fidsl-1" in log, log


def test_the_fp8_pull_without_a_staged_dsl_is_refused_before_anything_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, "flashinfer-sm90-fp8-pull")
    assert rc == 3 and "stage-dsl" in log and not (out / "run_tests.json").exists()


def test_the_fp8_pull_contract_tests_run_on_the_staged_dsl_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    staged = tmp_path / "staged"
    rc, _, log = _run(tmp_path / "first", "stage-dsl", fidsl=staged)
    assert rc == 0, log
    rc, out, log = _run(tmp_path / "second", "flashinfer-sm90-fp8-pull", fidsl=staged)
    assert rc == 0, log
    ran = json.loads((out / "run_tests.json").read_text())
    assert ran["argv"][:3] == ["single", "--moe-backend", "flashinfer-sm90-fp8-pull"]
    path = ran["path"].split(os.pathsep)
    assert path[:2] == [str(staged), f"{staged}/nvidia_cutlass_dsl/dsl_packages"]
    assert "/tmp/site" not in path and ran["prelude"] is None  # no CuTe DSL of ours
    assert (out / "flashinfer-sm90-fp8-pull-conformance.md").read_text().startswith("| rule")


def test_the_fp8_pull_bench_runs_ours_on_our_dsl_and_theirs_on_the_staged_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    staged = tmp_path / "staged"
    assert _run(tmp_path / "first", "stage-dsl", fidsl=staged)[0] == 0
    rc, out, log = _run(tmp_path / "second", "flashinfer-sm90-fp8-pull", "bench", fidsl=staged)
    assert rc == 0, log
    rec = json.loads((out / "layer_flashinfer_fp8.json").read_text())
    assert rec["argv"][:3] == ["-m", "megamoe.bench", "layer_flashinfer_fp8"]
    assert rec["prelude"] == "1" and "/tmp/site" in rec["path"].split(os.pathsep)
    assert rec["dsl_path"] == f"{staged}{os.pathsep}{staged}/nvidia_cutlass_dsl/dsl_packages"


def test_the_bench_mode_runs_small_cases_first_and_brings_back_the_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, "flashinfer-sm90-cake", "bench")
    assert rc == 0, log
    rec = json.loads((out / "layer_flashinfer_cake.json").read_text())
    argv = rec["argv"]
    assert argv[:3] == ["-m", "megamoe.bench", "layer_flashinfer_cake"] and "--quick" in argv
    assert argv[argv.index("--case") + 1] == "dsrank-*-T16"
    root = tmp_path / "fi-root"  # the packed files, unpacked on the machine
    assert rec["root"] == str(root)
    assert (root / "flashinfer" / "moe_ep" / "__init__.py").read_text() == "# moe_ep"
    assert str(tmp_path / "fisite") in rec["path"].split(os.pathsep)  # tvm-ffi, where pip put it


def test_a_case_glob_reaches_the_benchmark(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, "flashinfer-sm90-cake", "bench", "deepseek-skewed-*")
    argv = json.loads((out / "layer_flashinfer_cake.json").read_text())["argv"]
    assert rc == 0 and argv[argv.index("--case") + 1] == "deepseek-skewed-*", log


def test_only_the_cake_and_the_fp8_pull_have_a_benchmark(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, "flashinfer-sm90-other", "bench")
    assert rc == 2 and "only flashinfer-sm90-cake and flashinfer-sm90-fp8-pull" in log
    assert not list(out.glob("*.json"))


def test_the_jit_cache_comes_back_and_a_carried_one_keeps_its_times_over_older_inputs(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The carried build keeps the times tar kept; what the call installed again (tvm-ffi's
    headers, FlashInfer's files) is dated back before the JIT runs, so ninja finds nothing
    newer than the carried objects (devtools/jit_cache.py; tests/host/test_jit_cache.py
    shows ninja's side)."""
    rc, out, log = _run(tmp_path / "first", "flashinfer-sm90-cake", "bench")
    assert rc == 0, log
    back = out / "fi-jit-cache.tgz"
    with tarfile.open(back) as tar:
        assert ".cache/flashinfer/sm90_push_a2a/sm90_push_a2a.so" in tar.getnames()
    old = int(time.time() - 3600)  # the carried build is an hour old
    with tarfile.open(back) as tar:
        for member in tar.getmembers():
            member.mtime = old
        carried = tmp_path / "carried.tgz"
        with tarfile.open(carried, "w:gz") as again:
            for member in tar.getmembers():
                again.addfile(member, tar.extractfile(member) if member.isfile() else None)
    rc, out, log = _run(tmp_path / "second", "flashinfer-sm90-cake", "bench",
                        carried_cache=carried)
    assert rc == 0, log
    rec = json.loads((out / "layer_flashinfer_cake.json").read_text())
    so = ".cache/flashinfer/sm90_push_a2a/sm90_push_a2a.so"
    assert rec["seen"].get(so) == old  # unpacked with its own time, not touched
    header = str(tmp_path / "second" / "fisite" / "tvm_ffi" / "include" / "c_api.h")
    assert header in rec["inputs"]
    assert any(p.endswith("moe_ep/__init__.py") for p in rec["inputs"])
    assert set(rec["inputs"].values()) == {OLD} and old > OLD
    assert (out / "fi-jit-cache.tgz").exists()


def test_without_the_packed_flashinfer_files_nothing_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, "flashinfer-sm90-cake", flashinfer=False)
    assert rc == 2 and "python -m devtools.flashinfer_slim" in log, log
    assert not (out / "run_tests.json").exists()
