"""Run one suite (pytest, multi-rank or sanitizer) and judge it strictly.

Every process runs through ``runner.run_process`` (own process group,
``--timeout`` enforced on the whole group). Artifacts land in the output
directory: ``<suite>.log``, ``<suite>.junit.xml`` (multi real:
``multi.rank<R>.junit.xml`` per rank), ``sanitize-<tool>/`` per tool.

``--workers N`` (N > 1) splits an exclusive-GPU pytest suite in two phases
(``run_split``): the tests marked neither ``timing`` nor ``alone`` in N pytest-xdist
workers, then those marked ``timing`` or ``alone`` in one process (``<suite>.parallel.*``,
``<suite>.alone.*``); the suite passes only when both phases do, its counts
are their sum, and one neighbour watch covers both (the workers are the
suite's own descendants, not neighbours).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.gpu_neighbours import NeighbourReport, NeighbourWatch, judge_exclusive
from tests.harness.junit import JUnitCounts, parse_junit, parse_many
from tests.harness.runner import run_process
from tests.harness.shard import SHARD_OPTION, SHARD_PLUGIN
from tests.harness.strict import STATUS_FAIL, STATUS_PASS, STATUS_TIMEOUT, strict_verdict
from tests.suites import PYTEST_NO_TESTS_COLLECTED, SanitizerCoverage, Suite


@dataclass(frozen=True)
class RunContext:
    root: Path
    python: str
    out_dir: Path
    filter: str | None = None
    timeout: float | None = None
    world_size: int = 2
    mode: str = "real"
    neighbour_watch: Callable[[], NeighbourWatch] = NeighbourWatch
    """Makes the watch an ``exclusive_gpu`` suite runs under (injectable for tests)."""
    workers: int = 1
    """``--workers``: pytest-xdist workers for an exclusive suite's non-timing tests."""
    shard: str | None = None
    """``--shard I/N``: the pytest runs load ``shard_plugin`` and keep shard I of N."""


@dataclass(frozen=True)
class SuiteRun:
    """One suite's outcome as recorded in ``qualification.json``."""

    name: str
    status: str
    message: str
    duration_s: float
    returncode: int
    timed_out: bool
    commands: tuple[tuple[str, ...], ...]
    counts: dict | None = None
    junit: tuple[str, ...] = ()
    logs: tuple[str, ...] = ()
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "duration_s": self.duration_s,
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "commands": [list(c) for c in self.commands],
            "counts": self.counts,
            "junit": list(self.junit),
            "logs": list(self.logs),
            **self.details,
        }


def _rel(ctx: RunContext, p: Path) -> str:
    try:
        return p.relative_to(ctx.out_dir).as_posix()
    except ValueError:
        return str(p)


def _pytest_args(suite: Suite, ctx: RunContext) -> list[str]:
    args = ["-p", "no:cacheprovider"]
    if ctx.filter:
        args += ["-k", ctx.filter]
    if ctx.shard:
        args += ["-p", SHARD_PLUGIN, f"{SHARD_OPTION}={ctx.shard}"]
    return args


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "MEGAMOE_QUALIFY": "1", **extra}


def _watch(suite: Suite, ctx: RunContext) -> NeighbourWatch | None:
    return ctx.neighbour_watch().start() if suite.exclusive_gpu else None


def _exclusive(watch: NeighbourWatch | None, status: str, message: str,
               details: dict) -> tuple[str, str, dict]:
    """Stop the watch; an exclusive suite that shared the GPU fails (``judge_exclusive``)."""
    if watch is None:
        return status, message, details
    report: NeighbourReport = watch.stop()
    status, message = judge_exclusive(status, message, report)
    return status, message, {**details, "gpu_neighbours": report.as_dict()}


TIMING_MARK = "timing"
"""The pytest marker of tests that read GPU timings (pyproject.toml)."""
ALONE_MARK = "alone"
"""The pytest marker of tests that run a heavy child process under a deadline (the
compute-sanitizer self-tests): beside N busy xdist workers they ran past it (pyproject.toml)."""
ONE_PROCESS = f"({TIMING_MARK} or {ALONE_MARK})"
"""The tests ``run_split`` runs after the xdist phase, in one process."""


