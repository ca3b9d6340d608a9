"""One rank of a real multi-GPU run: pytest with a per-rank JUnit report.

Started by ``torch.distributed.run`` (one process per GPU), which sets
``RANK``/``LOCAL_RANK``/``WORLD_SIZE``. Usage::

    python -m tests.harness.rank_pytest --junit-prefix out/multi -- <pytest args>
"""

from __future__ import annotations

import os
import sys

import pytest


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--junit-prefix":
        print("usage: rank_pytest --junit-prefix PREFIX [--] PYTEST_ARGS...", file=sys.stderr)
        return 2
    prefix, rest = argv[1], argv[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    rank = os.environ.get("RANK", "0")
    return int(pytest.main([*rest, f"--junitxml={prefix}.rank{rank}.junit.xml"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
