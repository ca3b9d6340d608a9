"""Throwaway trees for the host tests that run the harness on stand-in tests and tools."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """Write each ``files`` entry (a path relative to ``root``: its text) under ``root``,
    making the folders; returns ``root``."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def write_executable(path: Path, script: str) -> Path:
    """``script`` at ``path``, executable by its owner; returns ``path``."""
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def import_this_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put this checkout first on ``PYTHONPATH``: the harness modules a throwaway tree's
    processes import (``rank_pytest``, the plugins) live here, not in the tree."""
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
