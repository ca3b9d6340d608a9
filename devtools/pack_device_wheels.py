"""Repack ``.whl`` for the device machine's 64 MiB limit: ``python -m devtools.pack_device_wheels``.

The device copies the working tree plus the carried paths, at most 64 MiB (docs/gpu.md).
``../shared/device/fetch-wheels.sh`` leaves the CuTe DSL wheel (59 MB, a zip) in ``.whl``;
the tree (docs included) is about 8 MB and grows every session, so by session 20 less than
1 MB was left. This tool turns the wheel into ``.whl/site.tar.xz``: the files ``pip install
--target`` would place, with their modes, xz-compressed (about 41 MB). It moves every wheel
to ``.whl-spare/`` (the nvshmem wheel is not needed on one GPU) and writes
``.whl/prelude.sh``, which unpacks the archive with Python's ``tarfile`` (no pip, no xz
binary needed on the device) and sets the same environment as the shared prelude. Safe to
rerun: with no wheel left in ``.whl`` it only rewrites the prelude.

``python -m devtools.pack_device_wheels --nvshmem`` does the same for nvshmem4py and the
two packages it needs that the GPU image may lack, into ``.whl-nvshmem/site.tar.xz``
(``devtools/nvshmem_device.sh`` unpacks it); ``--fi-dsl`` for the CuTe DSL that FlashInfer's
FP8 pull backend needs, in two parts, ``.whl-fidsl-1/site.tar.xz`` and
``.whl-fidsl-2/site.tar.xz`` (``devtools/flashinfer_device.sh stage-dsl`` unpacks each in a
call of its own).

Written here rather than using pip: pip installs a wheel but cannot repack one; the
standard library's ``zipfile``, ``tarfile`` and ``lzma`` do the rest.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ARCHIVE = "site.tar.xz"
SPARE = ".whl-spare"
DSL_WHEEL_GLOB = "nvidia_cutlass_dsl-*.whl"
PRELUDE = """\
# Source this at the start of every command on the GPU machine:
#   source .whl/prelude.sh && <your command>
# Unpacks the CuTe DSL (devtools/pack_device_wheels.py) into $MEGAMOE_DEVICE_SITE (default
# /tmp/site) once, then sets the environment.
SITE=${MEGAMOE_DEVICE_SITE:-/tmp/site}
if [ ! -d "$SITE/nvidia_cutlass_dsl" ]; then
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='tar')" \\
    .whl/site.tar.xz "$SITE" || return 1
fi
export PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/python_packages:$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUTE_DSL_ARCH=${CUTE_DSL_ARCH:-sm_90a}
# NVLink multicast stays off on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
"""


def exclude_from_git(root: Path, folder: str) -> None:
    """List ``/folder/`` in the checkout's ``.git/info/exclude`` (once; no-op outside git)."""
    exclude = root / ".git" / "info" / "exclude"
    if exclude.parent.is_dir():
        lines = exclude.read_text().splitlines() if exclude.is_file() else []
        if f"/{folder}/" not in lines:
            exclude.write_text("\n".join([*lines, f"/{folder}/"]) + "\n")


def wheel_to_tar_xz(wheel: Path | list[Path], out: Path, preset: int = 6,
                    keep: Callable[[str], bool] | None = None) -> int:
    """Write every file of ``wheel`` (or of each wheel of a list, into one site; only the
    files whose path ``keep`` accepts, when given) into the xz tar ``out`` under its path in
    the wheel, with its Unix mode (0644 when the zip holds none) and time; returns the file
    count. Written to a ``.part`` file first, so an interrupted run leaves no truncated
    archive."""
    part = out.with_name(out.name + ".part")
    count = 0
    with tarfile.open(part, "w:xz", preset=preset) as tf:
        for one in wheel if isinstance(wheel, list) else [wheel]:
            with zipfile.ZipFile(one) as zf:
                for info in zf.infolist():
                    if info.is_dir() or (keep is not None and not keep(info.filename)):
                        continue
                    data = zf.read(info)
                    member = tarfile.TarInfo(info.filename)
                    member.size = len(data)
                    member.mode = (info.external_attr >> 16) & 0o777 or 0o644
                    member.mtime = int(time.mktime((*info.date_time, 0, 0, -1)))
                    tf.addfile(member, io.BytesIO(data))
                    count += 1
    part.replace(out)
    return count


@dataclass(frozen=True)
class ExtraSite:
    """Wheels packed as one site into ``folder/site.tar.xz`` for a device call of their own
    (``pack_site``)."""

    folder: str
    wheels: tuple[str, ...]
    """pip requirements, downloaded ``--no-deps`` for CPython 3.12 on x86-64 Linux."""
    parts: int = 1
    """More than one: the site is too big for one call and goes in ``parts`` archives,
    ``<folder>-<i>/site.tar.xz`` for i = 1 to ``parts`` (``split_files``), each carried in a
    call of its own."""


NVSHMEM = ExtraSite(".whl-nvshmem", ("nvshmem4py-cu13==0.4.1", "cuda-core>=0.5.0,<0.6",
                                     "cuda-pathfinder>=1.2.3"))
