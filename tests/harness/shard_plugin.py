"""pytest plugin for ``qualify.py --shard I/N`` (``tests.harness.shard``): keeps the collected
tests of shard ``I`` and reports the others as deselected (by their node ids without a
compile group's suffix: ``tests.harness.group_names``). Loaded with ``-p
tests.harness.shard_plugin`` only for a sharded run."""

from __future__ import annotations

import pytest

from tests.harness.group_names import plain_nodeid
from tests.harness.shard import SHARD_OPTION, in_shard, parse_shard


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(SHARD_OPTION, default=None, metavar="I/N",
                     help="run only shard I of N of the collected tests (tests.harness.shard)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    text = config.getoption(SHARD_OPTION)
    if not text:
        return
    shard = parse_shard(text)
    keep, drop = [], []
    for item in items:
        (keep if in_shard(plain_nodeid(item.nodeid), shard) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
