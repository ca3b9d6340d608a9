"""The pytest plugin of ``tests.harness.dsl_locations``: at each test's setup, once the CuTe DSL
is imported, its op locations are looked up once per call site (unless
``$MEGAMOE_DSL_LOCATION_MEMO`` is ``0``); the DSL builds the same locations and bytes."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.harness.dsl_locations import install


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    install()
    yield
