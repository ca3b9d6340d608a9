"""Content hashes of the sources a qualification record vouches for.

Definitions (one place; the ledger and the records use them):

- **kernel sources**: every file under ``megamoe/`` except ``__pycache__/``,
  ``*.pyc``, ``megamoe/bench/`` (benchmarks do not change results) and
  ``megamoe/backends/`` (the adapters through which the tests drive an
  implementation: harness code, counted with the tests). Kernels live next to
  the Python that launches them, so the layer API, staging, validation and
  launchers count: any of them can change what a kernel computes.
- **oracle**: every file under ``oracle/`` (same exclusions).
- **tests**: every file under ``tests/``, ``fixtures/`` and ``megamoe/backends/``
  (same exclusions).

A group's digest is the SHA-256 of its sorted ``path\\0sha256\\n`` lines, so
it changes when a file is added, removed, renamed or edited. Paths are
relative to the repository root, POSIX style.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

KERNEL_SOURCE_DIR = "megamoe"
BACKEND_ADAPTER_DIR = "megamoe/backends"
KERNEL_SOURCE_EXCLUDED_DIRS = ("megamoe/bench", BACKEND_ADAPTER_DIR)
KERNEL_MODULE_GLOB = "*_kernel.py"
SOURCE_GROUPS: dict[str, tuple[str, ...]] = {
    "kernel": (KERNEL_SOURCE_DIR,),
    "oracle": ("oracle",),
    "tests": ("tests", "fixtures", BACKEND_ADAPTER_DIR),
}
_EXCLUDED_PARTS = ("__pycache__",)
_EXCLUDED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class SourceHash:
    """Per-file SHA-256 hashes of a source group and their combined digest."""

    digest: str
    files: dict[str, str]

    def as_dict(self) -> dict[str, object]:
        return {"digest": self.digest, "files": dict(self.files)}


def _under(rel: str, folder: str) -> bool:
    return rel == folder or rel.startswith(folder + "/")


def _included(rel: str, group: str) -> bool:
    parts = rel.split("/")
    if any(p in _EXCLUDED_PARTS for p in parts) or rel.endswith(_EXCLUDED_SUFFIXES):
        return False
    return group != "kernel" or not any(_under(rel, d) for d in KERNEL_SOURCE_EXCLUDED_DIRS)


def group_files(root: Path, group: str) -> list[str]:
    """Sorted relative paths of the files in ``group`` (see module docstring)."""
    out = []
    for top in SOURCE_GROUPS[group]:
        base = root / top
        if not base.is_dir():
            continue
        for p in base.rglob("*"):
            if p.is_file():
                rel = p.relative_to(root).as_posix()
                if _included(rel, group):
                    out.append(rel)
    return sorted(out)


def hash_group(root: Path, group: str) -> SourceHash:
    """The ``SourceHash`` of ``group`` under ``root``."""
    files = {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest()
             for rel in group_files(root, group)}
    return SourceHash(combined_digest(files), files)


def combined_digest(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()


def source_hashes(root: Path) -> dict[str, SourceHash]:
    return {group: hash_group(root, group) for group in SOURCE_GROUPS}


def kernel_modules(root: Path) -> list[str]:
    """Kernel modules (``megamoe/**/*_kernel.py``, the registry's convention)."""
    return [rel for rel in group_files(root, "kernel") if Path(rel).match(KERNEL_MODULE_GLOB)]


def diff_files(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Lines ``M path`` / ``A path`` / ``D path`` from ``old`` to ``new``, sorted by path."""
    lines = []
    for rel in sorted(set(old) | set(new)):
        if rel not in old:
            lines.append(f"A {rel}")
        elif rel not in new:
            lines.append(f"D {rel}")
        elif old[rel] != new[rel]:
            lines.append(f"M {rel}")
    return lines
