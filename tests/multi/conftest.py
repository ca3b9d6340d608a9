"""The multi tier's world (docs/contract.md s7, s11): every test process is one rank of a world
started by torchrun (``./run_tests.sh multi``, ``qualify.py --suite multi``), which sets the
mode and backend (``MEGAMOE_EP_MODE``, ``MEGAMOE_EP_BACKEND``). Outside torchrun the tier
fails, never skips."""

from __future__ import annotations

import os

import pytest

from tests.multi.ep_world import SubWorlds, shape_of


@pytest.fixture(scope="session")
def world():  # type: ignore[no-untyped-def]
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        pytest.fail("the multi tier runs one process per rank under torchrun: use "
                    "./run_tests.sh multi or python qualify.py --suite multi", pytrace=False)
    from megamoe.comm import init_world

    w = init_world()
    yield w
    w.destroy()


@pytest.fixture(scope="session")
def subworlds(world) -> SubWorlds:  # type: ignore[no-untyped-def]
    """Worlds of every size that divides P, over blocks of consecutive ranks (made once, in
    the same order on every rank: group creation is collective)."""
    subs = SubWorlds.create(world)
    yield subs
    subs.destroy()


@pytest.fixture
def bench_tier(world, monkeypatch):  # type: ignore[no-untyped-def]
    """The tier's world as the benchmarks' (``megamoe.bench.ep_world``) and the tier's shape
    under the name ``tier`` (the benchmarks' builders read the shape from a case's name:
    ``tier-...``), with the benchmarks' shared weights rebuilt for it; returns the world."""
    from megamoe.bench import ep_world as bench_world
    from megamoe.bench.benchmarks import layer as lb

    s = shape_of(world)
    monkeypatch.setitem(lb.SHAPES, "tier", lb.Shape("tier", s.hidden, s.inter, s.experts,
                                                    s.top_k))
    monkeypatch.setattr(bench_world, "_WORLD", [world])
    lb._WEIGHTS.clear()
    yield world
    lb._WEIGHTS.clear()
