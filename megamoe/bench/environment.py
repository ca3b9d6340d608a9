"""The environment of a run, read (never set) at its start: host, versions, commit, device state."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from megamoe.bench.device import Backend

ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = ("torch", "nvidia-cutlass-dsl", "numpy", "matplotlib", "triton", "nvshmem4py-cu13")
_ENV_VARS = ("CUDA_VISIBLE_DEVICES", "WORLD_SIZE", "LOCAL_RANK", "CUDA_LAUNCH_BLOCKING",
             "MEGAMOE_PDL", "MEGAMOE_CHECK_ROUTES")
"""Recorded with every benchmark when set (``MEGAMOE_PDL``: megamoe.pdl, on unless 0, false,
off or no; ``MEGAMOE_CHECK_ROUTES``: megamoe.route_check_setting)."""


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except Exception:
        return None
    return proc.stdout.strip()


def checkout_commit() -> tuple[str | None, bool | str | None, str]:
    """The commit a run measures, its dirty flag, and where both come from: the caller's
    ``MEGAMOE_GIT_COMMIT`` (and ``MEGAMOE_GIT_DIRTY``, else ``"unknown"``) when set, as for
    qualification records (the tree copied to a GPU machine may carry the git state of another
    checkout: 2026-12-05, a run of a detached commit recorded ``main``'s), else this
    checkout's git."""
    named = os.environ.get("MEGAMOE_GIT_COMMIT")
    if named:
        return named, os.environ.get("MEGAMOE_GIT_DIRTY", "unknown"), "env"
    status = _git("status", "--porcelain")
    return _git("rev-parse", "HEAD"), None if status is None else bool(status), "git"


def source_hash(root: Path = ROOT) -> str:
    """sha256 over the paths and bytes of every ``megamoe/**/*.py`` (identifies the code without git)."""
    h = hashlib.sha256()
    for path in sorted((root / "megamoe").rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def collect_environment(backend: Backend) -> dict[str, Any]:
    """Host, Python, package versions, torch's CUDA build, git commit, source hash, device state."""
    commit, dirty, source = checkout_commit()
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": package_versions(),
        "torch_cuda": torch.version.cuda,
        "git_commit": commit,
        "git_dirty": dirty,
        "git_source": source,
        "source_sha256": source_hash(),
        "env": {k: os.environ[k] for k in _ENV_VARS if k in os.environ},
        "device_before": backend.describe(),
    }
