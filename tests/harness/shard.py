"""One shard of a qualification suite: ``qualify.py --suite single --shard I/N``.

Why: a device call runs at most 600 s (``/work/.library/device/README.md``), and the
``single`` suite outgrew one call (session 32: 657 tests, 5 600 s of test time on 12
workers; the xdist phase 490 s, so the one-process phase was cut off by the suite's
timeout; docs/perf.md "Session 32"). Shard ``I`` of ``N`` runs the suite's tests whose node
id hashes to ``I - 1`` modulo ``N`` (``in_shard``: CRC-32 of the node id, so the same test
lands in the same shard on every machine and in every xdist worker); the ``N`` shards
partition the suite. Each shard writes its own record; the ledger counts ``single`` as
qualified by an unsharded passing record or by passing records of all ``N`` shards with the
same kernel and test-source digests (``tests.harness.ledger``).

The selection is a pytest plugin (``shard_plugin``) loaded with ``-p`` only when a shard
is asked for, so an unsharded run collects exactly what it did before.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

SPLIT_SUITE = "single"
"""The one suite a shard splits, run alone or inside ``gpu`` (whose sanitizer tools run whole:
the sanitize suite's cases are not pytest node ids of ``single``)."""
SHARD_OPTION = "--megamoe-shard"
"""The pytest option ``shard_plugin`` adds: ``I/N``."""
SHARD_PLUGIN = "tests.harness.shard_plugin"
_FORM = re.compile(r"^([1-9][0-9]*)/([1-9][0-9]*)$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``; ``count`` >= 2 (one shard is the whole suite:
    run it unsharded)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 2 or not 1 <= self.index <= self.count:
            raise ValueError(f"shard: expected I/N with N >= 2 and 1 <= I <= N, got "
                             f"{self.index}/{self.count}")

    @property
    def text(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"I/N"`` as a ``Shard``; a ``ValueError`` naming the form otherwise."""
    m = _FORM.match(text.strip())
    if m is None:
        raise ValueError(f"shard: expected I/N (e.g. 1/2), got {text!r}")
    return Shard(int(m.group(1)), int(m.group(2)))


def in_shard(nodeid: str, shard: Shard) -> bool:
    """Whether the test ``nodeid`` belongs to ``shard`` (module docstring)."""
    return zlib.crc32(nodeid.encode()) % shard.count == shard.index - 1
