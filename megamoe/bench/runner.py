"""Running a declared benchmark into a record (a JSON-ready dict; schema in ``records``).

Order of a run: environment, ceilings, then for every case and cache mode
the A/A control (candidate against an independent second build of itself)
followed by one AB/BA comparison per baseline (baseline = A, candidate = B).
Every comparison builds its workloads afresh, prepares (warms up and
captures) both arms, samples them, and releases them. The A/A control's
largest apparent gain is the floor the baseline comparisons are judged
against; the control itself is judged against ``protocol.resolution``.
"""

from __future__ import annotations

import dataclasses
import datetime
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from megamoe.bench.ceilings import (
    CEILING_BUILDERS,
    UNITS,
    CeilingBuilder,
    ceiling_sizes,
    measure_ceilings,
)
from megamoe.bench.device import Backend
from megamoe.bench.environment import collect_environment
from megamoe.bench.measure import Measurer, RoundData
from megamoe.bench.protocol import Protocol
from megamoe.bench.ranks import RankGroup
from megamoe.bench.registry import CEILING_WORK, Arm, Benchmark, BuildContext, Case, Workload
from megamoe.bench.stats import judge, median_ci, median_gain, noise_floor, pair_gains, summarize

SCHEMA = "megamoe.bench/1"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _build(arm: Arm, case: Case, backend: Backend, ranks: RankGroup) -> list[Workload]:
    return [
        arm.build(case, BuildContext(backend.device, r, ranks.world_size, case.seed))
        for r in ranks.local_ranks()
    ]


def summarize_rounds(
    rounds: Sequence[RoundData], floor: float | None, confidence: float
) -> dict[str, Any]:
    """Medians, ranges, combined and per-round gains, the pair-gain interval and the verdict."""
    a = [s for r in rounds for s in r.samples[0]]
    b = [s for r in rounds for s in r.samples[1]]
    sa, sb = summarize(a), summarize(b)
    combined = median_gain(a, b)
    round_gains = [median_gain(r.samples[0], r.samples[1]) for r in rounds]
    ci = median_ci(pair_gains(a, b), confidence)
    verdict = judge(combined, round_gains, ci, floor)
    return {
        "median_s": [sa.median, sb.median],
        "min_s": [sa.min, sb.min],
        "max_s": [sa.max, sb.max],
        "n": [sa.n, sb.n],
        "gain": combined,
        "round_gains": round_gains,
        "pair_gain_ci": list(ci),
        "confidence": confidence,
        "floor": floor,
        "verdict": verdict.label,
        "reasons": list(verdict.reasons),
    }


def _round_record(r: RoundData) -> dict[str, Any]:
    return {
        "order": [list(o) for o in r.order],
        "samples_s": [list(r.samples[0]), list(r.samples[1])],
        "rank_samples_s": [[list(v) for v in r.rank_samples[0]], [list(v) for v in r.rank_samples[1]]],
        "median_s": [statistics.median(r.samples[0]), statistics.median(r.samples[1])],
        "gain": median_gain(r.samples[0], r.samples[1]),
    }


