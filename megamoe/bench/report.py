"""The Markdown report of a record (a pure function of the JSON record)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_SCALE = {"B/s": (1e9, "GB/s"), "FLOP/s": (1e12, "TFLOP/s")}


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:.3f}"


def fmt_rate(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    div, label = _SCALE[unit]
    return f"{value / div:.1f} {label}"


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3%}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _shape(shape: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items()) or "-"


def _commit_line(env: dict[str, Any]) -> str:
    """The commit, whether the tree was dirty, and who named it (``checkout_commit``)."""
    dirty = env.get("git_dirty")
    flag = " (dirty)" if dirty is True else (f" (dirty: {dirty})" if isinstance(dirty, str) else "")
    named = " (named by MEGAMOE_GIT_COMMIT)" if env.get("git_source") == "env" else ""
    return f"{env['git_commit'] or 'unknown'}{flag}{named}"


def _device_line(dev: Mapping[str, Any]) -> str:
    parts = [str(dev.get("name")), str(dev.get("capability", dev.get("kind", "")))]
    state = dev.get("state") or {}
    if state.get("source"):
        parts.append(
            f"SM clock {state.get('clocks.sm')}/{state.get('clocks.max.sm')} MHz, "
            f"memory clock {state.get('clocks.mem')}/{state.get('clocks.max.mem')} MHz "
            f"({state['source']})"
        )
    return ", ".join(p for p in parts if p)


def render_markdown(record: Mapping[str, Any]) -> str:
    """Header, ceilings, comparisons (medians, gains, verdicts), ranges, achieved/ceiling, noise reasons."""
    bench, env, proto = record["benchmark"], record["environment"], record["protocol"]
    lines = [
        f"# Benchmark `{bench['name']}`{' (quick)' if record['quick'] else ''}",
        "",
        bench["description"],
        "",
        f"- device before: {_device_line(env['device_before'])}",
        f"- device after: {_device_line(env['device_after'])}",
        f"- ranks: {record['ranks']['mode']}, world size {record['ranks']['world_size']}",
        f"- torch {env['packages'].get('torch')} (CUDA {env.get('torch_cuda')}), python {env['python']}, "
        f"commit {_commit_line(env)}, "
        f"source sha256 {env['source_sha256'][:12]}",
        f"- protocol: {proto['rounds']} rounds x {proto['pairs']} AB/BA pairs per comparison, "
        f"{proto['calls_per_sample']} calls per sample ({'CUDA graph' if proto['graph'] else 'eager'}), "
        f"warmup {proto['warmup']}, cold = {proto['flush_bytes'] // 2**20} MiB write before each sample, "
        f"A/A resolution {proto['resolution']:.2%}, {proto['confidence']:.0%} pair-gain interval",
        f"- run {record['started_utc']} to {record['finished_utc']}",
        "",
        "Gain = median(A) / median(B) - 1 (positive: B is faster). Every sample is the "
        "maximum over ranks; all samples are in the JSON record.",
        "",
        "## Ceilings (measured in this run)",
        "",
    ]
    rows = []
    for c in record["ceilings"]:
        if c["available"]:
            rows.append(
                [c["name"], _shape(c["shape"]), fmt_rate(c["value"], c["unit"]),
                 fmt_rate(c["best"], c["unit"]), fmt_us(c["median_s"])]
            )
        else:
            rows.append([c["name"], _shape(c["shape"]), "unavailable", "-", c["reason"]])
    lines += _table(["ceiling", "shape", "median rate", "best rate", "median (us)"], rows) if rows else ["none"]
    lines += ["", "## Comparisons", ""]
    rows, ranges, reasons = [], [], []
    for case in record["cases"]:
        for comp in case["comparisons"]:
            s = comp["summary"]
            label = f"{case['case']} / {case['cache']}"
            rows.append(
                [case["case"], _shape(case["shape"]), case["cache"], comp["kind"].upper(),
                 comp["a"], comp["b"], fmt_us(s["median_s"][0]), fmt_us(s["median_s"][1]),
                 fmt_pct(s["gain"]), ", ".join(fmt_pct(g) for g in s["round_gains"]),
                 f"[{fmt_pct(s['pair_gain_ci'][0])}, {fmt_pct(s['pair_gain_ci'][1])}]",
                 fmt_pct(s["floor"]).lstrip("+"), f"**{s['verdict']}**"]
            )
            ranges.append(
                [case["case"], case["cache"], comp["kind"].upper(), str(case["calls_per_sample"]),
                 f"{fmt_us(s['min_s'][0])}–{fmt_us(s['max_s'][0])}",
                 f"{fmt_us(s['min_s'][1])}–{fmt_us(s['max_s'][1])}"]
            )
            for reason in s["reasons"]:
                reasons.append(f"- {label} {comp['kind'].upper()} {comp['a']} vs {comp['b']}: {reason}")
    lines += _table(
        ["case", "shape", "cache", "kind", "A", "B", "A median (us)", "B median (us)", "gain",
         "round gains", "pair-gain CI", "floor", "verdict"],
        rows,
    )
    lines += ["", "## All-sample ranges", ""]
    lines += _table(
        ["case", "cache", "kind", "calls per sample", "A min–max (us)", "B min–max (us)"], ranges
    )
    achieved = [
        [case["case"], case["cache"], a["arm"], fmt_rate(a["value"], a["unit"]), a["ceiling"],
         fmt_rate(a["ceiling_value"], a["unit"]), "n/a" if a["ratio"] is None else f"{a['ratio']:.1%}"]
        for case in record["cases"]
        for a in case["achieved"]
    ]
    if achieved:
        lines += ["", "## Achieved vs ceiling", ""]
        lines += _table(["case", "cache", "arm", "achieved", "ceiling", "ceiling rate", "ratio"], achieved)
    if reasons:
        lines += ["", "## Why noise", "", *reasons]
    return "\n".join(lines) + "\n"
