"""One rank of a multi-rank run: pytest with a per-rank JUnit report.

Started by ``torch.distributed.run`` (one process per rank: one per GPU in a real world, P
on one GPU in an emulated world, P on the CPU in a CPU world), which sets
``RANK``/``LOCAL_RANK``/``WORLD_SIZE``. Usage::

    python -m tests.harness.rank_pytest --junit-prefix out/multi -- <pytest args>

Writes ``<prefix>.rank<R>.junit.xml`` and ``<prefix>.rank<R>.rc`` (pytest's exit code) and
exits 0 whenever pytest itself ran to its end: torchrun stops every other rank as soon as
one exits non-zero, which would cut their reports short; the runner judges each rank by its
report and its exit code file instead (``tests.harness.suite_run.run_multi``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest


def rank_paths(prefix: str, rank: int | str) -> tuple[Path, Path]:
    """The JUnit report and the exit-code file of ``rank``."""
    return Path(f"{prefix}.rank{rank}.junit.xml"), Path(f"{prefix}.rank{rank}.rc")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--junit-prefix":
        print("usage: rank_pytest --junit-prefix PREFIX [--] PYTEST_ARGS...", file=sys.stderr)
        return 2
    prefix, rest = argv[1], argv[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    junit, rc_file = rank_paths(prefix, os.environ.get("RANK", "0"))
    rc = int(pytest.main([*rest, f"--junitxml={junit}"]))
    rc_file.write_text(f"{rc}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
