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
            return [python, "-m", self.module, *extra]
        cmd = [python, "-m", "pytest", *self.paths]
        if self.markexpr:
            cmd += ["-m", self.markexpr]
        if self.parallel:
            cmd += ["-n", "auto"]
        return [*cmd, *self.extra_args, *extra]


_CPU_ONLY = "not gpu and not multirank and not sanitizer"

SANITIZER_TOOLS = ("memcheck", "synccheck", "racecheck", "initcheck")
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
