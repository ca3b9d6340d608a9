"""``devtools/flashinfer_device.sh BACKEND bench [CASE_GLOB]``: one device call runs the
side-by-side benchmark with FlashInfer's files and tvm-ffi on the worker's path, small cases
first by default, and brings its record back; only the cake has a benchmark. Run here with a
stand-in ``python3``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "devtools" / "flashinfer_device.sh"

FAKE_PYTHON = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
if args[:2] == ["-m", "pip"]:
    sys.exit(0)
out = Path(args[args.index("--output-dir") + 1])
out.mkdir(parents=True, exist_ok=True)
ws = Path(os.environ["FLASHINFER_WORKSPACE_BASE"])
seen = {{str(f.relative_to(ws)): f.stat().st_mtime for f in ws.rglob("*") if f.is_file()}}
built = ws / ".cache" / "flashinfer" / "sm90_push_a2a" / "sm90_push_a2a.so"
built.parent.mkdir(parents=True, exist_ok=True)
built.write_text("a JIT build")
(out / "layer_flashinfer_cake.json").write_text(json.dumps({{
    "argv": args, "root": os.environ.get("MEGAMOE_FLASHINFER_ROOT"),
    "path": os.environ.get("PYTHONPATH", ""), "workspace": str(ws), "seen": seen}}))
"""


def _run(tmp_path: Path, *args: str, carried_cache: Path | None = None
         ) -> tuple[int, Path, str]:
    repo, out, bindir = tmp_path / "repo", tmp_path / "out", tmp_path / "bin"
    for d in (repo / ".whl", repo / ".whl-fi", out, bindir):
        d.mkdir(parents=True)
    if carried_cache is not None:
        (repo / ".fi-jit").mkdir()
        (repo / ".fi-jit" / "cache.tgz").write_bytes(carried_cache.read_bytes())
    (repo / ".whl" / "prelude.sh").write_text("true\n")
    (repo / ".whl-fi" / "apache_tvm_ffi-0.1.0-py3-none-any.whl").write_text("")
    (bindir / "python3").write_text(FAKE_PYTHON)
    (bindir / "python3").chmod(0o755)
    env = {**os.environ, "OUT": str(out), "PATH": f"{bindir}:{os.environ['PATH']}",
           "MEGAMOE_FI_BENCH_DIR": str(tmp_path / "fib"),
           "MEGAMOE_FI_WORKSPACE": str(tmp_path / "fiws")}
    r = subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, out, r.stdout + r.stderr


def test_the_bench_mode_runs_small_cases_first_and_brings_back_the_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, "flashinfer-sm90-cake", "bench")
    assert rc == 0, log
    rec = json.loads((out / "layer_flashinfer_cake.json").read_text())
    argv = rec["argv"]
    assert argv[:3] == ["-m", "megamoe.bench", "layer_flashinfer_cake"] and "--quick" in argv
    assert argv[argv.index("--case") + 1] == "deepseek-*-T16"
    assert rec["root"] == str(tmp_path / "repo" / ".flashinfer")
    assert "/tmp/fisite" in rec["path"].split(os.pathsep)


def test_a_case_glob_reaches_the_benchmark(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, "flashinfer-sm90-cake", "bench", "deepseek-skewed-*")
    argv = json.loads((out / "layer_flashinfer_cake.json").read_text())["argv"]
    assert rc == 0 and argv[argv.index("--case") + 1] == "deepseek-skewed-*", log


def test_only_the_cake_has_a_benchmark(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, "flashinfer-sm90-fp8-pull", "bench")
    assert rc == 2 and "only flashinfer-sm90-cake" in log
    assert not (out / "layer_flashinfer_cake.json").exists()


def test_the_jit_cache_comes_back_and_a_carried_one_is_unpacked_newer_than_its_sources(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path / "first", "flashinfer-sm90-cake", "bench")
    assert rc == 0, log
    back = out / "fi-jit-cache.tgz"
    with tarfile.open(back) as tar:
        assert ".cache/flashinfer/sm90_push_a2a/sm90_push_a2a.so" in tar.getnames()
    old = time.time() - 3600  # the carried build is an hour old: ninja would find it stale
    with tarfile.open(back) as tar:
        for member in tar.getmembers():
            member.mtime = int(old)
        carried = tmp_path / "carried.tgz"
        with tarfile.open(carried, "w:gz") as again:
            for member in tar.getmembers():
                again.addfile(member, tar.extractfile(member) if member.isfile() else None)
    start = time.time()
    rc, out, log = _run(tmp_path / "second", "flashinfer-sm90-cake", "bench",
                        carried_cache=carried)
    assert rc == 0, log
    seen = json.loads((out / "layer_flashinfer_cake.json").read_text())["seen"]
    so = ".cache/flashinfer/sm90_push_a2a/sm90_push_a2a.so"
    assert so in seen and seen[so] >= start - 1  # unpacked, then touched
    assert (out / "fi-jit-cache.tgz").exists()
