"""Run pytest cases under compute-sanitizer, one test per process.

Contract:
- Every case runs as ``compute-sanitizer --tool T --error-exitcode 86
  --target-processes application-only python -m pytest <node id>`` with
  ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` (so an out-of-bounds access cannot
  land silently inside a cached block) and ``MEGAMOE_SANITIZER_TOOL=T``.
  One process per test means a fault names its test.
- A case expected ``clean`` passes only when the summary parsed to ``pass``
  (0 errors, 0 warnings) AND pytest exited 0. A missing summary is
  ``unknown``: a failure.
- A case expected ``caught`` (a planted bug) passes only when the summary
  reports at least one error: it proves the tool is wired right in this run.
- At most ``sanitizers.slots.slots()`` cases run under the tool at once on the machine,
  whatever runs them (``sanitizers.slots``); the wait counts against the case's timeout.
- A tool run (``run_tool``) fails when the planted case is not caught, when
  any clean case fails, or when no clean case ran (strict: an empty
  selection is a failure).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from sanitizers.slots import sanitizer_slot, slots
from sanitizers.summary import STATUS_PASS, SanitizerSummary, parse_summary
from tests.harness.json_fields import json_fields
from tests.harness.runner import TIMEOUT_EXIT, run_process
from tests.suites import SANITIZER_TOOLS, SanitizerCoverage

SANITIZER_ERROR_EXITCODE = 86
# memcheck reports failed CUDA API calls as errors by default. cuda-bindings probes driver
# entry points with cuGetProcAddress at import and 34 probes fail with
# CUDA_ERROR_INVALID_VALUE on driver 580 (seen on the H200), in every process, kernels or
# not. Those are not kernel faults; device-side memory errors are reported regardless, and
# a failing launch still fails the test itself.
TOOL_OPTIONS: dict[str, tuple[str, ...]] = {"memcheck": ("--report-api-errors", "no")}
EXPECT_CLEAN = "clean"
EXPECT_CAUGHT = "caught"
SANITIZER_TOOL_ENV = "MEGAMOE_SANITIZER_TOOL"
UNCACHED_ALLOCATOR_ENV = "PYTORCH_NO_CUDA_MEMORY_CACHING"
"""PyTorch's switch for its caching allocator: set for every case here (module contract);
the multi tier's sanitizer cases remove it (``tests.harness.suite_run.run_multi``)."""
DEFAULT_CASE_TIMEOUT_S = 600.0
LAUNCH_TIMEOUT_S = 300
"""``--launch-timeout``: how long the tool waits for its target to connect, which the target
does when it first initialises CUDA (after Python, torch and pytest's collection have
started). The tool's default, 10 s, was too short on a loaded machine: on an H100
(2026-12-06) a case started with seven other sanitized cases and twelve xdist workers got "No
attachable process found. compute-sanitizer timed-out", after which the tool waited on its
target until the case's timeout (550 s). Every case is bounded by its own timeout anyway."""


@dataclass(frozen=True)
class CaseResult:
    """One sanitized test process."""

    tool: str
    case: str
    expect: str
    ok: bool
    reason: str
    summary: SanitizerSummary
    returncode: int
    timed_out: bool
    duration_s: float
    log: str
    command: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return json_fields(self)