def _compare(
    measurer: Measurer,
    kind: str,
    arm_a: Arm,
    arm_b: Arm,
    case: Case,
    cold: bool,
    floor: float | None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """One comparison; returns its record and the work declared by each arm.

    The workloads (and their buffers) are dropped before the backend releases its cached
    memory, so comparisons never hold each other's memory, in this process or in another
    one: a remote arm's worker (``megamoe.bench.remote``) allocates from the device, not
    from this process's cache. Released the other way round, the cache kept an A/A
    control's two layers (42 GiB at the whole DeepSeek-like shape) from FlashInfer's worker
    on an H100 (2026-12-06).
    """
    backend, ranks = measurer.backend, measurer.ranks
    wa = _build(arm_a, case, backend, ranks)
    wb = _build(arm_b, case, backend, ranks)
    units_a = measurer.prepare(wa)
    units_b = measurer.prepare(wb)
    try:
        rounds = measurer.compare(units_a, units_b, cold)
    finally:
        del units_a, units_b
        for remote in [w.remote for w in (*wa, *wb) if w.remote is not None]:
            remote.close()
    info_a, info_b = _arm_info(wa), _arm_info(wb)
    del wa, wb  # the workloads' last references (a loop variable would keep one alive)
    backend.release()
    record = {
        "kind": kind,
        "a": arm_a.name,
        "b": arm_b.name,
        "rounds": [_round_record(r) for r in rounds],
        "summary": summarize_rounds(rounds, floor, measurer.protocol.confidence),
    }
    return record, info_a, info_b


def _arm_info(workloads: Sequence[Workload]) -> dict[str, Any]:
    w = workloads[0]
    return {
        "bytes_moved": statistics.mean(x.bytes_moved for x in workloads),
        "bytes_sent": statistics.mean(x.bytes_sent for x in workloads),
        "flops": statistics.mean(x.flops for x in workloads),
        "ceiling": w.ceiling,
    }


def _achieved(
    arms: Mapping[str, dict[str, Any]],
    comparisons: Sequence[dict[str, Any]],
    ceilings: Mapping[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """Per arm: work / median of all its samples in this case, and the ratio to its ceiling."""
    pooled: dict[str, list[float]] = {}
    for comp in comparisons:
        for side, name in enumerate((comp["a"], comp["b"])):
            for r in comp["rounds"]:
                pooled.setdefault(name, []).extend(r["samples_s"][side])
    out = []
    for name, info in arms.items():
        ceiling = info["ceiling"]
        if ceiling is None or name not in pooled:
            continue
        work = info[CEILING_WORK[ceiling]]
        value = work / statistics.median(pooled[name])
        c = ceilings.get(ceiling)
        c_value = c["value"] if c is not None and c.get("available") else None
        out.append(
            {
                "arm": name,
                "ceiling": ceiling,
                "unit": UNITS[ceiling],
                "value": value,
                "ceiling_value": c_value,
                "ratio": value / c_value if c_value else None,
            }
        )
    return out


def run_benchmark(
    bench: Benchmark,
    backend: Backend,
    ranks: RankGroup,
    protocol: Protocol,
    *,
    quick: bool = False,
    case_patterns: Sequence[str] = (),
    argv: Sequence[str] = (),
    ceiling_builders: Mapping[str, CeilingBuilder] = CEILING_BUILDERS,
) -> dict[str, Any]:
    """Run ``bench`` and return its record (every sample, environment, verdicts).
    ``case_patterns``: shell-style patterns selecting cases by name (see ``cases_for``)."""
    bench.cases_for(quick, case_patterns)  # a pattern that matches nothing fails first
    if not protocol.aa_control and not bench.baselines:
        raise ValueError(
            f"protocol.aa_control: expected True for {bench.name!r}, which declares no baselines "
            "(nothing would be compared), got False"
        )
    started = _now()
    environment = collect_environment(backend)
    measurer = Measurer(backend, ranks, protocol)
    sizes = ceiling_sizes(backend.kind, quick)
    ctx = BuildContext(backend.device, ranks.local_ranks()[0], ranks.world_size, seed=0)
    ceilings = measure_ceilings(bench.ceilings, measurer, sizes, ctx, ceiling_builders)
    by_name = {c["name"]: c for c in ceilings}

    cases = []
    for case in bench.cases_for(quick, case_patterns):
        calls = case.calls_per_sample or protocol.calls_per_sample
        measurer = Measurer(backend, ranks, protocol.with_(calls_per_sample=calls))
        for cache in (c for c in protocol.caches if c in case.caches):
            cold = cache == "cold"
            comparisons = []
            arms: dict[str, dict[str, Any]] = {}
            floor = None
            if protocol.aa_control:
                rec, info, _ = _compare(
                    measurer, "aa", bench.candidate, bench.candidate, case, cold, protocol.resolution
                )
                comparisons.append(rec)
                arms[bench.candidate.name] = info
                floor = noise_floor(rec["summary"]["gain"], rec["summary"]["round_gains"])
            for base in bench.baselines:
                rec, info_a, info_b = _compare(measurer, "ab", base, bench.candidate, case, cold, floor)
                comparisons.append(rec)
                arms[base.name] = info_a
                arms.setdefault(bench.candidate.name, info_b)
            cases.append(
                {
                    "case": case.name,
                    "shape": dict(case.shape),
                    "scenario": case.scenario,
                    "seed": case.seed,
                    "cache": cache,
                    "calls_per_sample": calls,
                    "arms": arms,
                    "comparisons": comparisons,
                    "achieved": _achieved(arms, comparisons, by_name),
                }
            )
    environment["device_after"] = backend.describe()
    control = [c["summary"]["verdict"] for x in cases for c in x["comparisons"] if c["kind"] == "aa"]
    return {
        "schema": SCHEMA,
        "benchmark": {
            "name": bench.name,
            "description": bench.description,
            "candidate": bench.candidate.name,
            "baselines": [b.name for b in bench.baselines],
            "ceilings": list(bench.ceilings),
        },
        "quick": quick,
        "argv": list(argv),
        "protocol": dataclasses.asdict(protocol) | {"caches": list(protocol.caches)},
        "ranks": ranks.describe(),
        "environment": environment,
        "started_utc": started,
        "finished_utc": _now(),
        "ceilings": ceilings,
        "cases": cases,
        "control_is_noise": all(v == "noise" for v in control) if control else None,
    }
