"""Session-27 analysis (not a test, not a benchmark of record): where a kernel's warps stall,
from Nsight Compute's source page exported as CSV with SASS
(``ncu -i REPORT --page source --print-source sass --csv``; ``ncu_decode_stalls.sh`` writes
one per case).

Nsight samples every warp's state at a fixed interval; the CSV gives each SASS instruction's
samples by stall reason and its execution count (warp instructions). A warp-specialized
kernel's roles run different code, so the execution counts sort the instructions into roles:
in the specialized MX GEMM at DeepSeek FC1 the decode loop's instructions (unrolled 8 times)
each run ``CTAs x 4 warps x K / 64 / 8`` times, the MMA loop's ``CTAs x 4 x (K / 64 - 1)``.

    python3 docs/wip/ncu_stalls.py sass.csv                 # samples per execution count
    python3 docs/wip/ncu_stalls.py sass.csv --count 3584    # one role: what it waits on

With ``--count`` the role's samples are split by what the instruction is: the branch after
an mbarrier try-wait (waiting on that barrier: a TMA stage's full barrier, or the decoded
pipeline's empty barrier at ``EMPTY_BARRIER_OFFSETS``), shared loads and stores, the proxy
fence, barrier arrivals, and everything else (the integer work and its dependency stalls).
"""

from __future__ import annotations

import argparse
import collections
import csv
import re
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
EMPTY_BARRIER_OFFSETS = ("0x58", "0x60", "0x68", "0x70")
"""Byte offsets of the decoded pipeline's empty barriers in the specialized MX kernel's
shared memory at 4 TMA stages (``mx_storage``: 8 stage barriers, then 3 or 4 full and 3 or 4
empty decoded-tile barriers, 8 bytes each)."""


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The CSV's stall-reason columns and its instruction rows (the first line names the
    kernel, the second the columns)."""
    lines = list(csv.reader(path.open()))
    header = lines[1]
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    rows = [dict(zip(header, line, strict=True)) for line in lines[2:]
            if len(line) == len(header)]
    return stalls, rows


def by_count(stalls: list[str], rows: list[dict[str, str]]) -> None:
    """Samples per execution count (a role), its instruction count and top stall reasons."""
    groups: dict[int, list] = collections.defaultdict(lambda: [0, 0, collections.Counter()])
    for row in rows:
        g = groups[int(row[EXECUTED] or 0)]
        g[0] += int(row[SAMPLES] or 0)
        g[1] += 1
        for s in stalls:
            g[2][s] += int(row[s] or 0)
    total = sum(g[0] for g in groups.values()) or 1
    for count, (samples, n, reasons) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:12]:
        print(f"executed {count:>9}: {n:5d} instructions, {samples:7d} samples "
              f"({100 * samples / total:.1f} %), {reasons.most_common(4)}")


def what_it_waits_on(rows: list[dict[str, str]], count: int) -> None:
    """One role's samples by the kind of instruction they sit on (module docstring)."""
    kinds: collections.Counter = collections.Counter()
    previous = ""
    for row in rows:
        if int(row[EXECUTED] or 0) != count:
            previous = ""
            continue
        source, samples = row["Source"], int(row[SAMPLES] or 0)
        if "BRA" in source and "TRYWAIT" in previous:
            barrier = re.search(r"\[(.*?)\]", previous)
            empty = barrier is not None and any(o in barrier.group(1)
                                                for o in EMPTY_BARRIER_OFFSETS)
            kinds["wait: free B tile" if empty else "wait: TMA stage"] += samples
        elif "LDS" in source or "STS" in source:
            kinds["shared load / store"] += samples
        elif "FENCE" in source or "MEMBAR" in source:
            kinds["proxy fence"] += samples
        elif "ARRIVE" in source:
            kinds["barrier arrival"] += samples
        else:
            kinds["integer work and the rest"] += samples
        previous = source
    total = sum(kinds.values()) or 1
    for kind, samples in kinds.most_common():
        print(f"{kind:28s} {samples:7d} ({100 * samples / total:.0f} %)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", type=Path)
    ap.add_argument("--count", type=int, help="one role's execution count")
    args = ap.parse_args()
    stalls, rows = read_rows(args.csv)
    if args.count is None:
        by_count(stalls, rows)
    else:
        what_it_waits_on(rows, args.count)


if __name__ == "__main__":
    main()