"""nvshmem4py and the two packages it needs that the GPU image may lack (its other
requirements, the NVSHMEM library, cuda-bindings and numpy, come with torch's CUDA build);
about 13 MiB, for ``devtools/nvshmem_device.sh``."""
FI_DSL_VERSION = "4.7.1"
FI_DSL = ExtraSite(".whl-fidsl", (
    f"nvidia-cutlass-dsl=={FI_DSL_VERSION}", f"nvidia-cutlass-dsl-libs-base=={FI_DSL_VERSION}",
    f"nvidia-cutlass-dsl-libs-core=={FI_DSL_VERSION}",
    f"nvidia-cutlass-dsl-libs-cu13=={FI_DSL_VERSION}", "nvidia-cuda-nvdisasm>=13.3,<14"),
    parts=2)
"""The CuTe DSL that FlashInfer's sm90 FP8 pull backend needs (``flashinfer-python==0.7.2.post1``
declares ``nvidia-cutlass-dsl>=4.6.2a0``; on 4.5.2 its kernels did not compile; ours is 4.3.5 and
cannot share a process with it), with the CUDA 13 build of its compiler (the GPU machine's
driver serves CUDA 13.0) and the nvdisasm it requires: about 62 MiB as xz, over one call with
the tree, so in two parts (the compiler's 172 MiB module alone in the first), each unpacked
by ``devtools/flashinfer_device.sh stage-dsl`` in a call of its own."""
EXTRA_SITES = {"--nvshmem": NVSHMEM, "--fi-dsl": FI_DSL}


PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64")
"""The platform tags of every extra site's wheels, each named: pip (23.2) does not take an
older manylinux tag for a newer one."""


def pack_site(root: Path, site: ExtraSite, download: bool = True) -> Path:
    """``root/<site.folder>/site.tar.xz``: ``site``'s wheels as one site. The wheels are
    deleted once packed and the folder is kept out of git."""
    folder = root / site.folder
    folder.mkdir(exist_ok=True)
    if download:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12",
                        *(a for tag in PLATFORMS for a in ("--platform", tag)),
                        "-d", str(folder), *site.wheels], check=True)
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"no wheel in {folder}")
    if site.parts == 1:
        archives = [folder / ARCHIVE]
        n = wheel_to_tar_xz(wheels, archives[0])
        print(f"{', '.join(w.name for w in wheels)}: {n} files -> {archives[0]} "
              f"({archives[0].stat().st_size >> 20} MiB)")
    else:
        archives = []
        for i, names in enumerate(split_files(wheels, site.parts), start=1):
            part = root / f"{site.folder}-{i}"
            part.mkdir(exist_ok=True)
            archives.append(part / ARCHIVE)
            n = wheel_to_tar_xz(wheels, archives[-1], keep=names.__contains__)
            (part / PART_FILE).write_text(f"{i} {site.parts}\n")
            exclude_from_git(root, part.name)
            print(f"part {i} of {site.parts}: {n} files -> {archives[-1]} "
                  f"({archives[-1].stat().st_size >> 20} MiB)")
    for wheel in wheels:
        wheel.unlink()
    exclude_from_git(root, site.folder)
    return archives[0]


PART_FILE = "part"
"""In each part's folder: ``"<i> <n>"``, which part of how many it is."""


def split_files(wheels: list[Path], parts: int) -> list[frozenset[str]]:
    """The files of ``wheels`` in ``parts`` groups: the ``parts - 1`` largest files one in
    each of the first groups, every other file in the last (a site too big for one call is
    too big because of a few large libraries)."""
    sizes: dict[str, int] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            sizes.update({i.filename: i.file_size for i in zf.infolist() if not i.is_dir()})
    largest = sorted(sizes, key=lambda n: -sizes[n])[: parts - 1]
    return [frozenset({n}) for n in largest] + [frozenset(sizes) - frozenset(largest)]


def pack(root: Path) -> Path:
    """Repack ``root/.whl`` (module docstring); returns the archive's path."""
    whl = root / ".whl"
    wheels = sorted(whl.glob(DSL_WHEEL_GLOB))
    if len(wheels) > 1:
        raise SystemExit(f"more than one CuTe DSL wheel in {whl}: {[w.name for w in wheels]}")
    archive = whl / ARCHIVE
    if wheels:
        n = wheel_to_tar_xz(wheels[0], archive)
        print(f"{wheels[0].name}: {n} files -> {archive} ({archive.stat().st_size >> 20} MiB)")
    if not archive.is_file():
        raise SystemExit(f"no {DSL_WHEEL_GLOB} and no {ARCHIVE} in {whl}: run "
                         "../shared/device/fetch-wheels.sh first")
    spare = root / SPARE
    spare.mkdir(exist_ok=True)
    for wheel in sorted(whl.glob("*.whl")):
        wheel.replace(spare / wheel.name)
    prelude = whl / "prelude.sh"
    prelude.unlink(missing_ok=True)  # the shared copy is read-only
    prelude.write_text(PRELUDE)
    exclude_from_git(root, SPARE)
    return archive


def main() -> int:
    top = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                              text=True, check=True).stdout.strip())
    args = sys.argv[1:]
    if len(args) == 1 and args[0] in EXTRA_SITES:
        pack_site(top, EXTRA_SITES[args[0]])
    elif args:
        raise SystemExit("usage: python -m devtools.pack_device_wheels "
                         f"[{' | '.join(EXTRA_SITES)}]")
    else:
        pack(top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
