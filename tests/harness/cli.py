"""qualify.py's arguments, validated once into a frozen ``QualifyArgs``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.harness.mutants import TIERS as MUTANT_TIERS
from tests.harness.seed_suite import PARTS as SEED_PARTS
from tests.harness.shard import parse_shard
from tests.harness.worlds import BACKENDS, MODES, WORLD_SIZES
from tests.suites import SANITIZER_TOOLS, SEED_SUITES

SUITE_CHOICES = ("host", "single", "multi", "sanitize", "gpu", "all", "mutants",
                 *SEED_SUITES)
"""``gpu``: what a kernel change needs on one GPU (the ledger's records): ``single``, then
the four sanitizer tools at once; ``all``: ``host``, ``single``, ``multi``, then the tools;
the seeds' named suites (``tests.suites.SEED_SUITES``) run their three parts
(``tests.harness.seed_suite``)."""
SHARDED_SUITES = ("single", "gpu")
"""Suites ``--shard`` may split (``tests.harness.shard``; the ledger joins their shards). In
``gpu`` the shard splits its ``single`` run (``shard.SPLIT_SUITE``) only: the sanitizer tools
run whole, so ``--suite gpu --shard 1/N --sanitizers-beside`` then ``--suite single --shard
I/N`` for the others qualify everything in N device calls."""


@dataclass(frozen=True)
class QualifyArgs:
    suite: str | None
    output_dir: Path | None
    world_size: int
    mode: str | None
    """``--mode``, or None: chosen from the machine (``tests.harness.worlds.resolve_mode``)."""
    filter: str | None
    timeout: float | None
    sanitizer_tool: str | None
    require_arch: str | None
    check_ledger: bool
    workers: int = 1
    shard: str | None = None
    """``I/N``: only shard I of N of the suite's tests (``tests.harness.shard``)."""
    backend: str | None = None
    """``--backend`` of the multi suite's world, or None: the mode's first."""
    mutants: Path | None = None
    """``--mutants DIR``: the catalog of ``--suite mutants`` (default ``tests/mutants``)."""
    mutant_tiers: tuple[str, ...] = ("host",)
    """``--mutant-tiers``: the tiers whose tests judge each mutant."""
    moe_backend: str | None = None
    """``--moe-backend``: the MegaMoE the contract tests judge (``megamoe.backends``), or
    None: ``$MEGAMOE_MOE_BACKEND``, else ``megamoe``."""
    sanitizers_beside: bool = False
    """``--sanitizers-beside`` (``--suite gpu``): the sanitizer tools run beside ``single``'s
    xdist phase instead of after the whole suite (``tests.harness.suite_run.run_split``)."""
    parts: tuple[str, ...] | None = None
    """``--parts`` of a seed suite (``tests.harness.seed_suite.PARTS``), or None: every part.
    The ledger's seed-suite lines join parts run in several records (``ledger.seed_parts``)."""
    group_compiles: bool = False
    """``--group-compiles`` (``--workers`` > 1): the xdist phase sends the tests that compile
    the same kernels to one worker (``tests.harness.compile_groups``)."""
    share_compiles: bool = False
    """``--share-compiles``: every process of the run compiles a kernel only where no other
    has compiled it yet (``tests.harness.compile_share``: the DSL's file cache in a fresh
    directory of the run's own)."""
    sanitize_workers: int = 1
    """``--sanitize-workers``: how many cases each sanitizer tool runs at once, each its own
    process under the tool (``sanitizers.wrapper.run_tool``); their thread share counts them
    (``qualify_main.execute``)."""
    wall_budget: float | None = None
    """``--wall-budget``: seconds for the whole run, or None: no bound but ``--timeout``'s.
    Every suite and phase gets at most what is left of it (``suite_run.within_budget``), so
    a run inside a device call of fixed length ends, writes its record and leaves its logs
    before the call is cut off."""

    def as_dict(self) -> dict[str, object]:
        return {
            "suite": self.suite,
            "output_dir": str(self.output_dir) if self.output_dir else None,
            "world_size": self.world_size,
            "mode": self.mode,
            "filter": self.filter,
            "timeout": self.timeout,
            "sanitizer_tool": self.sanitizer_tool,
            "require_arch": self.require_arch,
            "check_ledger": self.check_ledger,
            "workers": self.workers,
            "shard": self.shard,
            "backend": self.backend,
            "mutants": str(self.mutants) if self.mutants else None,
            "mutant_tiers": list(self.mutant_tiers),
            "moe_backend": self.moe_backend,
            "sanitizers_beside": self.sanitizers_beside,
            "parts": list(self.parts) if self.parts is not None else None,
            "wall_budget": self.wall_budget,
            "group_compiles": self.group_compiles,
            "share_compiles": self.share_compiles,
            "sanitize_workers": self.sanitize_workers,
        }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="qualify.py",
        description="Run suites strictly (no skips, no empty runs) and write an auditable "
        "record; or check the committed ledger (--check-ledger).",
    )
    ap.add_argument("--suite", choices=SUITE_CHOICES,
                    help="host (CPU tier), single (one GPU), multi (an EP world), sanitize (one "
                    "compute-sanitizer tool), gpu (single, then the four tools), all, "
                    "mutants (planted bugs against the tests that cover them), or a seed "
                    f"suite ({', '.join(SEED_SUITES)}: its single, multi and sanitize parts)")
    ap.add_argument("--output-dir", type=Path, help="where logs, JUnit XML and the record go")
    ap.add_argument("--world-size", type=int, choices=WORLD_SIZES, default=2,
                    help="ranks for --suite multi")
    ap.add_argument("--mode", choices=MODES,
                    help="multi: real (one process and one GPU per rank), emulated (P "
                    "processes on one GPU) or cpu (P processes on the CPU, no kernels); all "
                    "started by torchrun. Default: real with --world-size GPUs, else emulated")
    ap.add_argument("--backend", choices=sorted({b for bs in BACKENDS.values() for b in bs}),
                    help="multi: symmetric memory of the world (default: torch_symm on GPUs, "
                    "host on the CPU)")
    ap.add_argument("--moe-backend", metavar="NAME",
                    help="the MegaMoE the contract tests judge: a registered name "
                    "(megamoe.backends.registry.REGISTERED) or package.module:attribute; the "
                    "record names it and its version, and only megamoe's records vouch for our "
                    "kernels (default: $MEGAMOE_MOE_BACKEND, else megamoe)")
    ap.add_argument("--filter", help="pytest -k expression (recorded)")
    ap.add_argument("--timeout", type=float, help="seconds per suite; expiry kills the process "
                    "group (SIGTERM, then SIGKILL) and exits 124")
    ap.add_argument("--wall-budget", type=float, metavar="S",
                    help="seconds for the whole run: each suite (and each phase of a split "
                    "suite, and the sanitizer tools beside one) is cut to what is left of it "
                    "and times out there, so that the record and logs are written before a "
                    "caller's own limit (a device call's) ends the process (default: none)")
    ap.add_argument("--sanitizer-tool", choices=SANITIZER_TOOLS,
                    help="tool for --suite sanitize, or for --suite multi: the multi tier's "
                    "designated cases with every rank's process under the tool (all four when "
                    "--suite gpu or all and "
                    "unset)")
    ap.add_argument("--require-arch", help="refuse to run unless every GPU is this arch (sm_90)")
    ap.add_argument("--workers", type=int, default=1,
                    help="exclusive GPU suites (single): run the tests not marked "
                    "'timing' in this many pytest-xdist workers, then the 'timing' tests alone "
                    "(recorded; default 1: one process)")
    ap.add_argument("--sanitize-workers", type=int, default=1, metavar="K",
                    help="each compute-sanitizer tool (sanitize suite, a seed suite's sanitize "
                    "part) runs K of its cases at once, each its own process on the one GPU; "
                    "the record says so (default 1: one after the other)")
    ap.add_argument("--shard", metavar="I/N",
                    help=f"{' or '.join(SHARDED_SUITES)}: run shard I of N of single's tests (gpu: "
                    "the sanitizer tools run whole; the ledger needs passing records of all N "
                    "shards; tests.harness.shard)")
    ap.add_argument("--mutants", type=Path, metavar="DIR",
                    help="--suite mutants: a folder of patches, each one planted bug (default "
                    "tests/mutants); each is applied to a scratch copy and the tests covering "
                    "the files it touches must fail (tests.harness.mutants)")
    ap.add_argument("--mutant-tiers", default="host", metavar="T[,T]",
                    help="--suite mutants: the tiers that judge each mutant (host, property, "
                    "single; single needs a GPU; default host)")
    ap.add_argument("--sanitizers-beside", action="store_true",
                    help="--suite gpu with --workers > 1: run the four sanitizer tools beside "
                    "single's xdist phase (which holds no timing test), then single's timing and "
                    "alone tests with the GPU alone; the neighbour watch covers that last phase")
    ap.add_argument("--group-compiles", action="store_true",
                    help="with --workers > 1: run the xdist phase with --dist loadgroup, so the "
                    "tests of a module that names its kernel-choosing parameters "
                    "(COMPILE_GROUP_PARAMS) share one worker per kernel variant and compile it "
                    "once (tests.harness.compile_groups)")
    ap.add_argument("--share-compiles", action="store_true",
                    help="every process of the run (xdist workers, ranks, sanitized cases) "
                    "loads a kernel another has compiled instead of compiling it again: the "
                    "CuTe DSL's own file cache, keyed by its module hash, in a fresh directory "
                    "removed at the end of the run (tests.harness.compile_share; default off: "
                    "every process compiles what it launches)")
    ap.add_argument("--parts", metavar="P[,P]",
                    help=f"a seed suite ({', '.join(SEED_SUITES)}): run only these of its parts "
                    f"({', '.join(SEED_PARTS)}; default all), so that a suite longer than one "
                    "sitting runs in several; --check-ledger joins the parts of records on one "
                    "kernel digest")
    ap.add_argument("--check-ledger", action="store_true",
                    help="CI gate: kernel sources must have a passing committed GPU record")
    return ap


