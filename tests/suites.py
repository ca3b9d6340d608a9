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

PYTEST_NO_TESTS_COLLECTED = 5


@dataclass(frozen=True)
class Suite:
    """A named selection of tests (or a module entry point for ``bench``)."""

    name: str
    description: str
    paths: tuple[str, ...] = ()
    markexpr: str = ""
    parallel: bool = False
    needs_gpu: bool = False
    module: str | None = None
    extra_args: tuple[str, ...] = field(default=())

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
        ),
        Suite(
            "multi",
            "multi tier (EP world): real or emulated ranks, changing-route scenarios",
            paths=("tests/multi",),
            markexpr="multirank",
            needs_gpu=True,
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
