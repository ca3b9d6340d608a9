"""``devtools.pack_device_wheels``: the repacked CuTe DSL unpacks on the device to exactly the
wheel's files, contents and modes, and the prelude sets the environment (docs/gpu.md)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from devtools import pack_device_wheels as pdw

FILES = {  # path in the wheel -> (content, mode)
    "nvidia_cutlass_dsl/python_packages/cutlass/__init__.py": (b"VERSION = '4.3.5'\n", 0o644),
    "nvidia_cutlass_dsl/lib/libfake.so": (bytes(range(256)) * 64, 0o755),
    "nvidia_cutlass_dsl/bin/tool": (b"#!/bin/sh\necho tool\n", 0o755),
    "nvidia_cutlass_dsl-4.3.5.dist-info/RECORD": (b"", 0o644),
}


def make_wheel(path: Path, files: dict[str, tuple[bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 12, 3, 12, 0, 0))
            info.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(info, data)
    return path


def differences(site: Path, files: dict[str, tuple[bytes, int]]) -> list[str]:
    """Where the unpacked tree under ``site`` differs from ``files``."""
    found = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    out = [f"unexpected {p}" for p in sorted(found - files.keys())]
    for name, (data, mode) in files.items():
        p = site / name
        if not p.is_file():
            out.append(f"missing {name}")
        elif p.read_bytes() != data:
            out.append(f"content of {name}")
        elif stat.S_IMODE(p.stat().st_mode) != mode:
            out.append(f"mode of {name}: {oct(stat.S_IMODE(p.stat().st_mode))} != {oct(mode)}")
    return out


def source_prelude(root: Path, site: Path) -> str:
    """Source the prelude as the device does; returns the PYTHONPATH it exports."""
    env = {**os.environ, "MEGAMOE_DEVICE_SITE": str(site), "PYTHONPATH": "",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", "source .whl/prelude.sh && echo $PYTHONPATH"],
                          cwd=root, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".whl").mkdir(parents=True)
    (root / ".git" / "info").mkdir(parents=True)
    make_wheel(root / ".whl" / "nvidia_cutlass_dsl-4.3.5-cp312-cp312-manylinux_2_28_x86_64.whl",
               FILES)
    make_wheel(root / ".whl" / "nvshmem4py_cu13-0.4.1-cp312-cp312-manylinux_2_28_x86_64.whl",
               {"nvshmem/__init__.py": (b"", 0o644)})
    (root / ".whl" / "prelude.sh").write_text("# the shared prelude\n")
    (root / ".whl" / "prelude.sh").chmod(0o444)
    return root


def test_the_unpacked_site_is_the_wheel_and_the_prelude_points_at_it(checkout, tmp_path):
    archive = pdw.pack(checkout)
    assert archive == checkout / ".whl" / pdw.ARCHIVE
    assert sorted(p.name for p in (checkout / ".whl").iterdir()) == ["prelude.sh", pdw.ARCHIVE]
    assert len(list((checkout / pdw.SPARE).glob("*.whl"))) == 2  # kept, out of the carry
    assert f"/{pdw.SPARE}/" in (checkout / ".git" / "info" / "exclude").read_text()
    site = tmp_path / "site"
    path = source_prelude(checkout, site)
    assert differences(site, FILES) == []
    assert path.split(os.pathsep)[:3] == [
        str(site), str(site / "nvidia_cutlass_dsl" / "python_packages"), str(checkout)]


def test_a_rerun_keeps_the_archive_and_rewrites_the_prelude(checkout):
    archive = pdw.pack(checkout)
    before = archive.read_bytes()
    (checkout / ".whl" / "prelude.sh").write_text("# stale\n")
    pdw.pack(checkout)
    assert archive.read_bytes() == before
    assert (checkout / ".whl" / "prelude.sh").read_text() == pdw.PRELUDE
    assert (checkout / ".git" / "info" / "exclude").read_text().count(pdw.SPARE) == 1


def test_no_wheel_and_no_archive_is_refused(tmp_path):
    (tmp_path / ".whl").mkdir()
    with pytest.raises(SystemExit, match="fetch-wheels"):
        pdw.pack(tmp_path)


def test_the_check_catches_a_dropped_exec_bit(tmp_path):
    """The comparison above can fail: an archive whose members lost their modes (as a
    ``zipfile.extractall`` would) is caught."""
    wheel = make_wheel(tmp_path / "w.whl", FILES)
    pdw.wheel_to_tar_xz(wheel, tmp_path / "a.tar.xz")
    with tarfile.open(tmp_path / "a.tar.xz") as tf:
        members = tf.getmembers()
        for m in members:
            m.mode = 0o644
        tf.extractall(tmp_path / "site", members=members, filter="tar")
    assert any(d.startswith("mode of nvidia_cutlass_dsl/bin/tool") for d in
               differences(tmp_path / "site", FILES))


@pytest.mark.parametrize("flag", sorted(pdw.EXTRA_SITES))
def test_an_extra_site_holds_every_wheel_and_the_wheels_go(tmp_path, flag):
    """``--nvshmem``, ``--fi-dsl``: the wheels of the site's folder become one site (each file,
    content and mode; ``--fi-dsl`` in two archives that together hold it), the wheels are
    deleted and the folders are excluded from git."""
    site_spec = pdw.EXTRA_SITES[flag]
    root = tmp_path / "repo"
    folder = root / site_spec.folder
    folder.mkdir(parents=True)
    (root / ".git" / "info").mkdir(parents=True)
    parts = [{"nvshmem/core/__init__.py": (b"X = 1\n", 0o644),
              "nvshmem/lib/libnv.so": (bytes(range(256)), 0o755)},
             {"cuda/core/__init__.py": (b"", 0o644)}]
    for i, files in enumerate(parts):
        make_wheel(folder / f"w{i}-1.0-py3-none-any.whl", files)
    pdw.pack_site(root, site_spec, download=False)
    site = tmp_path / "site"
    excluded = (root / ".git" / "info" / "exclude").read_text().splitlines()
    assert f"/{site_spec.folder}/" in excluded
    if site_spec.parts == 1:
        folders = [folder]
    else:  # the largest file alone in part 1, the rest in part 2, each folder excluded
        assert site_spec.parts == 2
        folders = [root / f"{site_spec.folder}-{i}" for i in (1, 2)]
        for i, part in enumerate(folders, start=1):
            assert sorted(p.name for p in part.iterdir()) == sorted((pdw.ARCHIVE, pdw.PART_FILE))
            assert (part / pdw.PART_FILE).read_text() == f"{i} 2\n"
            assert f"/{part.name}/" in excluded
        with tarfile.open(folders[0] / pdw.ARCHIVE) as tf:
            assert tf.getnames() == ["nvshmem/lib/libnv.so"]
        assert sorted(p.name for p in folder.iterdir()) == []  # the wheels went
    for one in folders:
        assert pdw.ARCHIVE in [p.name for p in one.iterdir()]
        with tarfile.open(one / pdw.ARCHIVE) as tf:
            tf.extractall(site, filter="tar")
    assert differences(site, {**parts[0], **parts[1]}) == []
