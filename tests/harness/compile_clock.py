"""How long each test spends compiling kernels, written into its JUnit report.

A pytest plugin (``tests/conftest.py`` loads it). Once the CuTe DSL is imported (a kernel
module imports it; a host-only session never pays for the import), ``cutlass.cute.compile``
is wrapped by a clock: every call, and every call of its options form
(``cute.compile[...]``), adds its seconds to the running test, setup and teardown included
(a fixture that warms a layer compiles there). At the test's teardown the plugin adds two
properties to the test's report, ``compile_s`` and ``compiles``, which pytest's JUnit writer
keeps (under xdist too), and ``tests.harness.time_profile`` sums them into every
qualification record: how much of a GPU suite's time is compilation (issue 40 item 11: where
the time of a single-GPU verdict goes). The wrapper changes nothing else: it returns what
``cute.compile`` returns and lets what it raises through. A test that imports the DSL itself
for the first time in the session reports nothing for its own compiles (the clock goes on at
the next test's setup); the GPU tiers import it at collection, through the kernel modules.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass

import pytest

from tests.harness.time_profile import COMPILE_S, COMPILES

DSL_MODULE = "cutlass.cute"


@dataclass
class CompileClock:
    """Seconds and calls of ``cute.compile`` since the last ``reset``."""

    seconds: float = 0.0
    calls: int = 0

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def add(self, seconds: float) -> None:
        self.seconds += seconds
        self.calls += 1


CLOCK = CompileClock()


class TimedCompile:
    """``cute.compile`` under ``CLOCK``: calls and the options form are timed, every other
    attribute is the wrapped object's."""

    def __init__(self, inner: Callable[..., object], clock: CompileClock = CLOCK) -> None:
        self.inner = inner
        self.clock = clock

    def __call__(self, *args: object, **kwargs: object) -> object:
        t0 = time.perf_counter()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.clock.add(time.perf_counter() - t0)

    def __getitem__(self, key: object) -> TimedCompile:
        return TimedCompile(self.inner[key], self.clock)  # type: ignore[index]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def install() -> bool:
    """Wrap ``cutlass.cute.compile`` once the DSL is imported; True when it is wrapped."""
    cute = sys.modules.get(DSL_MODULE)
    if cute is None:
        return False
    if not isinstance(cute.compile, TimedCompile):
        cute.compile = TimedCompile(cute.compile)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    install()
    CLOCK.reset()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield
    if install():  # the teardown report (made after this) carries the properties
        item.user_properties.append((COMPILE_S, round(CLOCK.seconds, 3)))
        item.user_properties.append((COMPILES, CLOCK.calls))
    CLOCK.reset()