def parse_args(argv: Sequence[str]) -> QualifyArgs:
    ap = build_parser()
    ns = ap.parse_args(list(argv))
    if not ns.check_ledger:
        if ns.suite is None:
            ap.error("--suite is required (or --check-ledger)")
        if ns.output_dir is None:
            ap.error("--output-dir is required")
        if ns.suite == "sanitize" and ns.sanitizer_tool is None:
            ap.error(f"--suite sanitize needs --sanitizer-tool ({'|'.join(SANITIZER_TOOLS)})")
    if ns.timeout is not None and ns.timeout <= 0:
        ap.error(f"--timeout must be > 0 seconds, got {ns.timeout}")
    if ns.wall_budget is not None and ns.wall_budget <= 0:
        ap.error(f"--wall-budget must be > 0 seconds, got {ns.wall_budget}")
    if ns.workers < 1:
        ap.error(f"--workers must be >= 1, got {ns.workers}")
    if ns.sanitize_workers < 1:
        ap.error(f"--sanitize-workers must be >= 1, got {ns.sanitize_workers}")
    shard = None
    if ns.shard is not None:
        if ns.suite not in SHARDED_SUITES:
            ap.error(f"--shard: only for --suite {' or '.join(SHARDED_SUITES)}, got --suite "
                     f"{ns.suite}")
        try:
            shard = parse_shard(ns.shard).text
        except ValueError as err:
            ap.error(f"--{err}")
    if ns.backend is not None and ns.mode is not None and ns.backend not in BACKENDS[ns.mode]:
        ap.error(f"--backend {ns.backend} cannot serve --mode {ns.mode} (it takes "
                 f"{', '.join(BACKENDS[ns.mode])})")
    tiers = tuple(t for t in ns.mutant_tiers.split(",") if t)
    bad_tiers = [t for t in tiers if t not in MUTANT_TIERS]
    if bad_tiers or not tiers:
        ap.error(f"--mutant-tiers: expected some of {', '.join(MUTANT_TIERS)}, got "
                 f"{ns.mutant_tiers!r}")
    if ns.mutants is not None and ns.suite != "mutants":
        ap.error(f"--mutants: only for --suite mutants, got --suite {ns.suite}")
    if ns.sanitizers_beside and (ns.suite != "gpu" or ns.workers < 2):
        ap.error("--sanitizers-beside: only for --suite gpu with --workers 2 or more (the "
                 f"tools run beside single's xdist phase), got --suite {ns.suite} --workers "
                 f"{ns.workers}")
    if ns.group_compiles and ns.workers < 2:
        ap.error(f"--group-compiles: only with --workers 2 or more (it groups the xdist "
                 f"phase's tests), got --workers {ns.workers}")
    parts = None
    if ns.parts is not None:
        if ns.suite not in SEED_SUITES:
            ap.error(f"--parts: only for a seed suite ({', '.join(SEED_SUITES)}), got --suite "
                     f"{ns.suite}")
        parts = tuple(p for p in ns.parts.split(",") if p)
        if not parts or any(p not in SEED_PARTS for p in parts) or len(set(parts)) != len(parts):
            ap.error(f"--parts: expected some of {', '.join(SEED_PARTS)}, each once, got "
                     f"{ns.parts!r}")
        parts = tuple(p for p in SEED_PARTS if p in parts)
    return QualifyArgs(ns.suite, ns.output_dir, ns.world_size, ns.mode, ns.filter, ns.timeout,
                       ns.sanitizer_tool, ns.require_arch, ns.check_ledger, ns.workers, shard,
                       ns.backend, ns.mutants, tiers, ns.moe_backend, ns.sanitizers_beside, parts,
                       group_compiles=ns.group_compiles, share_compiles=ns.share_compiles,
                       wall_budget=ns.wall_budget, sanitize_workers=ns.sanitize_workers)
