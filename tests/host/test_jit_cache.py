"""``devtools.jit_cache``: a ninja build carried to the next device call stays up to date.

A real ninja (the ``ninja`` package of the test extra) builds one object the way FlashInfer's
JIT does (a generated source in the cache, a header from a package installed again in every
call, the header found through the compiler's depfile), the cache travels as a tarball, and
the next "call" installs the package again and unpacks the cache. ``date_back`` on the
reinstalled package keeps the carried object; without it, or with the cache touched as
``devtools/flashinfer_device.sh`` did before (2026-12-06), ninja rebuilds it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import ninja
import pytest

from devtools.jit_cache import OLD, date_back, main

FAKE_CC = '''\
import sys
src, out, dep, header = sys.argv[1:]
with open(out, "w") as f:
    f.write(open(src).read() + open(header).read())
with open(dep, "w") as f:
    f.write(f"{out}: {src} {header}\\n")
'''


def install_package(site: Path) -> None:
    """What pip does in every call: the package's files written now."""
    shutil.rmtree(site, ignore_errors=True)
    (site / "include").mkdir(parents=True)
    (site / "include" / "ffi.h").write_text("int ffi;\n")


def make_cache(cache: Path, site: Path, tools: Path) -> None:
    """The JIT's build tree: a generated source and the build file naming the header's
    package through the compiler's depfile (``deps = gcc``)."""
    cache.mkdir(parents=True)
    (cache / "gen.c").write_text("int kernel;\n")
    (cache / "build.ninja").write_text(
        "rule cc\n"
        f"  command = {sys.executable} {tools / 'fake_cc.py'} $in $out $out.d "
        f"{site / 'include' / 'ffi.h'}\n"
        "  depfile = $out.d\n"
        "  deps = gcc\n"
        f"build {cache / 'kernel.o'}: cc {cache / 'gen.c'}\n")


def ninja_plan(cache: Path) -> str:
    """What ninja would do now (``-n``), with its reasons (``-d explain``)."""
    proc = subprocess.run([str(Path(ninja.BIN_DIR) / "ninja"), "-n", "-d", "explain"],
                          cwd=cache, capture_output=True, text=True, check=True)
    return proc.stdout + proc.stderr


@pytest.fixture()
def next_call(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A first call builds and packs its cache; returns (cache, site) as the next call finds
    them: the package installed again, the cache unpacked with its files' times."""
    site, cache, tools = tmp_path / "site", tmp_path / "fiws", tmp_path / "tools"
    tools.mkdir()
    (tools / "fake_cc.py").write_text(FAKE_CC)
    install_package(site)
    make_cache(cache, site, tools)
    subprocess.run([str(Path(ninja.BIN_DIR) / "ninja")], cwd=cache, check=True,
                   capture_output=True)
    assert "no work to do" in ninja_plan(cache)
    # GNU tar's own format, as `tar czf` on the device writes: whole seconds (a PAX header's
    # fractional time can come back a few ns later than the time ninja's logs recorded)
    with tarfile.open(tmp_path / "cache.tgz", "w:gz", format=tarfile.GNU_FORMAT) as tar:
        tar.add(cache, arcname="fiws")
    shutil.rmtree(cache)
    time.sleep(1.1)  # the next call comes later, on a clock any file system resolves
    install_package(site)
    with tarfile.open(tmp_path / "cache.tgz") as tar:
        tar.extractall(tmp_path, filter="tar")  # keeps each file's time, as tar xzf does
    return cache, site


def test_the_carried_build_is_kept_once_the_reinstalled_package_is_dated_back(next_call) -> None:  # type: ignore[no-untyped-def]
    cache, site = next_call
    before = (cache / "kernel.o").stat().st_mtime_ns
    date_back([site])
    assert "no work to do" in ninja_plan(cache)
    subprocess.run([str(Path(ninja.BIN_DIR) / "ninja")], cwd=cache, check=True,
                   capture_output=True)
    assert (cache / "kernel.o").stat().st_mtime_ns == before  # not rebuilt


def test_without_it_the_reinstalled_header_rebuilds_the_carried_object(next_call) -> None:  # type: ignore[no-untyped-def]
    cache, _ = next_call
    plan = ninja_plan(cache)
    assert "ffi.h" in plan and "kernel.o" in plan and "no work to do" not in plan


def test_touching_the_unpacked_cache_rebuilds_it_too(next_call) -> None:  # type: ignore[no-untyped-def]
    """What the device script did before: every carried file touched at the unpack. ninja
    then finds the object newer than the dependencies it stored for it ("stored deps info out
    of date") and builds it again."""
    cache, site = next_call
    date_back([site])
    for f in sorted(cache.rglob("*"), reverse=True):  # outputs before inputs, as find may
        os.utime(f)
    assert "no work to do" not in ninja_plan(cache)


def test_date_back_dates_files_directories_and_links_themselves(tmp_path: Path) -> None:
    root = tmp_path / "site"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.h").write_text("x")
    target = tmp_path / "elsewhere.h"
    target.write_text("y")
    (root / "link.h").symlink_to(target)
    assert date_back([root]) == 5  # a, b, f.h, link.h and the root
    for p in (root, root / "a", root / "a" / "b", root / "a" / "b" / "f.h"):
        assert p.stat().st_mtime == OLD and p.stat().st_atime == OLD
    assert (root / "link.h").lstat().st_mtime == OLD
    assert target.stat().st_mtime != OLD  # the link's target is not ours to date
    assert (root / "a" / "b" / "f.h").read_text() == "x"


def test_a_missing_path_is_refused_before_anything_is_dated(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    real = tmp_path / "real.h"
    real.write_text("x")
    before = real.stat().st_mtime
    assert main(["date-back", str(real), str(tmp_path / "nope")]) == 2
    assert "no such path" in capsys.readouterr().err
    assert real.stat().st_mtime == before