def run_pytest_suite(suite: Suite, ctx: RunContext, env: dict[str, str] | None = None,
                     label: str | None = None) -> SuiteRun:
    """A plain pytest suite: one process, one JUnit report, strict verdict (``run_split``
    for an exclusive suite under ``--workers``)."""
    if ctx.workers > 1 and suite.exclusive_gpu and suite.module is None:
        return run_split(suite, ctx, env, label)
    label = label or suite.name
    junit = ctx.out_dir / f"{label}.junit.xml"
    log = ctx.out_dir / f"{label}.log"
    for p in (junit, log):
        p.unlink(missing_ok=True)
    cmd = suite.command(ctx.python, [f"--junitxml={junit}", *_pytest_args(suite, ctx)])
    watch = _watch(suite, ctx)
    res = run_process(cmd, cwd=ctx.root, log_path=log, timeout_s=ctx.timeout, env=_env(env or {}))
    counts = parse_junit(junit) if junit.exists() else None
    verdict = strict_verdict(f"suite {label}", res.returncode, res.timed_out, counts, ctx.timeout)
    status, message, details = _exclusive(watch, verdict.status, verdict.message, env or {})
    return SuiteRun(suite.name, status, message, res.duration_s, res.returncode,
                    res.timed_out, (tuple(cmd),), counts.as_dict() if counts else None,
                    (_rel(ctx, junit),) if junit.exists() else (), (_rel(ctx, log),), details)


def _phase(suite: Suite, mark: str, extra: tuple[str, ...]) -> Suite:
    markexpr = f"({suite.markexpr}) and {mark}" if suite.markexpr else mark
    return dataclasses.replace(suite, markexpr=markexpr, extra_args=(*suite.extra_args, *extra),
                               exclusive_gpu=False)


def run_split(suite: Suite, ctx: RunContext, env: dict[str, str] | None = None,
              label: str | None = None) -> SuiteRun:
    """An exclusive suite under ``--workers`` (module docstring): the tests marked neither
    ``timing`` nor ``alone`` in ``ctx.workers`` xdist workers, then those in one process, in
    the time left of ``--timeout``. A phase that selects no test (pytest exit 5, e.g. under
    ``--filter``) is recorded and left out of the verdict; the suite still needs tests that
    passed."""
    label = label or suite.name
    watch = _watch(suite, ctx)
    t0 = time.monotonic()
    runs: list[SuiteRun] = []
    phases = (("parallel", f"not {ONE_PROCESS}", ("-n", str(ctx.workers))),
              ("alone", ONE_PROCESS, ()))
    names = tuple(name for name, _, _ in phases)
    for name, mark, extra in phases:
        left = None if ctx.timeout is None else max(1.0, ctx.timeout - (time.monotonic() - t0))
        sub = dataclasses.replace(ctx, timeout=left, workers=1)
        runs.append(run_pytest_suite(_phase(suite, mark, extra), sub, env, f"{label}.{name}"))
        if runs[-1].timed_out:
            break
    empty = [r.returncode == PYTEST_NO_TESTS_COLLECTED and (r.counts or {}).get("tests", 0) == 0
             for r in runs]
    judged = [r for r, e in zip(runs, empty, strict=True) if not e]
    if any(r.timed_out for r in runs):
        status = STATUS_TIMEOUT
    elif judged and all(r.status == STATUS_PASS for r in judged):
        status = STATUS_PASS
    else:
        status = STATUS_FAIL
    junits = [ctx.out_dir / j for r in runs for j in r.junit]
    counts = parse_many(junits) if junits else None
    notes = [f"suite {label}.{n}: no test selected (left out of the verdict)" if e else r.message
             for n, r, e in zip(names, runs, empty, strict=False)]
    head = (f"suite {label} ({ctx.workers} workers, then the timing and alone tests in one "
            f"process): {status}")
    message = "; ".join([head, *notes])
    if not judged and status == STATUS_FAIL:
        message += "; strict: no phase selected any test"
    details = {**(env or {}), "workers": ctx.workers,
               "phases": [{"phase": f"{label}.{n}", "status": "empty" if e else r.status,
                           "message": note, "counts": r.counts}
                          for n, r, e, note in zip(names, runs, empty, notes, strict=False)]}
    status, message, details = _exclusive(watch, status, message, details)
    returncode = next((r.returncode for r in judged if r.returncode != 0), 0)
    return SuiteRun(suite.name, status, message, round(time.monotonic() - t0, 3), returncode,
                    any(r.timed_out for r in runs), tuple(c for r in runs for c in r.commands),
                    counts.as_dict() if counts else None, tuple(j for r in runs for j in r.junit),
                    tuple(g for r in runs for g in r.logs), details)


