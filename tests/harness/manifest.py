"""The qualification record (``qualification.json``) and its Markdown summary.

Schema (``schema`` 1; ``kind`` is ``ledger.RECORD_KIND``): ``arguments``,
``started_at``/``finished_at`` (UTC ISO 8601), ``status`` (pass | fail |
timeout | preflight-failed), ``preflight`` (checks with reasons), ``suites``
(per suite: status, message, counts, duration, commands, JUnit and log
paths relative to the output directory, and suite-specific details:
ranks, sanitizer cases), ``environment`` (GPUs, driver, versions), ``git``
and ``source_hashes`` (``kernel``/``oracle``/``tests``: digest + per-file
SHA-256; see ``hashing``), ``filtered`` (a ``--filter`` run: part of a suite).
``suggested_record_name`` is the file name to commit it under in ``docs/qualification/``;
the summary says to commit only a passing, unfiltered run (``committable``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from tests.harness.ledger import RECORD_KIND
from tests.harness.shard import SPLIT_SUITE

SCHEMA_VERSION = 1
RECORD_FILE = "qualification.json"
SUMMARY_FILE = "summary.md"


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def record_name(record: dict) -> str:
    """``<date>_<suites>_<kernel digest[:12]>.json``: unique per run and readable (a shard
    ``I/N`` of ``single`` is ``single-shardIofN``; the sanitizer tools of a sharded ``gpu``
    run ran whole and keep their plain names)."""
    stamp = str(record.get("finished_at", utc_now())).replace(":", "").replace("-", "")
    shard = record.get("arguments", {}).get("shard")
    part = f"-shard{shard.replace('/', 'of')}" if shard else ""
    suites = "-".join(
        s["name"] + (f"-{s['tool']}" if s.get("tool") else "")
        + (part if s["name"] == SPLIT_SUITE else "")
        for s in record.get("suites", [])
    ) or "none"
    digest = str(record.get("source_hashes", {}).get("kernel", {}).get("digest", "nohash"))[:12]
    return f"{stamp}_{suites}_{digest}.json"


def committable(record: dict) -> str:
    """'' when the record is one to commit under docs/qualification, else why not: a refused,
    failed or timed-out run, or a filtered one (``--filter`` covers part of a suite, so the
    ledger never counts it)."""
    args = record.get("arguments", {})
    if args.get("filter"):
        return (f"a filtered run (--filter {args['filter']!r}) covers part of its suite: not a "
                "record to commit")
    if record.get("status") != "pass":
        return f"status {record.get('status')}: not a record to commit"
    return ""


def write_record(out_dir: Path, record: dict) -> Path:
    record = {"schema": SCHEMA_VERSION, "kind": RECORD_KIND, **record}
    record["filtered"] = bool(record.get("arguments", {}).get("filter"))
    record["suggested_record_name"] = record_name(record)
    path = out_dir / RECORD_FILE
    path.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")
    (out_dir / SUMMARY_FILE).write_text(summary_markdown(record))
    return path


def summary_markdown(record: dict) -> str:
    env = record.get("environment", {})
    gpus = env.get("gpus") or []
    gpu = f"{gpus[0]['name']} ({gpus[0]['arch']}) x{len(gpus)}" if gpus else "none"
    git = record.get("git", {})
    hashes = record.get("source_hashes", {})
    lines = [
        f"# Qualification: {record.get('status', '?').upper()}",
        "",
        f"- arguments: `{json.dumps(record.get('arguments', {}))}`",
        f"- finished: {record.get('finished_at')}",
        f"- GPU: {gpu}; driver {env.get('driver')}",
        f"- torch {env.get('torch')} (CUDA {env.get('cuda')}), CuTe DSL {env.get('cute_dsl')}, "
        f"nvshmem4py {env.get('nvshmem4py')}",
        f"- git {git.get('commit')} (dirty: {git.get('dirty')})",
        "- source digests: " + ", ".join(
            f"{k} `{str(v.get('digest'))[:16]}`" for k, v in hashes.items()),
        "",
    ]
    failed_checks = [c for c in record.get("preflight", []) if not c.get("ok")]
    if failed_checks:
        lines += ["## Preflight failures", ""]
        lines += [f"- {c['name']}: {c['detail']}" for c in failed_checks]
        lines.append("")
    if record.get("suites"):
        lines += ["| suite | status | passed | failed | errors | skipped | seconds |",
                  "|---|---|---|---|---|---|---|"]
        for s in record["suites"]:
            c = s.get("counts") or {}
            name = s["name"] + (f" ({s['tool']})" if s.get("tool") else "")
            lines.append(f"| {name} | {s['status']} | {c.get('passed', '-')} | "
                         f"{c.get('failed', '-')} | {c.get('errors', '-')} | "
                         f"{c.get('skipped', '-')} | {s.get('duration_s')} |")
        lines.append("")
        lines += [f"- {s['message']}" for s in record["suites"]]
        lines.append("")
    why_not = committable(record)
    lines.append(why_not[0].upper() + why_not[1:] + "." if why_not else
                 f"Commit as `docs/qualification/{record.get('suggested_record_name')}`.")
    return "\n".join(lines) + "\n"
