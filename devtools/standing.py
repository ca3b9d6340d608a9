"""Issue 7's three goal tables from ``layer`` benchmark records:
``python -m devtools.standing RECORD.json[.gz] [RECORD.json[.gz] ...]``.

docs/perf.md's "Where the layer stands" judges the whole layer per recipe and model shape
(one column each) against the issue's goals, case by case (``uniform`` and ``skewed``
routes, ``T``):

1. **Faster than PyTorch**: torch's median time over the arm's, from the record's paired
   comparison ``torch-grouped-mm`` (A) against the arm (B); a verdict other than
   ``faster`` is written beside it in bold. The ``layer-bf16`` arm of a quantized
   benchmark is compared with the quantized arm, not with torch, so its column is torch's
   median over its median, two arms of the same run that were not paired with each other
   (``(unpaired)`` in the header).
2. **T <= 16 within 2x of the weight-streaming floor**: the arm's time over its roofline
   bound (``devtools.roofline``: the touched experts' weights over ``copy_bw``, or the
   FLOPs over the rate where they take longer), for ``T <= FLOOR_MAX_TOKENS``.
3. **T >= 1024 at 50 % of the tensor-core rate**: the record's achieved fraction of the
   arm's matmul-rate ceiling and, in brackets, the fraction the roofline allows any kernel,
   for ``T >= RATE_MIN_TOKENS``.

A column is one arm on one model shape (sorted by recipe, then shape, as docs/perf.md has
them); records are read in the order given and the first record that holds a cell (one
column's case) gives it, so a run of a few cases named first supersedes just those cells of
an older full run named after it (and a bf16 cell comes from the first quantized record
holding it). Cases no record holds print as ``-``. The records are the JSON the benchmark
writes (``megamoe.bench``; docs/perf.md keeps them gzipped beside the reports).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devtools.roofline import BF16_ARMS, TORCH_ARM, Bound, bounds
from megamoe.bench.stats import FASTER

FLOOR_MAX_TOKENS = 16
"""The floor goal's batches: ``T <= 16`` (issue 7)."""
RATE_MIN_TOKENS = 1024
"""The rate goal's batches: ``T >= 1024`` (issue 7)."""
SHAPE_TITLES = {"deepseek": "DeepSeek", "gptoss": "gpt-oss"}
"""How docs/perf.md names the benchmark's model shapes (``megamoe.bench.benchmarks.layer``)."""
_CASE = re.compile(r"^(?P<shape>.+)-(?P<routes>uniform|skewed)-T(?P<tokens>\d+)$")


@dataclass(frozen=True)
class Column:
    """One arm on one model shape (``deepseek``, ``gptoss``)."""

    arm: str
    shape: str

    @property
    def title(self) -> str:
        recipe = "bf16" if self.arm in BF16_ARMS else self.arm.removeprefix("layer-")
        return f"{recipe.replace('-', '_')} {SHAPE_TITLES.get(self.shape, self.shape)}"


@dataclass(frozen=True)
class Cell:
    """What the three tables say about one case of one column (``None``: not measured)."""

    speedup: float | None = None
    """Torch's median time over the arm's."""
    verdict: str | None = None
    """The paired comparison's verdict, or ``None`` where the arms were not paired."""
    floor_ratio: float | None = None
    achieved: float | None = None
    attainable: float | None = None
    rate: str | None = None
    """The matmul-rate ceiling ``achieved`` is a fraction of."""


