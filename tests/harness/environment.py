"""What a record says about the machine and the checkout it ran on.

GPU facts come from ``torch.cuda`` (name, compute capability as ``sm_XY``)
and ``nvidia-smi`` (driver version). Versions: torch, its CUDA, the CuTe DSL
(``nvidia-cutlass-dsl``) and nvshmem4py (None when not installed). Git:
commit and dirty flag of the checkout, or ``MEGAMOE_GIT_COMMIT``/``MEGAMOE_GIT_DIRTY`` when the
caller sets them: a copy sent to a GPU machine may have no ``.git``, or one of an older base
commit with the tree's changes on top (dirty), so the commit the caller names wins and the
checkout's own ``git`` facts stay beside it as ``checkout``.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness.dsl_memos import memos_in_effect

CUTE_DSL_DISTRIBUTIONS = ("nvidia-cutlass-dsl",)
NVSHMEM_DISTRIBUTIONS = ("nvshmem4py-cu13", "nvshmem4py-cu12", "nvshmem4py")


def _version(dists: tuple[str, ...]) -> str | None:
    for d in dists:
        try:
            return md.version(d)
        except md.PackageNotFoundError:
            continue
    return None


def _driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def gpu_list() -> list[dict[str, object]]:
    """Visible CUDA GPUs: index, name, arch (``sm_90``), memory; [] without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append({"index": i, "name": p.name, "arch": f"sm_{p.major}{p.minor}",
                     "total_memory_bytes": int(p.total_memory)})
    return gpus


def git_info(root: Path) -> dict[str, object]:
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    checkout = None
    if commit is not None:
        checkout = {"commit": commit, "dirty": bool(git("status", "--porcelain")),
                    "source": "git"}
    env_commit = os.environ.get("MEGAMOE_GIT_COMMIT")
    if env_commit:
        return {"commit": env_commit, "dirty": os.environ.get("MEGAMOE_GIT_DIRTY", "unknown"),
                "source": "env", "checkout": checkout}
    if checkout is not None:
        return checkout
    return {"commit": None, "dirty": "unknown",
            "source": "unavailable (no .git; set MEGAMOE_GIT_COMMIT)"}


def collect_environment() -> dict[str, object]:
    import torch

    return {
        "gpus": gpu_list(),
        "driver": _driver_version(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cute_dsl": _version(CUTE_DSL_DISTRIBUTIONS),
        "nvshmem4py": _version(NVSHMEM_DISTRIBUTIONS),
        "cute_dsl_arch_env": os.environ.get("CUTE_DSL_ARCH"),
        "dsl_memos": memos_in_effect(),
    }
