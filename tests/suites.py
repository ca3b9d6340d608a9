"""The one table of test suites, read by ``run_tests.sh`` and ``qualify.py``.

Every suite is a pytest selection (paths plus a marker expression) or a module
entry point. Tier markers are applied by directory in ``tests/conftest.py``:
everything under ``tests/single`` is ``gpu``, everything under ``tests/multi``
is ``multirank``; hypothesis tests of kernels under ``tests/property`` carry
``gpu`` themselves. See DESIGN.md "Test tiers".
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

from sanitizers.selftest_kernels import PLANTED_REPORTS

PYTEST_NO_TESTS_COLLECTED = 5


@dataclass(frozen=True)
class Suite:
    """A named selection of tests (or a module entry point for ``bench``).

    ``paths`` and ``markexpr`` always say which tests a suite owns (the
    coverage check reads them); when ``module`` is set the suite runs through
    that entry point instead of plain pytest (``sanitize`` runs its tests under
    compute-sanitizer, one per process).
    """

    name: str
    description: str
    paths: tuple[str, ...] = ()
    markexpr: str = ""
    parallel: bool = False
    needs_gpu: bool = False
    module: str | None = None
    extra_args: tuple[str, ...] = field(default=())
    exclusive_gpu: bool = False
    """Holds timing tests, so it needs the GPU alone: qualify.py watches for other processes
    holding the GPU while it runs and fails it if there were any
    (``tests.harness.gpu_neighbours``)."""

    def command(self, python: str, extra: list[str]) -> list[str]:
        """The command that runs this suite with ``python``."""
        if self.module is not None:
            return [python, "-m", self.module, *self.extra_args, *extra]
        cmd = [python, "-m", "pytest", *self.paths]
        if self.markexpr:
            cmd += ["-m", self.markexpr]
        if self.parallel:
            cmd += ["-n", "auto"]
        return [*cmd, *self.extra_args, *extra]


_CPU_ONLY = "not gpu and not multirank and not sanitizer"

SANITIZER_TOOLS = ("memcheck", "synccheck", "racecheck", "initcheck")
MULTI_SANITIZER_TOOLS = ("memcheck", "synccheck")
"""The tools the ledger needs over the multi tier's designated cases (``qualify.py --suite
multi --sanitizer-tool T``), every rank's process under the tool (issue 37 item 6). racecheck
and initcheck are accepted there too but have not yet been run over the tier, so nothing
requires them."""
SANITIZER_SELFTEST_FILE = "tests/single/test_sanitizer_selftests.py"


def sanitizer_selftest_case(tool: str, variant: str) -> str:
    """Node id of the self-test target for ``tool``; ``variant`` is "planted" or "clean"."""
    return f"{SANITIZER_SELFTEST_FILE}::test_selftest_target[{tool}-{variant}]"


SANITIZE_CASE_PATHS = ("tests/single", "tests/property")
SANITIZE_CASE_MARKEXPR = "sanitizer"


@dataclass(frozen=True)
class SanitizerCoverage:
    """What one compute-sanitizer tool runs in the ``sanitize`` suite.

    ``planted`` must be reported (errors > 0, and the log must contain
    ``planted_report``): it proves the tool is wired right in this very run.
    Every case from ``cases`` must report zero errors and zero warnings and
    pass: explicit node ids run as they are; paths are collected with
    ``-m markexpr``, minus anything under ``exclude`` (the self-test targets,
    whose planted variants must never count as clean cases). One test per
    process.
    """

    tool: str
    planted: str
    planted_report: str
    cases: tuple[str, ...]
    markexpr: str = SANITIZE_CASE_MARKEXPR
    exclude: tuple[str, ...] = (SANITIZER_SELFTEST_FILE,)


# Every tool runs its own clean twin and every test marked ``sanitizer`` in the GPU tiers
# (kernel authors mark small designated cases; see docs/contributing.md).
SANITIZE_COVERAGE: dict[str, SanitizerCoverage] = {
    tool: SanitizerCoverage(
        tool,
        planted=sanitizer_selftest_case(tool, "planted"),
        planted_report=PLANTED_REPORTS[tool],
        cases=(sanitizer_selftest_case(tool, "clean"), *SANITIZE_CASE_PATHS),
    )
    for tool in SANITIZER_TOOLS
}

@dataclass(frozen=True)
class SeedSuite:
    """A suite our users name after the upstream discussions it comes from (``../shared/seeds``):
    the tests that carry ``@pytest.mark.<name>("<item>")`` for one of its ``items``, run as
    three parts (``tests.harness.seed_suite``): the single-GPU tests, the multi tier's tests
    in an EP world, and its sanitizer cases under every compute-sanitizer tool. Every item
    must be carried by at least one test (``tests/host/test_seed_suites.py``), so the suite
    can never silently lose what it promises.

    name: the suite and its marker. seeds: the seed discussions it comes from.
    items: item id -> what its tests cover.
    """

    name: str
    seeds: tuple[str, ...]
    description: str
    items: dict[str, str]


SEED_SUITE_PATHS = ("tests/single", "tests/property", "tests/multi")
SEED_SUITES: dict[str, SeedSuite] = {
    s.name: s
    for s in (
        SeedSuite(
            "mega_sm107", ("003", "000"),
            "seeds 003 and 000: masked routes, route staging, fused MXFP8 staging, sparse decode, "
            "changing-route graph replay on one rank and on many, their sanitizer cases",
            {
                "masked-routes": "masked routes with NaN and +-Inf scores and the route-check "
                                 "switch, over four score dtypes, four layouts and prequantized "
                                 "input",
                "staging-tails": "route staging tails (rows past the live count emptied on every "
                                 "call), storage offsets and strides",
                "fused-mxfp8-staging": "fused MXFP8 staging: bytes equal to the oracle and to the "
                                       "Torch path, every bf16 value",
                "sparse-decode": "masked bf16 combine without a pre-clear, the active-route "
                                 "extent, live-row and scale-tile boundaries, runtime options",
                "graph-replay": "changing-route graph replay on one rank and on many: early and "
                                "late weights, NaN-poisoned workspaces, exact-zero inactive rows, "
                                "first and 65th replay",
                "sanitizer": "the staging, layout, combine and layer cases under every "
                             "compute-sanitizer tool",
            },
        ),
        SeedSuite(
            "mega_sm90_mxfp4", ("001",),
            "seed 001: safe-FP8 staging across graphs, the fallback path, guard bytes, fused == "
            "fallback bytes, the tiny-value outputs, multirank fp8_mxfp4, its sanitizer cases",
            {
                "safe-fp8-graphs": "safe-FP8 staging reusing one workspace across graphs at (H, K) "
                                   "= (4096, 4), (7168, 8) and the smallest H our staging takes; "
                                   "the seed's H = 129 is refused by name (H % 32)",
                "fallback": "the fallback path (non-contiguous or unaligned input: the Torch path) "
                            "gives the fused kernel's bytes",
                "guard-bytes": "no byte outside the workspace regions is written",
                "fused-equals-fallback": "fused kernel == Torch fallback, byte for byte",
                "tiny-values": "full outputs at amplitudes (1e-15, 0), (1e-18, 0), (1e-19, 0), "
                               "(1e-35, 55): finite, non-zero, within the bound",
                "multirank": "multirank fp8_mxfp4 at M = 1, 4, 16, 128, 1024, uniform and skewed, "
                             "with an empty rank, through original, changed and restored inputs",
                "sanitizer": "the safe-FP8 staging and fp8_mxfp4 layer cases under every "
                             "compute-sanitizer tool",
            },
        ),
    )
}
"""The seeds' named suites (issue 39), one definition each."""


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            "ci",
            "everything CI runs on the CPU machine: host tier, CPU property tests, "
            "the CuTe DSL compile gate",
            paths=("tests/host", "tests/property"),
            markexpr=f"{_CPU_ONLY} and not slow",
            parallel=True,
        ),
        Suite(
            "host",
            "host tier (CPU): contracts, metadata checks, oracle formats, runner logic, "
            "compile gate",
            paths=("tests/host",),
            markexpr=_CPU_ONLY,
            parallel=True,
        ),
        Suite(
            "property",
            "hypothesis property tests on the CPU (oracle properties)",
            paths=("tests/property",),
            markexpr=_CPU_ONLY,
            parallel=True,
        ),
        Suite(
            "single",
            "single tier (1 GPU): kernels vs oracle, graph replay, guard bytes, emulated EP",
            paths=("tests/single", "tests/property"),
            markexpr="gpu and not multirank and not sanitizer",
            needs_gpu=True,
            exclusive_gpu=True,
        ),
        Suite(
            "multi",
            "multi tier (EP world, torchrun, a process per rank): real, emulated or cpu "
            "world, changing-route scenarios: ./run_tests.sh multi [--world-size P] "
            "[--mode M] [-- pytest args]",
            paths=("tests/multi",),
            markexpr="multirank",
            needs_gpu=True,
            module="tests.harness.multi_cli",
            exclusive_gpu=True,
        ),
        Suite(
            "sanitize",
            "compute-sanitizer (memcheck, synccheck, racecheck, initcheck) over the cases in "
            "SANITIZE_COVERAGE, one test per process: ./run_tests.sh sanitize --tool memcheck",
            paths=SANITIZE_CASE_PATHS,
            markexpr=SANITIZE_CASE_MARKEXPR,
            needs_gpu=True,
            module="sanitizers",
        ),
        Suite(
            "mutants",
            "mutation testing: each patch of tests/mutants (a planted bug) applied to a scratch "
            "copy must fail the tests covering what it touches: ./run_tests.sh mutants [DIR] "
            "[--tiers host,property,single]",
            paths=("tests/mutants",),
            module="tests.harness.mutants",
        ),
        *(
            Suite(
                seed.name,
                f"{seed.description}: ./run_tests.sh {seed.name} [--world-size P] [--mode M] "
                "[-- pytest args]",
                paths=SEED_SUITE_PATHS,
                markexpr=seed.name,
                needs_gpu=True,
                module="tests.harness.seed_suite",
                extra_args=(seed.name,),
                exclusive_gpu=True,
            )
            for seed in SEED_SUITES.values()
        ),
        Suite(
            "bench",
            "benchmarks (not tests): ./run_tests.sh bench <name> [--quick]",
            module="megamoe.bench",
            needs_gpu=True,
        ),
    )
}


def usage() -> str:
    width = max(len(n) for n in SUITES)
    lines = ["suites:"]
    lines += [f"  {s.name:<{width}}  {s.description}" for s in SUITES.values()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("--list", "-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, extra = argv[0], argv[1:]
    suite = SUITES.get(name)
    if suite is None:
        print(f"unknown suite {name!r}\n{usage()}", file=sys.stderr)
        return 2
    rc = subprocess.call(suite.command(sys.executable, extra))
    if rc == PYTEST_NO_TESTS_COLLECTED and suite.module is None:
        print(f"suite {name!r}: no tests ran; that is a failure", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