def load(path: Path) -> dict:
    """A benchmark record, plain or gzipped JSON."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def split_case(case: str) -> tuple[str, str, int]:
    """``(shape, routes, T)`` of a case name such as ``deepseek-uniform-T16``."""
    m = _CASE.match(case)
    if m is None:
        raise ValueError(f"case: expected <shape>-<uniform|skewed>-T<tokens>, got {case!r}")
    return m["shape"], m["routes"], int(m["tokens"])


def _medians(record: dict) -> dict[tuple[str, str], tuple[float, str | None]]:
    """``(case, arm) -> (torch median / arm median, verdict or None)`` for every arm of
    every case that the record compares with torch directly or through a shared arm."""
    out: dict[tuple[str, str], tuple[float, str | None]] = {}
    for case in record["cases"]:
        medians: dict[str, float] = {}
        paired: dict[str, str] = {}
        for comp in case["comparisons"]:
            s = comp["summary"]
            medians.setdefault(comp["a"], s["median_s"][0])
            medians.setdefault(comp["b"], s["median_s"][1])
            if comp["a"] == TORCH_ARM:
                paired[comp["b"]] = s["verdict"]
        if TORCH_ARM not in medians:
            continue
        for arm, median in medians.items():
            if arm != TORCH_ARM:
                out[(case["case"], arm)] = (medians[TORCH_ARM] / median, paired.get(arm))
    return out


def cells(records: Sequence[dict]) -> dict[Column, dict[tuple[str, int], Cell]]:
    """Every column's cells, ``(routes, T) -> Cell``; the first record holding a cell gives
    it."""
    out: dict[Column, dict[tuple[str, int], Cell]] = {}
    for record in records:
        speed = _medians(record)
        rows: list[Bound] = bounds(record)
        for b in rows:
            if b.arm == TORCH_ARM:
                continue
            shape, routes, tokens = split_case(b.case)
            column = out.setdefault(Column(b.arm, shape), {})
            if (routes, tokens) in column:
                continue
            ratio, verdict = speed.get((b.case, b.arm), (None, None))
            rate = None if b.ceiling == "copy_bw" else b.ceiling
            column[(routes, tokens)] = Cell(ratio, verdict, b.seconds / b.bound_s, b.achieved,
                                            b.attainable, rate)
    return out


def _table(columns: Sequence[Column], data: dict, keys: Sequence[tuple[str, int]],
           fmt, mark_unpaired: bool = False) -> list[str]:
    lines = ["| case | " + " | ".join(
                 c.title + (" (unpaired)" if mark_unpaired and _unpaired(c, data) else "")
                 for c in columns) + " |",
             "|" + "---|" * (len(columns) + 1)]
    for routes, tokens in keys:
        row = []
        for col in columns:
            cell = data[col].get((routes, tokens))
            row.append("-" if cell is None else fmt(cell))
        lines.append(f"| {routes} T{tokens} | " + " | ".join(row) + " |")
    return lines


def _unpaired(col: Column, data: dict) -> bool:
    return any(c.speedup is not None and c.verdict is None for c in data[col].values())


def _speed(cell: Cell) -> str:
    if cell.speedup is None:
        return "-"
    text = f"{cell.speedup:.2f}x"
    if cell.verdict is not None and cell.verdict != FASTER:
        return f"**{text} {cell.verdict}**"
    return text


def _floor(cell: Cell) -> str:
    return "-" if cell.floor_ratio is None else f"{cell.floor_ratio:.2f}"


def _rate(cell: Cell) -> str:
    if cell.rate is None:
        return "-"
    return (f"{100 * cell.achieved:.1f}% of {cell.rate.removesuffix('_mm')} "
            f"({100 * cell.attainable:.1f}%)")


def render(records: Sequence[dict]) -> str:
    """The three tables, one column per recipe and shape (sorted by recipe, then shape)."""
    data = cells(records)
    columns = sorted(data, key=lambda c: (c.title.split()[0], c.shape))  # recipe, shape
    keys = sorted({k for c in data.values() for k in c}, key=lambda k: (k[0] != "uniform", k[1]))
    floor_keys = [k for k in keys if k[1] <= FLOOR_MAX_TOKENS]
    rate_keys = [k for k in keys if k[1] >= RATE_MIN_TOKENS]
    out = ["**Faster than PyTorch**: torch's median over the arm's ((unpaired): "
           "two arms of one run, not paired with each other).", "", *_table(columns, data, keys, _speed, mark_unpaired=True), "",
           f"**T <= {FLOOR_MAX_TOKENS} within 2x of the weight-streaming floor**: time over "
           "the roofline bound.", "", *_table(columns, data, floor_keys, _floor), "",
           f"**T >= {RATE_MIN_TOKENS} at 50 % of the tensor-core rate**: achieved (attainable).",
           "", *_table(columns, data, rate_keys, _rate)]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.standing",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path,
                    help="layer benchmark JSON records (.json or .json.gz)")
    args = ap.parse_args(argv)
    print(render([load(p) for p in args.records]), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
