"""The pytest plugin of ``tests.harness.dsl_memos``: at each test's setup, once the CuTe DSL is
imported, three lookups of its trace (op locations, a module's imports, type kinds) are made
once per distinct input (unless ``$MEGAMOE_DSL_MEMOS`` is ``0``); the DSL builds the same
locations and bytes."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.harness.dsl_memos import install


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    install()
    yield
