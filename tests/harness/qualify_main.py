"""qualify.py's logic (minimal first version: strict host-tier record)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.suites import SUITES

ROOT = Path(__file__).resolve().parents[2]


def _junit_counts(path: Path) -> dict[str, int]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    c = {k: 0 for k in ("tests", "failures", "errors", "skipped")}
    for s in suites:
        for k in c:
            c[k] += int(s.get(k, 0))
    c["passed"] = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    return c


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="qualify.py")
    ap.add_argument("--suite", required=True, choices=["host"])
    ap.add_argument("--output-dir", required=True, type=Path)
    args = ap.parse_args(argv)
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    suite = SUITES[args.suite]
    junit = out / f"{suite.name}.junit.xml"
    cmd = suite.command(sys.executable, [f"--junitxml={junit}"])
    t0 = time.time()
    with open(out / f"{suite.name}.log", "w") as log:
        rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    counts = _junit_counts(junit) if junit.exists() else {}
    ok = rc == 0 and counts.get("passed", 0) > 0 and counts.get("skipped", 0) == 0
    record = {
        "suite": suite.name,
        "command": cmd,
        "returncode": rc,
        "counts": counts,
        "duration_s": round(time.time() - t0, 1),
        "status": "pass" if ok else "fail",
    }
    (out / "qualification.json").write_text(json.dumps(record, indent=2))
    print(f"{suite.name}: {record['status']} {counts}")
    return 0 if ok else 1
