#!/usr/bin/env python3
"""Qualification runner: runs a suite strictly and writes an auditable record.

Usage: python3 qualify.py --suite host --output-dir out/qualification

Run with any Python 3.11+: when the project environment is not active, this
script sets it up through ``run_tests.sh --python`` and re-executes itself there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _ensure_environment() -> None:
    """Re-exec inside the project environment (stdlib only until this returns)."""
    if os.environ.get("MEGAMOE_ENV_READY") == "1":
        return
    python = subprocess.check_output(["bash", str(ROOT / "run_tests.sh"), "--python"], text=True)
    python = python.strip().splitlines()[-1]
    if "/" in python and not os.path.isabs(python):  # run_tests.sh answers from ROOT
        python = str(ROOT / python)
    os.environ["MEGAMOE_ENV_READY"] = "1"
    # MEGAMOE_PYTHON may name an interpreter on PATH (e.g. python3 on the GPU machine).
    os.execvp(python, [python, str(Path(__file__).resolve()), *sys.argv[1:]])


def main() -> int:
    """``python3 qualify.py ...`` and the ``megamoe-qualify`` console script (an editable
    install: the qualification needs this tree's tests)."""
    _ensure_environment()
    sys.path.insert(0, str(ROOT))
    from tests.harness.qualify_main import main as qualify

    return qualify(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