@dataclass(frozen=True)
class ToolRun:
    """All cases of one tool and the tool-level verdict."""

    tool: str
    status: str  # pass | fail | timeout
    message: str
    results: tuple[CaseResult, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        return json_fields(self, renamed={"results": "cases"})


def find_compute_sanitizer() -> str | None:
    """compute-sanitizer from PATH, CUDA_HOME or /usr/local/cuda, else None."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if base and Path(base, "bin", "compute-sanitizer").is_file():
            return str(Path(base, "bin", "compute-sanitizer"))
    return None


def sanitizer_command(
    exe: str, tool: str, target: Sequence[str], *, leak_check: bool = False,
    error_exitcode: bool = True,
) -> list[str]:
    """The compute-sanitizer command line wrapping ``target``. ``error_exitcode=False``
    leaves the exit code to the target (a rank under torchrun: a non-zero exit would make
    torchrun stop every other rank before it writes its own summary; the runner reads each
    rank's summary instead)."""
    if tool not in SANITIZER_TOOLS:
        raise ValueError(f"tool: expected one of {SANITIZER_TOOLS}, got {tool!r}")
    cmd = [exe, "--tool", tool]
    if error_exitcode:
        cmd += ["--error-exitcode", str(SANITIZER_ERROR_EXITCODE)]
    cmd += ["--target-processes", "application-only", "--launch-timeout",
            str(LAUNCH_TIMEOUT_S), *TOOL_OPTIONS.get(tool, ())]
    if leak_check:
        if tool != "memcheck":
            raise ValueError(f"leak_check: only memcheck checks leaks, got tool {tool!r}")
        cmd += ["--leak-check", "full"]
    return [*cmd, *target]


def pytest_case_command(python: str, node_id: str, junit: Path) -> list[str]:
    """One pytest process for exactly one test."""
    return [
        python, "-m", "pytest", node_id, "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
        f"--junitxml={junit}",
    ]


def case_slug(node_id: str) -> str:
    """A file-name-safe name for a node id."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", node_id).strip("_")[:150]


def collect_node_ids(
    python: str,
    selections: Sequence[str],
    *,
    root: Path,
    keyword: str | None = None,
    markexpr: str | None = None,
) -> list[str]:
    """Expand pytest selections (paths or node ids) into node ids, in order."""
    if not selections:
        return []
    cmd = [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *selections]
    if keyword:
        cmd += ["-k", keyword]
    if markexpr:
        cmd += ["-m", markexpr]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 5):
        raise RuntimeError(
            f"collecting {list(selections)} failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-4000:]}{proc.stderr[-4000:]}"
        )
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line]
    return list(dict.fromkeys(ids))


def expand_cases(
    python: str,
    cases: Sequence[str],
    *,
    root: Path,
    keyword: str | None = None,
    markexpr: str | None = None,
    exclude: Sequence[str] = (),
) -> list[str]:
    """Declared cases as node ids, in order, without duplicates.

    Explicit node ids are kept as they are (a missing one fails when it runs;
    under ``keyword`` they are filtered by collection). Paths are collected
    with ``-m markexpr`` and lose every id under an ``exclude`` prefix.
    """
    explicit = [c for c in cases if "::" in c]
    paths = [c for c in cases if "::" not in c]
    if keyword is not None and explicit:
        explicit = collect_node_ids(python, explicit, root=root, keyword=keyword)
    collected = collect_node_ids(python, paths, root=root, keyword=keyword, markexpr=markexpr)
    collected = [n for n in collected
                 if not any(n == e or n.startswith(e.rstrip("/") + ("::" if e.endswith(".py")
                                                                   else "/")) for e in exclude)]
    return list(dict.fromkeys([*explicit, *collected]))


def run_case(
    tool: str,
    node_id: str,
    expect: str,
    *,
    exe: str,
    python: str,
    root: Path,
    out_dir: Path,
    timeout_s: float,
    leak_check: bool = False,
    expect_report: str | None = None,
    env: Mapping[str, str] | None = None,
) -> CaseResult:
    """Run one test under the sanitizer and judge it against ``expect``.

    ``expect_report``: for a ``caught`` case, a line fragment the log must
    contain (the tool reported the planted bug, not something else). ``env``: extra
    environment of the case's process, over this process's.
    """
    if expect not in (EXPECT_CLEAN, EXPECT_CAUGHT):
        raise ValueError(f"expect: expected {EXPECT_CLEAN!r} or {EXPECT_CAUGHT!r}, got {expect!r}")
    slug = case_slug(node_id)
    log = out_dir / f"{tool}.{slug}.log"
    log.unlink(missing_ok=True)
    junit = out_dir / f"{tool}.{slug}.junit.xml"
    cmd = sanitizer_command(
        exe, tool, pytest_case_command(python, node_id, junit), leak_check=leak_check
    )
    full = {**os.environ, **(env or {}), UNCACHED_ALLOCATOR_ENV: "1", SANITIZER_TOOL_ENV: tool}
    with sanitizer_slot(timeout_s) as waited:
        if waited is None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"$ {' '.join(cmd)}\nnot started: no compute-sanitizer slot of "
                           f"{slots()} came free within the case's {timeout_s:.1f} s "
                           f"(sanitizers.slots)\n", encoding="utf-8")
            return CaseResult(tool, node_id, expect, False,
                              f"timed out waiting {timeout_s:.1f} s for a compute-sanitizer "
                              f"slot", parse_summary("", tool), TIMEOUT_EXIT, True,
                              timeout_s, str(log), tuple(cmd))
        proc = run_process(cmd, cwd=root, log_path=log, timeout_s=timeout_s - waited, env=full)
    text = log.read_text(encoding="utf-8", errors="replace")
    summary = parse_summary(text, tool)
    ok, reason = judge_case(expect, summary, proc.returncode, proc.timed_out)
    if ok and expect == EXPECT_CAUGHT and expect_report and expect_report not in text:
        ok, reason = False, f"errors reported, but not the planted one ({expect_report!r})"
    return CaseResult(
        tool, node_id, expect, ok, reason, summary, proc.returncode, proc.timed_out,
        proc.duration_s, str(log), tuple(cmd),
    )


def judge_case(
    expect: str, summary: SanitizerSummary, returncode: int, timed_out: bool
) -> tuple[bool, str]:
    """(ok, reason) for one case; see the module contract."""
    if timed_out:
        return False, f"timed out ({summary.status}: {summary.reason})"
    if expect == EXPECT_CAUGHT:
        if summary.caught:
            return True, f"planted bug caught: {summary.reason}"
        return False, f"planted bug NOT caught ({summary.status}: {summary.reason})"
    if summary.status != STATUS_PASS:
        return False, f"sanitizer {summary.status}: {summary.reason}"
    if returncode != 0:
        return False, f"sanitizer clean but the test process exited {returncode}"
    return True, "0 errors, test passed"


def run_tool(
    coverage: SanitizerCoverage,
    *,
    exe: str,
    python: str,
    root: Path,
    out_dir: Path,
    keyword: str | None = None,
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
    deadline: float | None = None,
    on_case: Callable[[CaseResult, int, int], None] | None = None,
    env: Mapping[str, str] | None = None,
    workers: int = 1,
) -> ToolRun:
    """Planted case first (must be caught), then every declared case (must be clean).

    ``deadline`` is a ``time.monotonic()`` instant bounding the whole tool run;
    a case that would outlive it is cut short and the run is a ``timeout``; a case not
    started by then does not run. ``on_case(result, done, total)`` is called as each case
    finishes (progress for the caller). ``env``: extra environment of every case's process
    (``run_case``). ``workers``: how many cases run at once (each its own process under the
    tool, on the one GPU; their logs and reports are named by case, so they never share a
    file); they start in plan order, and the results come back in plan order whatever order
    they finish in.
    """
    if workers < 1:
        raise ValueError(f"workers: expected at least 1 case at a time, got {workers}")
    out_dir.mkdir(parents=True, exist_ok=True)
    tool = coverage.tool
    clean_ids = expand_cases(python, coverage.cases, root=root, keyword=keyword,
                             markexpr=coverage.markexpr, exclude=coverage.exclude)
    plan = [(coverage.planted, EXPECT_CAUGHT)] + [(c, EXPECT_CLEAN) for c in clean_ids]
    finished: list[CaseResult] = []
    lock = threading.Lock()
    stop = threading.Event()  # a case timed out at the deadline: start no other

    def one(node_id: str, expect: str) -> CaseResult | None:
        budget = case_timeout_s
        if deadline is not None:
            budget = min(budget, deadline - time.monotonic())
        if stop.is_set() or budget <= 0:
            return None
        report = coverage.planted_report if expect == EXPECT_CAUGHT else None
        result = run_case(tool, node_id, expect, exe=exe, python=python, root=root,
                          out_dir=out_dir, timeout_s=budget, expect_report=report, env=env)
        with lock:
            finished.append(result)
            if on_case is not None:
                on_case(result, len(finished), len(plan))
        if result.timed_out and deadline is not None and time.monotonic() >= deadline:
            stop.set()
        return result

    with ThreadPoolExecutor(max_workers=workers) as pool:
        ran = list(pool.map(lambda case: one(*case), plan))
    results = tuple(r for r in ran if r is not None)
    missed = [node_id for (node_id, _), r in zip(plan, ran, strict=True) if r is None]
    if stop.is_set():
        cut = next(r.case for r in results if r.timed_out)
        return ToolRun(tool, "timeout", f"{tool}: suite timeout in {cut}", results)
    if missed:
        return ToolRun(tool, "timeout", f"{tool}: suite timeout before {missed[0]}", results)
    return ToolRun(tool, *tool_verdict(tool, results), results)


def tool_verdict(tool: str, results: Sequence[CaseResult]) -> tuple[str, str]:
    """(status, message) for a tool run; strict: no clean case is a failure."""
    planted = [r for r in results if r.expect == EXPECT_CAUGHT]
    clean = [r for r in results if r.expect == EXPECT_CLEAN]
    bad = [r for r in results if not r.ok]
    passed = sum(r.ok for r in clean)
    msg = f"{tool}: {passed} of {len(clean)} declared case(s) clean"
    if planted:
        msg += f"; planted bug {'caught' if planted[0].ok else 'NOT caught'}"
    if not planted:
        return "fail", msg + "; no planted self-test ran"
    if not clean:
        return "fail", msg + "; strict: zero declared cases ran"
    if bad:
        return "fail", msg + "; failing: " + "; ".join(f"{r.case}: {r.reason}" for r in bad)
    return "pass", msg


def write_junit(run: ToolRun, path: Path) -> None:
    """One JUnit testsuite with a testcase per sanitized process."""
    failures = sum(not r.ok for r in run.results)
    suite = ET.Element(
        "testsuite",
        name=f"sanitize-{run.tool}",
        tests=str(len(run.results)),
        failures=str(failures),
        errors="0",
        skipped="0",
        time=f"{sum(r.duration_s for r in run.results):.3f}",
    )
    for r in run.results:
        case = ET.SubElement(
            suite, "testcase", classname=f"sanitize.{run.tool}.{r.expect}", name=r.case,
            time=f"{r.duration_s:.3f}",
        )
        if not r.ok:
            ET.SubElement(case, "failure", message=r.reason).text = r.log
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def main(argv: Sequence[str]) -> int:
    """``python -m sanitizers --tool T [--output-dir D] [-k EXPR]``."""
    import argparse
    import json

    from tests.suites import SANITIZE_COVERAGE

    ap = argparse.ArgumentParser(prog="python -m sanitizers")
    ap.add_argument("--tool", required=True, choices=SANITIZER_TOOLS)
    ap.add_argument("--output-dir", type=Path, default=Path("out/sanitize"))
    ap.add_argument("-k", "--filter", dest="keyword", default=None)
    ap.add_argument("--case-timeout", type=float, default=DEFAULT_CASE_TIMEOUT_S)
    ap.add_argument("--workers", type=int, default=1,
                    help="cases under the tool at once (default 1)")
    args = ap.parse_args(list(argv))
    if args.workers < 1:
        ap.error(f"--workers must be >= 1, got {args.workers}")
    exe = find_compute_sanitizer()
    if exe is None:
        print("compute-sanitizer not found on PATH, in CUDA_HOME or /usr/local/cuda",
              file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[1]
    run = run_tool(SANITIZE_COVERAGE[args.tool], exe=exe, python=sys.executable, root=root,
                   out_dir=args.output_dir, keyword=args.keyword,
                   case_timeout_s=args.case_timeout, workers=args.workers)
    write_junit(run, args.output_dir / f"sanitize-{args.tool}.junit.xml")
    (args.output_dir / f"sanitize-{args.tool}.json").write_text(
        json.dumps(run.as_dict(), indent=2)
    )
    for r in run.results:
        print(f"{'ok  ' if r.ok else 'FAIL'} {r.expect:<6} {r.case}: {r.reason}")
    print(run.message)
    return 0 if run.status == "pass" else (TIMEOUT_EXIT if run.status == "timeout" else 1)
