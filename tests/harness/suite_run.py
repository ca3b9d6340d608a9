"""Run one suite (pytest, multi-rank or sanitizer) and judge it strictly.

Every process runs through ``runner.run_process`` (own process group,
``--timeout`` enforced on the whole group). Artifacts land in the output
directory: ``<suite>.log``, ``<suite>.junit.xml`` (multi, every mode:
``multi.rank<R>.junit.xml`` and ``multi.rank<R>.rc`` per rank), ``sanitize-<tool>/`` per
tool.

``--workers N`` (N > 1) splits an exclusive-GPU pytest suite in two phases
(``run_split``): the tests marked neither ``timing`` nor ``alone`` in N pytest-xdist
workers, then those marked ``timing`` or ``alone`` in one process (``<suite>.parallel.*``,
``<suite>.alone.*``); the suite passes only when both phases do, its counts
are their sum, and one neighbour watch covers both (the workers are the
suite's own descendants, not neighbours), each worker with its share of the CPU cores as
its thread count (``worker_env``); with ``--sanitizers-beside`` the sanitizer tools
run beside the xdist phase and the watch covers the one-process phase only.

Every pytest suite's record (each rank's in ``multi``) carries ``time_profile``
(``tests.harness.time_profile``), and each phase its wall time.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.gpu_neighbours import NeighbourReport, NeighbourWatch, judge_exclusive
from tests.harness.group_names import DIST_ARGS
from tests.harness.json_fields import json_fields
from tests.harness.junit import JUnitCounts, case_ids, parse_junit, parse_many
from tests.harness.runner import run_process
from tests.harness.shard import SHARD_OPTION, SHARD_PLUGIN
from tests.harness.strict import STATUS_FAIL, STATUS_PASS, STATUS_TIMEOUT, strict_verdict
from tests.harness.time_profile import time_profile
from tests.harness.worlds import (
    BACKEND_ENV,
    CPU_DESELECTED,
    MODE_ENV,
    NO_MULTICAST_ENV,
    WORLD_NOTES,
    WORLD_SIZE_ENV,
)
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
    backend: str = ""
    """The multi suite's world backend (``tests.harness.worlds``)."""
    mutants: Path | None = None
    """The mutants suite's catalog (None: ``tests/mutants``)."""
    mutant_tiers: tuple[str, ...] = ("host",)
    """The tiers whose tests judge each mutant (``tests.harness.mutants.TIERS``)."""
    beside: Callable[[], object] | None = None
    """Work to run beside an exclusive suite's xdist phase (``--sanitizers-beside``: the
    sanitizer tools); ``run_split`` starts it with that phase and waits for it."""
    group_compiles: bool = False
    """``--group-compiles``: ``run_split``'s xdist phase runs under ``--dist loadgroup``."""
    deadline: float | None = None
    """``--wall-budget``'s end on ``time.monotonic()``'s clock, or None (``within_budget``)."""
    cpu_sharers: int = 1
    """How many test processes share the machine's CPU cores with each of this run's: the
    sanitizer tools that run together, and ``single``'s xdist workers when they run beside
    them (``qualify_main.execute``). Above 1, each sanitized case's process gets its share of
    the cores as its thread count (``worker_env``), as each xdist worker does."""
    sanitize_workers: int = 1
    """``--sanitize-workers``: how many of a sanitizer tool's cases run at once
    (``sanitizers.wrapper.run_tool``)."""


MIN_SUITE_TIMEOUT_S = 1.0
"""The least timeout a suite or phase is given, even when the budget is spent: it then
starts, times out at once and is recorded as a timeout, never left out."""


def within_budget(ctx: RunContext) -> RunContext:
    """``ctx`` with its ``timeout`` cut to what is left of the wall budget (``deadline``),
    at least ``MIN_SUITE_TIMEOUT_S``; unchanged without a deadline. Applied as each suite
    and each phase starts, so ``timeout`` is the bound that run really had (its record's
    TIMEOUT message names it)."""
    if ctx.deadline is None:
        return ctx
    left = max(MIN_SUITE_TIMEOUT_S, ctx.deadline - time.monotonic())
    timeout = left if ctx.timeout is None else min(ctx.timeout, left)
    return dataclasses.replace(ctx, timeout=round(timeout, 3))


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
        """The fields, ``details`` spread among them."""
        return {**json_fields(self, omit=("details",)), **self.details}


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
"""The pytest marker of tests that must not run beside the xdist workers, though they read no
timing (pyproject.toml). None carries it today: the compute-sanitizer self-tests did until
2026-12-06, when the workers' thread share let them pass beside them."""
ONE_PROCESS = f"({TIMING_MARK} or {ALONE_MARK})"
"""The tests ``run_split`` runs after the xdist phase, in one process."""


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""What sets an xdist worker's CPU threads (torch's intra-op pool reads ``OMP_NUM_THREADS``)."""


def worker_threads(workers: int, cpus: int | None = None) -> int:
    """CPU threads per xdist worker: the machine's cores shared out among the workers, at
    least one. Each worker's torch otherwise takes a thread per core for every CPU op (the
    oracle's reference rows, the checks), twelve workers on sixteen cores 192 threads."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, cpus // max(1, workers))


