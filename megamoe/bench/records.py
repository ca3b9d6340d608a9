"""The JSON record of a run: its schema check and the files a run writes.

``validate_record`` checks the structure the report, the plots and later
readers rely on, and that every sample was retained: each comparison holds
``rounds`` rounds of ``pairs`` samples per arm, each sample is the maximum
of its ``world_size`` per-rank values, and the round order is the AB/BA
schedule. Strict JSON only (no NaN or Infinity).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from megamoe.bench.protocol import abba_schedule
from megamoe.bench.runner import SCHEMA
from megamoe.bench.stats import VERDICTS

_TOP = {
    "schema": str,
    "benchmark": dict,
    "quick": bool,
    "argv": list,
    "protocol": dict,
    "ranks": dict,
    "environment": dict,
    "started_utc": str,
    "finished_utc": str,
    "ceilings": list,
    "cases": list,
}
_ENVIRONMENT = ("python", "packages", "git_commit", "source_sha256", "device_before", "device_after")
_CASE = {
    "case": str,
    "shape": dict,
    "cache": str,
    "calls_per_sample": int,
    "arms": dict,
    "comparisons": list,
    "achieved": list,
}
_SUMMARY = ("median_s", "min_s", "max_s", "gain", "round_gains", "pair_gain_ci", "floor", "verdict", "reasons")


def _fail(path: str, rule: str, actual: object) -> None:
    raise ValueError(f"record{path}: {rule}, got {actual!r}")


def _need(obj: Mapping[str, Any], keys: Mapping[str, type] | tuple[str, ...], path: str) -> None:
    for k in keys:
        if k not in obj:
            _fail(path, f"expected key {k!r}", sorted(obj))
        if isinstance(keys, Mapping) and not isinstance(obj[k], keys[k]):
            _fail(f"{path}.{k}", f"expected {keys[k].__name__}", type(obj[k]).__name__)


def _times(values: Any, path: str) -> None:
    if not isinstance(values, list):
        _fail(path, "expected a list of times", values)
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            _fail(f"{path}[{i}]", "expected a finite time > 0", v)


def _validate_comparison(comp: Mapping[str, Any], path: str, protocol: Mapping[str, Any], world: int) -> None:
    _need(comp, {"kind": str, "a": str, "b": str, "rounds": list, "summary": dict}, path)
    if comp["kind"] not in ("aa", "ab"):
        _fail(f"{path}.kind", "expected 'aa' or 'ab'", comp["kind"])
    if comp["kind"] == "aa" and comp["a"] != comp["b"]:
        _fail(path, "expected an A/A control to compare one arm with itself", (comp["a"], comp["b"]))
    rounds, pairs = protocol["rounds"], protocol["pairs"]
    if len(comp["rounds"]) != rounds:
        _fail(f"{path}.rounds", f"expected {rounds} rounds", len(comp["rounds"]))
    schedule = abba_schedule(rounds, pairs)
    for r, rnd in enumerate(comp["rounds"]):
        rp = f"{path}.rounds[{r}]"
        _need(rnd, {"order": list, "samples_s": list, "rank_samples_s": list, "median_s": list}, rp)
        if [tuple(o) for o in rnd["order"]] != list(schedule[r]):
            _fail(f"{rp}.order", "expected the AB/BA schedule", rnd["order"])
        if len(rnd["samples_s"]) != 2 or len(rnd["rank_samples_s"]) != 2:
            _fail(rp, "expected samples of exactly two arms", len(rnd["samples_s"]))
        for arm in (0, 1):
            samples = rnd["samples_s"][arm]
            _times(samples, f"{rp}.samples_s[{arm}]")
            if len(samples) != pairs:
                _fail(f"{rp}.samples_s[{arm}]", f"expected every one of {pairs} samples retained", len(samples))
            per_rank = rnd["rank_samples_s"][arm]
            if len(per_rank) != pairs:
                _fail(f"{rp}.rank_samples_s[{arm}]", f"expected {pairs} per-rank lists", len(per_rank))
            for i, values in enumerate(per_rank):
                _times(values, f"{rp}.rank_samples_s[{arm}][{i}]")
                if len(values) != world:
                    _fail(f"{rp}.rank_samples_s[{arm}][{i}]", f"expected {world} rank values", len(values))
                if max(values) != samples[i]:
                    _fail(f"{rp}.samples_s[{arm}][{i}]", f"expected the rank maximum {max(values)}", samples[i])
    summary = comp["summary"]
    _need(summary, _SUMMARY, f"{path}.summary")
    if summary["verdict"] not in VERDICTS:
        _fail(f"{path}.summary.verdict", f"expected one of {VERDICTS}", summary["verdict"])
    if len(summary["round_gains"]) != rounds:
        _fail(f"{path}.summary.round_gains", f"expected {rounds} gains", len(summary["round_gains"]))
    if (summary["verdict"] == "noise") != bool(summary["reasons"]):
        _fail(f"{path}.summary.reasons", "expected reasons exactly when the verdict is noise", summary["reasons"])


def validate_record(record: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first path in ``record`` that breaks the schema."""
    _need(record, _TOP, "")
    if record["schema"] != SCHEMA:
        _fail(".schema", f"expected {SCHEMA!r}", record["schema"])
    _need(record["environment"], _ENVIRONMENT, ".environment")
    _need(record["ranks"], {"mode": str, "world_size": int}, ".ranks")
    world = record["ranks"]["world_size"]
    protocol = record["protocol"]
    _need(protocol, {"rounds": int, "pairs": int, "calls_per_sample": int, "graph": bool}, ".protocol")
    for i, c in enumerate(record["ceilings"]):
        cp = f".ceilings[{i}]"
        _need(c, {"name": str, "unit": str, "available": bool, "shape": dict}, cp)
        if c["available"]:
            _need(c, ("value", "median_s", "samples_s"), cp)
            _times(c["samples_s"], f"{cp}.samples_s")
        else:
            _need(c, {"reason": str}, cp)
    for i, case in enumerate(record["cases"]):
        cp = f".cases[{i}]"
        _need(case, _CASE, cp)
        if case["cache"] not in ("warm", "cold"):
            _fail(f"{cp}.cache", "expected 'warm' or 'cold'", case["cache"])
        if not case["comparisons"]:
            _fail(f"{cp}.comparisons", "expected at least one comparison", case["comparisons"])
        for j, comp in enumerate(case["comparisons"]):
            _validate_comparison(comp, f"{cp}.comparisons[{j}]", protocol, world)
    try:
        json.dumps(record, allow_nan=False)
    except ValueError as e:
        _fail("", "expected strict JSON (no NaN or Infinity)", str(e))


def dumps(record: Mapping[str, Any]) -> str:
    """Strict JSON text of ``record`` (validated first)."""
    validate_record(record)
    return json.dumps(record, indent=1, allow_nan=False) + "\n"


def write_json(record: Mapping[str, Any], path: Path) -> Path:
    """Write ``record`` atomically (temporary file, then rename)."""
    text = dumps(record)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
