"""qualify.py's logic: preflight, strict suite runs, the record, the ledger check.

Exit codes: 0 every suite passed; 1 a suite failed; 2 preflight refused
(or bad arguments); 124 a suite timed out (its process group was killed);
128 + N when signal N (SIGTERM, SIGHUP, SIGINT) ended the run: every running suite's
process group is killed first and no record is written (``runner.terminate_groups_on_signals``).
``--check-ledger``: 0 when the committed records vouch for the current
kernel sources, 1 otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from megamoe.backends.registry import ENV as MOE_BACKEND_ENV
from megamoe.backends.registry import selected_name
from tests.harness import seed_suite
from tests.harness.cli import QualifyArgs, parse_args
from tests.harness.compile_share import shared_compiles
from tests.harness.environment import collect_environment, git_info
from tests.harness.gpu_neighbours import NeighbourWatch
from tests.harness.hashing import source_hashes
from tests.harness.ledger import check_ledger
from tests.harness.manifest import committable, utc_now, write_record
from tests.harness.mutants import GPU_TIERS
from tests.harness.preflight import (
    GPU_SUITES,
    KERNEL_ARCH,
    Check,
    check_cute_dsl,
    check_gpus,
    check_moe_backend,
    check_require_arch,
    check_sanitizer,
    check_torchrun,
)
from tests.harness.runner import TIMEOUT_EXIT, terminate_groups_on_signals
from tests.harness.strict import STATUS_PASS, STATUS_PREFLIGHT, STATUS_TIMEOUT
from tests.harness.suite_run import (
    MULTI_SANITIZE,
    RunContext,
    SuiteRun,
    run_multi,
    run_mutants,
    run_pytest_suite,
    run_sanitize,
    within_budget,
)
from tests.harness.worlds import check_world, resolve_backend, resolve_mode
from tests.suites import (
    SANITIZE_COVERAGE,
    SANITIZER_TOOLS,
    SEED_SUITES,
    SUITES,
    SanitizerCoverage,
    Suite,
)

ROOT = Path(__file__).resolve().parents[2]
EXIT_PREFLIGHT = 2
Runner = Callable[..., SuiteRun]
"""``run(name, tool[, beside])``: one step of the plan (``beside``: ``RunContext.beside``)."""


def planned_runs(args: QualifyArgs) -> list[tuple[str, str | None]]:
    """(suite, sanitizer tool) pairs in run order."""
    tools = [args.sanitizer_tool] if args.sanitizer_tool else list(SANITIZER_TOOLS)
    if args.suite in SEED_SUITES:
        return seed_suite.plan(args.suite, parts=args.parts or seed_suite.PARTS,
                               tools=tuple(tools))
    if args.suite == "all":
        return [("host", None), ("single", None), ("multi", None)] + [
            ("sanitize", t) for t in tools]
    if args.suite == "gpu":
        return [("single", None)] + [("sanitize", t) for t in tools]
    if args.suite == "sanitize":
        return [("sanitize", args.sanitizer_tool)]
    if args.suite == "multi" and args.sanitizer_tool:
        return [(MULTI_SANITIZE, args.sanitizer_tool)]
    return [(str(args.suite), None)]


def runs_beside_others(step: tuple[str, str | None]) -> bool:
    """Is ``step`` a one-process sanitizer run (the ``sanitize`` suite's tool, or a seed
    suite's ``sanitize`` part under one tool), which may share the GPU with its kind? A multi
    tier under a tool (``MULTI_SANITIZE``) is a world of processes and runs alone."""
    name, tool = step
    return tool is not None and seed_suite.part_kind(name) == "sanitize"


def execute(plan: Sequence[tuple[str, str | None]], run: Runner,
            sanitizers_beside: bool = False, workers: int = 1,
            case_workers: int = 1) -> list[SuiteRun]:
    """Run the plan in order, except that consecutive sanitizer runs start together (they
    may share the GPU, and together take about as long as one) after everything before them
    has finished: ``single`` and ``multi`` hold timing tests and need the GPU alone
    (``Suite.exclusive_gpu``). With ``sanitizers_beside`` (``--sanitizers-beside``) the
    sanitizer runs that follow ``single`` start with its xdist phase instead, and its timing
    phase waits for them (``suite_run.run_split``). Results come back in plan order. Each
    sanitizer run is told how many test processes share the CPU with its own (``sharers``:
    ``case_workers`` cases of each tool together (``--sanitize-workers``), plus ``workers``
    xdist workers beside ``single``; ``RunContext.cpu_sharers``)."""
    runs: list[SuiteRun] = []

    def together(steps: Sequence[tuple[str, str | None]], sharers: int) -> list[SuiteRun]:
        """``steps`` started at once, each told that ``sharers`` processes share the CPU."""
        with ThreadPoolExecutor(max_workers=len(steps)) as pool:
            return list(pool.map(lambda step: run(*step, sharers=sharers), steps))

    i = 0
    while i < len(plan):
        j = i + 1 if plan[i] == ("single", None) and sanitizers_beside else i
        while j < len(plan) and runs_beside_others(plan[j]):
            j += 1
        if plan[i] == ("single", None) and j - i > 1:
            tools = plan[i + 1:j]
            done: list[SuiteRun] = []

            def sanitizers(tools: Sequence[tuple[str, str | None]] = tools,
                           done: list[SuiteRun] = done) -> None:
                done.extend(together(tools, len(tools) * case_workers + workers))

            print(f"qualify.py: single started, sanitize ({', '.join(str(t) for _, t in tools)})"
                  " beside its xdist phase", flush=True)
            batch = [run("single", None, sanitizers)]
            if not done:  # the suite had no xdist phase to run them beside: run them now
                done.extend(together(tools, len(tools) * case_workers))
            batch += done
            i = j
        elif j - i > 1:
            print(f"qualify.py: sanitize ({', '.join(str(t) for _, t in plan[i:j])}) started",
                  flush=True)
            batch = together(plan[i:j], (j - i) * case_workers)
            i = j
        else:
            name, tool = plan[i]
            print(f"qualify.py: {name}{f' ({tool})' if tool else ''} started", flush=True)
            batch = [run(*plan[i], sharers=case_workers if runs_beside_others(plan[i]) else 1)]
            i += 1
        for r in batch:
            print(r.message, flush=True)
        runs += batch
    return runs


def preflight(args: QualifyArgs, plan: Sequence[tuple[str, str | None]],
              gpus: Sequence[dict], python: str, backend: dict | None = None) -> list[Check]:
    """Every check that must pass before any suite runs (``args.mode`` already resolved:
    ``resolve_args``); ``backend``: the record's ``moe_backend`` entry (its architectures
    decide which GPUs serve; default ``megamoe``'s)."""
    checks = []
    if args.require_arch:
        checks.append(check_require_arch(args.require_arch, gpus))
    backend = backend or {"name": "megamoe", "archs": [KERNEL_ARCH]}
    archs, who = tuple(backend.get("archs") or (KERNEL_ARCH,)), str(backend["name"])
    names = {name for name, _ in plan}
    kinds = {seed_suite.part_kind(name) for name in names}
    multi = bool(kinds & {"multi", MULTI_SANITIZE})
    for name in sorted(names & set(GPU_SUITES) - {"multi"}):
        checks.append(check_gpus(name, gpus, 1, archs, who))
    for name in sorted(n for n in names if seed_suite.split_part(n) is not None
                       and seed_suite.part_kind(n) != "multi"):
        checks.append(check_gpus(name, gpus, 1, archs, who))
    if "mutants" in names and set(args.mutant_tiers) & set(GPU_TIERS):
        checks.append(check_gpus("mutants (tier single)", gpus, 1))
    if multi:
        checks.append(check_world(args.mode, args.backend, args.world_size, gpus))
    if MULTI_SANITIZE in names and args.mode == "cpu":
        checks.append(Check("multi: sanitizer", False, "compute-sanitizer checks kernels: a "
                            "CPU world runs none (use --mode emulated or real)"))
    checks.append(check_cute_dsl(python))
    if multi:
        checks.append(check_torchrun())
    if kinds & {"sanitize", MULTI_SANITIZE}:
        from sanitizers.wrapper import find_compute_sanitizer

        checks.append(check_sanitizer(find_compute_sanitizer()))
    return checks


def resolve_args(args: QualifyArgs, gpus: Sequence[dict]) -> QualifyArgs:
    """``args`` with the multi suite's world chosen (``tests.harness.worlds``): the mode from
    the machine when none was asked for (None when it has no GPU: preflight refuses), the
    mode's first backend when none was asked for; and the MegaMoE backend in force
    (``megamoe.backends.registry.selected_name``)."""
    mode = resolve_mode(args.mode, args.world_size, gpus)
    backend = resolve_backend(args.backend, mode) if mode is not None else args.backend
    return dataclasses.replace(args, mode=mode, backend=backend,
                               moe_backend=selected_name(args.moe_backend))


@contextmanager
def moe_backend_env(name: str) -> Iterator[None]:
    """Every suite's processes judge backend ``name``: ``$MEGAMOE_MOE_BACKEND`` set for the
    run (children inherit it), restored afterwards."""
    saved = os.environ.get(MOE_BACKEND_ENV)
    os.environ[MOE_BACKEND_ENV] = name
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(MOE_BACKEND_ENV, None)
        else:
            os.environ[MOE_BACKEND_ENV] = saved


def run_one(name: str, tool: str | None, ctx: RunContext, suites: Mapping[str, Suite],
            coverage: Mapping[str, SanitizerCoverage]) -> SuiteRun:
    if seed_suite.split_part(name) is not None:
        from sanitizers.wrapper import find_compute_sanitizer

        return seed_suite.run_part(name, tool, ctx, lambda: str(find_compute_sanitizer()))
    if name == "sanitize":
        from sanitizers.wrapper import find_compute_sanitizer

        return run_sanitize(coverage[str(tool)], ctx, str(find_compute_sanitizer()))
    if name == "multi":
        return run_multi(suites[name], ctx)
    if name == "mutants":
        return run_mutants(ctx)
    if name == MULTI_SANITIZE:
        from sanitizers.wrapper import find_compute_sanitizer

        return run_multi(suites["multi"], ctx, sanitizer=(coverage[str(tool)],
                                                          str(find_compute_sanitizer())))
    return run_pytest_suite(suites[name], ctx)


def overall_status(runs: Sequence[SuiteRun]) -> str:
    if any(r.status == STATUS_TIMEOUT for r in runs):
        return STATUS_TIMEOUT
    return STATUS_PASS if runs and all(r.status == STATUS_PASS for r in runs) else "fail"


def main(
    argv: Sequence[str],
    *,
    root: Path = ROOT,
    suites: Mapping[str, Suite] = SUITES,
    coverage: Mapping[str, SanitizerCoverage] = SANITIZE_COVERAGE,
    python: str = sys.executable,
    environment: dict | None = None,
    neighbour_watch: Callable[[], NeighbourWatch] = NeighbourWatch,
) -> int:
    """Entry point; ``root``/``suites``/``coverage``/``environment``/``neighbour_watch`` are
    injectable for tests."""
    args = parse_args(argv)
    deadline = None if args.wall_budget is None else time.monotonic() + args.wall_budget
    if args.check_ledger:
        result = check_ledger(root)
        print("\n".join(result.lines))
        return 0 if result.ok else 1
    assert args.output_dir is not None
    out = args.output_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = utc_now()
    env = environment if environment is not None else collect_environment()
    plan = planned_runs(args)
    args = resolve_args(args, env.get("gpus") or [])
    backend_check, backend = check_moe_backend(str(args.moe_backend))
    checks = [backend_check, *preflight(args, plan, env.get("gpus") or [], python,
                                        backend if backend_check.ok else None)]
    record: dict = {
        "arguments": {**args.as_dict(), "argv": list(argv)},
        "moe_backend": backend,
        "started_at": started,
        "preflight": [c.as_dict() for c in checks],
        "environment": env,
        "git": git_info(root),
        "source_hashes": {k: v.as_dict() for k, v in source_hashes(root).items()},
    }
    failed = [c for c in checks if not c.ok]
    if failed:
        for c in failed:
            print(f"qualify.py: preflight {c.name}: {c.detail}", file=sys.stderr)
        path = write_record(out, {**record, "status": STATUS_PREFLIGHT, "suites": [],
                                  "finished_at": utc_now()})
        print(f"qualify.py: refused; record written to {path}", file=sys.stderr)
        return EXIT_PREFLIGHT
    ctx = RunContext(root, python, out, args.filter, args.timeout, args.world_size,
                     args.mode or "", neighbour_watch, args.workers, args.shard,
                     args.backend or "", args.mutants, args.mutant_tiers,
                     group_compiles=args.group_compiles, deadline=deadline,
                     sanitize_workers=args.sanitize_workers)
    with terminate_groups_on_signals(), moe_backend_env(str(args.moe_backend)), \
            shared_compiles(args.share_compiles):
        runs = execute(plan, lambda name, tool, beside=None, sharers=1: run_one(
            name, tool, within_budget(dataclasses.replace(ctx, beside=beside,
                                                          cpu_sharers=sharers)),
            suites, coverage),
            args.sanitizers_beside, args.workers, args.sanitize_workers)
    status = overall_status(runs)
    final = {**record, "status": status, "finished_at": utc_now(),
             "suites": [r.as_dict() for r in runs]}
    path = write_record(out, final)
    why_not = committable(final)
    print(f"qualify.py: {status}; record {path}; summary {path.parent / 'summary.md'}"
          + (f" ({why_not})" if why_not else ""))
    if status == STATUS_TIMEOUT:
        return TIMEOUT_EXIT
    return 0 if status == STATUS_PASS else 1