def worker_env(env: dict[str, str] | None, workers: int,
               cpus: int | None = None) -> dict[str, str]:
    """``env`` with ``THREAD_VARIABLES`` at ``worker_threads`` for the xdist phase, unless the
    caller's environment (or ``env``) already sets one of them: then theirs stands."""
    env = dict(env or {})
    if any(v in os.environ or v in env for v in THREAD_VARIABLES):
        return env
    n = str(worker_threads(workers, cpus))
    return {**env, **dict.fromkeys(THREAD_VARIABLES, n)}


def _in_effect(env: dict[str, str]) -> str | None:
    """The xdist phase's ``OMP_NUM_THREADS`` (its env over the caller's), for the record."""
    return env.get(THREAD_VARIABLES[0], os.environ.get(THREAD_VARIABLES[0]))


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
    status, message, details = _exclusive(watch, verdict.status, verdict.message,
                                          {**(env or {}), **_profile([junit])})
    return SuiteRun(suite.name, status, message, res.duration_s, res.returncode,
                    res.timed_out, (tuple(cmd),), counts.as_dict() if counts else None,
                    (_rel(ctx, junit),) if junit.exists() else (), (_rel(ctx, log),), details)


def _profile(junits: list[Path]) -> dict[str, object]:
    """The record's ``time_profile`` of these reports (``tests.harness.time_profile``);
    nothing when none was written."""
    present = [j for j in junits if j.exists()]
    return {"time_profile": time_profile(present).as_dict()} if present else {}


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
    passed.

    With ``ctx.beside`` (``--sanitizers-beside``) that work starts with the xdist phase,
    which holds no timing test, and the one-process phase waits for it: the GPU is the
    suite's alone from then on, and the neighbour watch covers that phase only. The time
    spent waiting for it does not count against ``--timeout``; it does against the wall
    budget (``within_budget``), which bounds every phase and the work beside."""
    label = label or suite.name
    watch = None if ctx.beside else _watch(suite, ctx)
    t0 = time.monotonic()
    waited = 0.0
    runs: list[SuiteRun] = []
    grouped = DIST_ARGS if ctx.group_compiles else ()
    parallel_env = worker_env(env, ctx.workers)
    phases = (("parallel", f"not {ONE_PROCESS}", ("-n", str(ctx.workers), *grouped)),
              ("alone", ONE_PROCESS, ()))
    names = tuple(name for name, _, _ in phases)
    for name, mark, extra in phases:
        spent = time.monotonic() - t0 - waited
        left = None if ctx.timeout is None else max(MIN_SUITE_TIMEOUT_S, ctx.timeout - spent)
        sub = within_budget(dataclasses.replace(ctx, timeout=left, workers=1, beside=None))
        phase = _phase(suite, mark, extra)
        phase_env = parallel_env if name == "parallel" else env
        if name == "parallel" and ctx.beside is not None:
            with ThreadPoolExecutor(max_workers=1) as pool:
                neighbours = pool.submit(ctx.beside)
                runs.append(run_pytest_suite(phase, sub, phase_env, f"{label}.{name}"))
                t1 = time.monotonic()
                neighbours.result()
                waited = time.monotonic() - t1
            watch = _watch(suite, ctx)
        else:
            runs.append(run_pytest_suite(phase, sub, phase_env, f"{label}.{name}"))
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
    beside = " beside the sanitizer tools" if ctx.beside else ""
    head = (f"suite {label} ({ctx.workers} workers{beside}, then the timing and alone tests in "
            f"one process): {status}")
    message = "; ".join([head, *notes])
    if not judged and status == STATUS_FAIL:
        message += "; strict: no phase selected any test"
    details = {**(env or {}), "workers": ctx.workers, "sanitizers_beside": bool(ctx.beside),
               "waited_for_beside_s": round(waited, 3),
               "worker_cpu_threads": _in_effect(parallel_env),
               "phases": [{"phase": f"{label}.{n}", "status": "empty" if e else r.status,
                           "message": note, "counts": r.counts, "duration_s": r.duration_s}
                          for n, r, e, note in zip(names, runs, empty, notes, strict=False)],
               **_profile(junits)}
    status, message, details = _exclusive(watch, status, message, details)
    returncode = next((r.returncode for r in judged if r.returncode != 0), 0)
    return SuiteRun(suite.name, status, message, round(time.monotonic() - t0, 3), returncode,
                    any(r.timed_out for r in runs), tuple(c for r in runs for c in r.commands),
                    counts.as_dict() if counts else None, tuple(j for r in runs for j in r.junit),
                    tuple(g for r in runs for g in r.logs), details)


def multi_env(ctx: RunContext) -> dict[str, str]:
    """What every rank reads to know its world (``megamoe.comm.launch``), multicast off."""
    return {MODE_ENV: ctx.mode, BACKEND_ENV: ctx.backend, WORLD_SIZE_ENV: str(ctx.world_size),
            **NO_MULTICAST_ENV}


def multi_markexpr(suite: Suite, mode: str) -> str:
    """The suite's selection in ``mode``: a CPU world does not select the CUDA-graph tests
    (``worlds.CPU_DESELECTED``; the record says so)."""
    if mode != "cpu":
        return suite.markexpr
    return f"({suite.markexpr}) and not {CPU_DESELECTED}" if suite.markexpr else (
        f"not {CPU_DESELECTED}")


MULTI_SANITIZE = "multi-sanitize"
"""The record's suite name of a multi run under compute-sanitizer (``--suite multi
--sanitizer-tool T``): the designated cases only, so it never stands for ``multi``."""


def torchrun_command(suite: Suite, ctx: RunContext, junit_prefix: Path,
                     sanitizer: tuple[str, str] | None = None) -> list[str]:
    """torchrun with one process per rank, each a pytest with its own JUnit report
    (``tests.harness.rank_pytest``): the same launcher in every mode. ``sanitizer``
    (``(tool, compute-sanitizer)``): every rank's process runs under the tool, logging to
    ``<prefix>.rank<R>.<tool>.log``, over the tier's designated cases (marker
    ``sanitizer``)."""
    pytest_args = list(suite.paths)
    markexpr = multi_markexpr(suite, ctx.mode)
    if sanitizer is not None:
        markexpr = f"({markexpr}) and sanitizer" if markexpr else "sanitizer"
    if markexpr:
        pytest_args += ["-m", markexpr]
    pytest_args += [*_pytest_args(suite, ctx), *suite.extra_args]
    launcher = [ctx.python, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={ctx.world_size}", "--tee=3"]
    target = [ctx.python, "-m", "tests.harness.rank_pytest", "--junit-prefix",
              str(junit_prefix), "--", *pytest_args]
    if sanitizer is None:
        return [*launcher, *target[1:]]
    from sanitizers.wrapper import sanitizer_command

    tool, exe = sanitizer
    log = shlex.quote(f"{junit_prefix}.rank") + "$RANK" + shlex.quote(f".{tool}.log")
    wrapped = sanitizer_command(exe, tool, ["--log-file", "@LOG@", *target],
                                error_exitcode=False)
    script = "exec " + shlex.join(wrapped).replace(shlex.quote("@LOG@"), log)
    return [*launcher, "--no-python", "sh", "-c", script]


def _rank_returncode(rc_file: Path, fallback: int) -> int:
    """The rank's pytest exit code (``rank_pytest``), or ``fallback`` when it never wrote one
    (it died, or the group was killed)."""
    try:
        return int(rc_file.read_text().strip())
    except (OSError, ValueError):
        return fallback if fallback != 0 else 1


def same_tests_everywhere(junits: list[Path]) -> str:
    """'' when every rank's report holds the same test ids, else what differs (the ranks of
    a world must run the same tests in the same order, or they stop meeting each other)."""
    sets = [set(case_ids(j)) for j in junits]
    if not sets or all(s == sets[0] for s in sets):
        return ""
    lines = []
    for r, s in enumerate(sets[1:], start=1):
        only0, only_r = sorted(sets[0] - s), sorted(s - sets[0])
        if only0 or only_r:
            lines.append(f"rank 0 only: {only0[:3]}; rank {r} only: {only_r[:3]}")
    return "ranks collected different tests: " + " | ".join(lines)


def _planted_case(coverage: SanitizerCoverage, exe: str, ctx: RunContext, out: Path) -> dict:
    """The tool's planted self-test, in this very run (it must be caught: the tool is wired
    right); one process, as in the ``sanitize`` suite."""
    from sanitizers.wrapper import EXPECT_CAUGHT, run_case

    res = run_case(coverage.tool, coverage.planted, EXPECT_CAUGHT, exe=exe, python=ctx.python,
                   root=ctx.root, out_dir=out, timeout_s=ctx.timeout or 600.0,
                   expect_report=coverage.planted_report)
    return {"case": res.case, "ok": res.ok, "reason": res.reason, "log": _rel(ctx, Path(res.log))}


def run_multi(suite: Suite, ctx: RunContext,
              sanitizer: tuple[SanitizerCoverage, str] | None = None) -> SuiteRun:
    """Every mode: torchrun, one process per rank (``tests.harness.worlds``). A rank passes
    when its report passes strictly and its pytest exited 0; the suite passes when every
    rank passes and every rank ran the same test ids; the whole process group is killed at
    ``--timeout`` (status timeout). ``sanitizer`` (``(coverage, compute-sanitizer)``): the
    run is ``MULTI_SANITIZE``: the tool's planted self-test must be caught first, then every
    rank's process runs the designated cases under the tool and passes only with a clean
    summary (zero errors) as well."""
    from tests.harness.rank_pytest import rank_paths

    name = suite.name if sanitizer is None else MULTI_SANITIZE
    tool = None if sanitizer is None else sanitizer[0].tool
    env = multi_env(ctx)
    dropped: tuple[str, ...] = ()
    if tool is not None:
        from sanitizers.wrapper import SANITIZER_TOOL_ENV, UNCACHED_ALLOCATOR_ENV

        env.update({SANITIZER_TOOL_ENV: tool})
        # The caching allocator stays on (unlike the one-process sanitize suite): the EP
        # forward's capture allocates its send tables' temporaries from the graph's pool, and
        # without the caching allocator that is a cudaMalloc during capture, which CUDA refuses
        # (cudaErrorStreamCaptureUnsupported, seen on the H200). The exchange's buffers are
        # symmetric allocations of their own either way; the tests' guard bytes and NaN poison
        # judge writes outside the regions.
        dropped = (UNCACHED_ALLOCATOR_ENV,)
    label = name if tool is None else f"{name}-{tool}"
    prefix = ctx.out_dir / label
    log = ctx.out_dir / f"{label}.log"
    log.unlink(missing_ok=True)
    paths = [rank_paths(str(prefix), r) for r in range(ctx.world_size)]
    tool_logs = [Path(f"{prefix}.rank{r}.{tool}.log") for r in range(ctx.world_size)]
    for junit, rc_file in paths:
        junit.unlink(missing_ok=True)
        rc_file.unlink(missing_ok=True)
    for p in tool_logs:
        p.unlink(missing_ok=True)
    planted = None
    if sanitizer is not None:
        planted = _planted_case(sanitizer[0], sanitizer[1], ctx, ctx.out_dir / label)
        ctx = within_budget(ctx)  # the world gets what the self-test left of the budget
    cmd = torchrun_command(suite, ctx, prefix,
                           None if sanitizer is None else (str(tool), sanitizer[1]))
    watch = _watch(suite, ctx) if ctx.mode != "cpu" else None
    run_env = {k: v for k, v in _env(env).items() if k not in dropped}
    res = run_process(cmd, cwd=ctx.root, log_path=log, timeout_s=ctx.timeout, env=run_env)
    ranks = []
    statuses = []
    for r, (junit, rc_file) in enumerate(paths):
        counts = parse_junit(junit) if junit.exists() else None
        rc = _rank_returncode(rc_file, res.returncode)
        v = strict_verdict(f"suite {label} rank {r}", rc, res.timed_out, counts, ctx.timeout)
        status, message = v.status, v.message
        entry: dict = {"rank": r, "returncode": rc,
                       "junit": _rel(ctx, junit) if junit.exists() else None,
                       "counts": counts.as_dict() if counts else None}
        if tool is not None:
            from sanitizers.summary import STATUS_PASS as CLEAN
            from sanitizers.summary import parse_summary

            text = (tool_logs[r].read_text(encoding="utf-8", errors="replace")
                    if tool_logs[r].exists() else "")
            summary = parse_summary(text, tool)
            entry["sanitizer"] = {**summary.as_dict(), "log": _rel(ctx, tool_logs[r])}
            if status == STATUS_PASS and summary.status != CLEAN:
                status = STATUS_FAIL
            message += f"; {tool}: {summary.status} ({summary.reason})"
        statuses.append(status)
        ranks.append({**entry, "status": status, "message": message, **_profile([junit])})
    present = [junit for junit, _ in paths if junit.exists()]
    total: JUnitCounts | None = parse_many(present) if present else None
    differ = same_tests_everywhere(present) if len(present) == ctx.world_size else ""
    caught = planted is None or planted["ok"]
    if STATUS_TIMEOUT in statuses:
        status = STATUS_TIMEOUT
    elif (all(s == STATUS_PASS for s in statuses) and not differ and res.returncode == 0
          and caught):
        status = STATUS_PASS
    else:
        status = STATUS_FAIL
    notes = [rk["message"] for rk in ranks]
    if planted is not None:
        notes.insert(0, f"planted {tool} self-test: {planted['reason']}")
    if differ:
        notes.append(differ)
    if res.returncode != 0 and not res.timed_out:
        notes.append(f"torchrun exited {res.returncode} (a rank's process died)")
    message = (f"suite {label} ({ctx.mode}, {ctx.world_size} ranks, {ctx.backend}): {status}; "
               + " | ".join(notes))
    details = {**env, "world_size": ctx.world_size, "mode": ctx.mode, "backend": ctx.backend,
               "world": WORLD_NOTES.get(ctx.mode, ""), "ranks": ranks}
    if tool is not None:
        details.update({"tool": tool, "planted": planted})
    if ctx.mode == "cpu":
        details["deselected"] = f"tests marked {CPU_DESELECTED} (CUDA graphs need a GPU)"
    status, message, details = _exclusive(watch, status, message, details)
    return SuiteRun(name, status, message, res.duration_s, res.returncode, res.timed_out,
                    (tuple(cmd),), total.as_dict() if total else None,
                    tuple(rk["junit"] for rk in ranks if rk["junit"]), (_rel(ctx, log),),
                    details)


def run_mutants(ctx: RunContext) -> SuiteRun:
    """The mutants suite (``tests.harness.mutants``): every patch of the catalog against the
    tests that cover it; passes when every mutant that ran was killed. ``--timeout`` bounds
    each mutant."""
    from tests.harness.mutants import CATALOG, run_catalog

    catalog = ctx.mutants if ctx.mutants is not None else ctx.root / CATALOG.relative_to(
        CATALOG.parents[1])
    t0 = time.monotonic()
    run = run_catalog(catalog, root=ctx.root, python=ctx.python, tiers=ctx.mutant_tiers,
                      timeout_s=ctx.timeout, out_dir=ctx.out_dir / "mutants")
    ran = [r for r in run.results if r.verdict != "not run"]
    counts = {"tests": len(ran), "passed": sum(r.verdict == "killed" for r in ran),
              "failed": len(ran) - sum(r.verdict == "killed" for r in ran), "errors": 0,
              "skipped": 0, "skipped_ids": [], "failed_ids": [
                  f"{r.name} ({r.verdict}: {r.detail})" for r in ran if r.verdict != "killed"]}
    return SuiteRun("mutants", run.status, run.message, round(time.monotonic() - t0, 3),
                    0 if run.status == STATUS_PASS else 1, False, (), counts, (),
                    tuple(_rel(ctx, Path(r.log)) for r in run.results if r.log),
                    {"catalog": str(catalog), "tiers": list(ctx.mutant_tiers),
                     "mutants": [r.as_dict() for r in run.results], "verdicts": run.counts})


def run_sanitize(coverage: SanitizerCoverage, ctx: RunContext, exe: str) -> SuiteRun:
    """The sanitize suite for one tool, through ``sanitizers.wrapper``."""
    from sanitizers.wrapper import run_tool, write_junit

    t0 = time.monotonic()
    deadline = t0 + ctx.timeout if ctx.timeout else None
    tool_dir = ctx.out_dir / f"sanitize-{coverage.tool}"

    def progress(case, done: int, total: int) -> None:  # type: ignore[no-untyped-def]
        print(f"qualify.py: sanitize {coverage.tool} {done}/{total}: "
              f"{'ok  ' if case.ok else 'FAIL'} {case.case} ({case.reason})", flush=True)

    threads = worker_env(None, ctx.cpu_sharers) if ctx.cpu_sharers > 1 else {}
    run = run_tool(coverage, exe=exe, python=ctx.python, root=ctx.root, out_dir=tool_dir,
                   keyword=ctx.filter, deadline=deadline, on_case=progress, env=threads,
                   workers=ctx.sanitize_workers)
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
        {"tool": coverage.tool, "sanitizer": run.as_dict(), "cpu_sharers": ctx.cpu_sharers,
         "case_cpu_threads": _in_effect(threads), "case_workers": ctx.sanitize_workers},
    )


def current_python() -> str:
    return sys.executable
