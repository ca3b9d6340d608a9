"""The pytest plugin of ``tests.harness.compile_share``: where ``$MEGAMOE_SHARE_COMPILES`` is
``1``, the process's explicit compiles go through the run's shared cache (installed at each
test's setup, once the DSL is imported), and each test's report carries ``compile_hits``, how
many of its compiles the cache served (``tests.harness.time_profile`` sums them)."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.harness.compile_share import COUNTER, install, sharing_wanted
from tests.harness.time_profile import COMPILE_HITS


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    install()
    COUNTER.reset()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield
    if sharing_wanted():
        item.user_properties.append((COMPILE_HITS, COUNTER.hits))
    COUNTER.reset()