def multi_env(ctx: RunContext) -> dict[str, str]:
    """What a multirank test reads to know its world (DESIGN.md: emulated EP)."""
    return {"MEGAMOE_EP_MODE": ctx.mode, "MEGAMOE_WORLD_SIZE": str(ctx.world_size)}


def torchrun_command(suite: Suite, ctx: RunContext, junit_prefix: Path) -> list[str]:
    """torchrun with one process per GPU, each a pytest with its own JUnit report."""
    pytest_args = list(suite.paths)
    if suite.markexpr:
        pytest_args += ["-m", suite.markexpr]
    pytest_args += _pytest_args(suite, ctx)
    return [
        ctx.python, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={ctx.world_size}", "--tee=3",
        "-m", "tests.harness.rank_pytest", "--junit-prefix", str(junit_prefix), "--",
        *pytest_args,
    ]


def run_multi(suite: Suite, ctx: RunContext) -> SuiteRun:
    """Emulated: one process (P logical ranks on one GPU). Real: torchrun, P processes."""
    env = multi_env(ctx)
    if ctx.mode == "emulated":
        run = run_pytest_suite(suite, ctx, env=env)
        return SuiteRun(**{**run.__dict__, "details": {**run.details, "world_size": ctx.world_size,
                                                       "mode": ctx.mode}})
    prefix = ctx.out_dir / suite.name
    log = ctx.out_dir / f"{suite.name}.log"
    log.unlink(missing_ok=True)
    junits = [Path(f"{prefix}.rank{r}.junit.xml") for r in range(ctx.world_size)]
    for j in junits:
        j.unlink(missing_ok=True)
    cmd = torchrun_command(suite, ctx, prefix)
    watch = _watch(suite, ctx)
    res = run_process(cmd, cwd=ctx.root, log_path=log, timeout_s=ctx.timeout, env=_env(env))
    ranks = []
    statuses = []
    for r, j in enumerate(junits):
        counts = parse_junit(j) if j.exists() else None
        v = strict_verdict(f"suite multi rank {r}", res.returncode, res.timed_out, counts,
                           ctx.timeout)
        statuses.append(v.status)
        ranks.append({"rank": r, "status": v.status, "message": v.message,
                      "junit": _rel(ctx, j) if j.exists() else None,
                      "counts": counts.as_dict() if counts else None})
    present = [j for j in junits if j.exists()]
    total: JUnitCounts | None = parse_many(present) if present else None
    if STATUS_TIMEOUT in statuses:
        status = STATUS_TIMEOUT
    elif all(s == STATUS_PASS for s in statuses):
        status = STATUS_PASS
    else:
        status = STATUS_FAIL
    message = f"suite multi (real, {ctx.world_size} ranks): {status}; " + " | ".join(
        rk["message"] for rk in ranks)
    status, message, details = _exclusive(
        watch, status, message,
        {**env, "world_size": ctx.world_size, "mode": ctx.mode, "ranks": ranks})
    return SuiteRun(suite.name, status, message, res.duration_s, res.returncode, res.timed_out,
                    (tuple(cmd),), total.as_dict() if total else None,
                    tuple(rk["junit"] for rk in ranks if rk["junit"]), (_rel(ctx, log),),
                    details)


def run_sanitize(coverage: SanitizerCoverage, ctx: RunContext, exe: str) -> SuiteRun:
    """The sanitize suite for one tool, through ``sanitizers.wrapper``."""
    from sanitizers.wrapper import run_tool, write_junit

    t0 = time.monotonic()
    deadline = t0 + ctx.timeout if ctx.timeout else None
    tool_dir = ctx.out_dir / f"sanitize-{coverage.tool}"
    run = run_tool(coverage, exe=exe, python=ctx.python, root=ctx.root, out_dir=tool_dir,
                   keyword=ctx.filter, deadline=deadline)
    junit = ctx.out_dir / f"sanitize-{coverage.tool}.junit.xml"
    write_junit(run, junit)
    counts = parse_junit(junit)
    message = run.message
    if run.status == STATUS_TIMEOUT:
        message = f"suite sanitize {coverage.tool}: TIMEOUT after {ctx.timeout} s; {message}"
    return SuiteRun(
        "sanitize", run.status, message, round(time.monotonic() - t0, 3),
        0 if run.status == STATUS_PASS else 1, run.status == STATUS_TIMEOUT,
        tuple(r.command for r in run.results), counts.as_dict(), (_rel(ctx, junit),),
        tuple(_rel(ctx, Path(r.log)) for r in run.results),
        {"tool": coverage.tool, "sanitizer": run.as_dict()},
    )


def current_python() -> str:
    return sys.executable
