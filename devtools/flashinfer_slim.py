"""The slim FlashInfer tree the GPU machine needs for the sm90 MegaMoE backends:
``python -m devtools.flashinfer_slim WHEEL OUT_DIR``.

The whole ``flashinfer-python`` wheel is 62 MB and ``import flashinfer`` pulls in most of it;
``megamoe.backends.flashinfer_loader`` imports ``flashinfer.moe_ep`` with stub parents, which
needs ``flashinfer/moe_ep/`` (its Python, CUDA sources and manifests) and the few helper
modules and headers below. This copies exactly those out of the wheel into ``OUT_DIR``
(``OUT_DIR/flashinfer/...``), about 13 MB unpacked, and prints its size; point
``MEGAMOE_FLASHINFER_ROOT`` at ``OUT_DIR``. The JIT also needs ``apache-tvm-ffi``,
``cuda-python``, ``nvidia-ml-py``, ``filelock``, ``packaging``, ``ninja`` and an nvcc that
builds sm_90a, on the machine.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

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


def slim(wheel: Path, out: Path) -> tuple[int, int, list[str]]:
    """Copy the kept files of ``wheel`` into ``out``; ``(files, bytes, missing)``."""
    files = nbytes = 0
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        missing = [f for f in KEEP_FILES if f not in names]
        for name in sorted(names):
            if name.endswith("/") or not (name.startswith(KEEP_PREFIXES) or name in KEEP_FILES):
                continue
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            data = z.read(name)
            target.write_bytes(data)
            files += 1
            nbytes += len(data)
    return files, nbytes, missing


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    files, nbytes, missing = slim(Path(argv[0]), Path(argv[1]))
    print(f"{files} files, {nbytes / 2**20:.1f} MiB in {argv[1]}")
    if missing:
        print("missing from the wheel: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
