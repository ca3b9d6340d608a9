"""The slim FlashInfer tree the GPU machine needs for the sm90 MegaMoE backends:
``python -m devtools.flashinfer_slim WHEEL OUT_DIR``.

The whole ``flashinfer-python`` wheel is 62 MB and ``import flashinfer`` pulls in most of it;
``megamoe.backends.flashinfer_loader`` imports ``flashinfer.moe_ep`` with stub parents, which
needs ``flashinfer/moe_ep/`` (its Python, CUDA sources and manifests) and the few helper
modules and headers below. This packs exactly those out of the wheel into
``OUT_DIR/flashinfer.tar.xz`` (``ARCHIVE``: members ``flashinfer/...``, 11.6 MiB unpacked, about
1 MiB packed, so that a call carrying it beside our CuTe DSL and the JIT cache stays under the
64 MiB a device call takes) and prints both sizes; ``devtools/flashinfer_device.sh`` unpacks it
on the machine and points ``MEGAMOE_FLASHINFER_ROOT`` at the unpacked folder (elsewhere, unpack
it and do the same). The JIT also needs ``apache-tvm-ffi``,
``cuda-python``, ``nvidia-ml-py``, ``filelock``, ``packaging``, ``ninja`` and an nvcc that
builds sm_90a, on the machine.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from devtools.pack_device_wheels import wheel_to_tar_xz

ARCHIVE = "flashinfer.tar.xz"
"""The file ``slim`` writes in ``OUT_DIR`` (the device script's name for it too)."""

KEEP_PREFIXES = ("flashinfer/moe_ep/",)
KEEP_FILES = tuple(f"flashinfer/{name}" for name in (
    "_build_meta.py", "version.py", "api_logging.py", "fi_trace.py", "utils.py",
    "cuda_utils.py", "compilation_context.py",
    "jit/env.py", "jit/core.py", "jit/utils.py", "jit/cpp_ext.py", "jit/spdlog.py",
    "jit/_cuda_architecture.py",
    "comm/mnnvl.py", "comm/dlpack_utils.py", "comm/mapping.py", "comm/abstractions.py",
    "comm/comm_backend.py", "comm/fd_exchange.py", "comm/torch_symmetric_memory.py",
    "data/csrc/tvm_ffi_utils.h", "data/include/flashinfer/layout.cuh",
))
"""Helpers ``moe_ep``'s sm90 backends import or compile with (besides ``moe_ep`` itself)."""


def kept(name: str) -> bool:
    """Whether the wheel's file ``name`` goes into the archive."""
    return name.startswith(KEEP_PREFIXES) or name in KEEP_FILES


def slim(wheel: Path, out: Path) -> tuple[int, int, list[str]]:
    """Pack the kept files of ``wheel`` into ``out/ARCHIVE`` (``pack_device_wheels``'s
    ``wheel_to_tar_xz``, the one way this project turns a wheel into an archive); ``(files,
    bytes unpacked, missing)``."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        nbytes = sum(i.file_size for i in z.infolist() if not i.is_dir() and kept(i.filename))
    out.mkdir(parents=True, exist_ok=True)
    files = wheel_to_tar_xz(wheel, out / ARCHIVE, keep=kept)
    return files, nbytes, [f for f in KEEP_FILES if f not in names]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    files, nbytes, missing = slim(Path(argv[0]), Path(argv[1]))
    packed = (Path(argv[1]) / ARCHIVE).stat().st_size
    print(f"{files} files, {nbytes / 2**20:.1f} MiB unpacked, {packed / 2**20:.1f} MiB in "
          f"{Path(argv[1]) / ARCHIVE}")
    if missing:
        print("missing from the wheel: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
