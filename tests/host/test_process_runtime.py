"""One NVSHMEM runtime per process, shared by its worlds (``megamoe.comm.process_runtime``;
docs/contract.md s11): a second ``nvshmem_init`` in one process is undefined behaviour, and the
multi tier's timeout tests make a second world beside the session's. The planted bug is the
world as it was: every world initializing and finalizing NVSHMEM itself.

And its collective teardown runs only when every rank agrees the world is healthy
(``NvshmemWorld.healthy_everywhere``): the rank that missed a step saw no failure, and
entering NVSHMEM's free while its timed-out peer skips it would wait for ever. The planted
bug is the teardown as it was: each rank judging by its own failure alone."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from megamoe.comm.process_runtime import OncePerProcess, Place
from megamoe.comm.world import WorldInfo
from megamoe.errors import CommTimeoutError, ConfigError

HERE = Place(0, 2, 0)


class Calls:
    def __init__(self) -> None:
        self.log: list[str] = []

    def init(self) -> None:
        self.log.append("init")

    def finalize(self) -> None:
        self.log.append("finalize")


def test_the_first_world_initializes_and_the_last_finalizes() -> None:
    rt, c = OncePerProcess("NVSHMEM"), Calls()
    rt.acquire(HERE, c.init)
    rt.acquire(HERE, c.init)  # a second world: shares it
    assert c.log == ["init"]
    rt.release(False, c.finalize)
    assert c.log == ["init"]  # one world still uses it
    rt.release(False, c.finalize)
    assert c.log == ["init", "finalize"] and rt.finalized


def test_after_a_failed_world_the_runtime_is_left_to_process_exit() -> None:
    rt, c = OncePerProcess("NVSHMEM"), Calls()
    rt.acquire(HERE, c.init)
    rt.acquire(HERE, c.init)
    rt.release(True, c.finalize)  # the short world timed out
    rt.release(False, c.finalize)  # the session's world, healthy
    assert c.log == ["init"] and not rt.finalized


@pytest.mark.parametrize("other", [Place(1, 2, 0), Place(0, 4, 0), Place(0, 2, 1)])
def test_a_world_elsewhere_is_refused_by_name_before_any_init(other: Place) -> None:
    rt, c = OncePerProcess("NVSHMEM"), Calls()
    rt.acquire(HERE, c.init)
    with pytest.raises(ConfigError, match=r"^NVSHMEM world: expected the place this process"):
        rt.acquire(other, c.init)
    assert c.log == ["init"] and rt.users == 1


def test_no_world_after_the_runtime_was_finalized() -> None:
    rt, c = OncePerProcess("NVSHMEM"), Calls()
    rt.acquire(HERE, c.init)
    rt.release(False, c.finalize)
    with pytest.raises(ConfigError, match="cannot be initialized twice in one process"):
        rt.acquire(HERE, c.init)
    assert c.log == ["init", "finalize"]


def test_a_release_without_an_acquire_is_refused() -> None:
    with pytest.raises(ConfigError, match="a release without an acquire"):
        OncePerProcess("NVSHMEM").release(False, Calls().finalize)


def test_an_init_that_fails_leaves_the_runtime_uninitialized() -> None:
    rt, c = OncePerProcess("NVSHMEM"), Calls()

    def broken() -> None:
        raise RuntimeError("bootstrap failed")

    with pytest.raises(RuntimeError):
        rt.acquire(HERE, broken)
    rt.acquire(HERE, c.init)
    assert c.log == ["init"] and rt.users == 1


class FakeNvshmem:
    """``nvshmem.core`` as NvshmemWorld uses it at init and release."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def get_unique_id(self, empty: bool):  # type: ignore[no-untyped-def]
        import numpy as np

        return types.SimpleNamespace(_data=np.zeros(8, dtype=np.int8))

    def init(self, **kw) -> None:  # type: ignore[no-untyped-def]
        self.log.append("init")

    def finalize(self) -> None:
        self.log.append("finalize")

    def free_tensor(self, t) -> None:  # type: ignore[no-untyped-def]
        self.log.append("free")


@pytest.fixture()
def one_process_world(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A gloo world of one process, a fake nvshmem4py and a fresh process runtime."""
    import torch.distributed as dist

    from megamoe.comm import nvshmem_world

    fake = FakeNvshmem()
    core = types.ModuleType("nvshmem.core")
    for name in ("get_unique_id", "init", "finalize", "free_tensor"):
        setattr(core, name, getattr(fake, name))
    pkg = types.ModuleType("nvshmem")
    pkg.core = core  # type: ignore[attr-defined]
    cuda_core = types.ModuleType("cuda.core")
    cuda_core.Device = lambda index: types.SimpleNamespace(set_current=lambda: None)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvshmem", pkg)
    monkeypatch.setitem(sys.modules, "nvshmem.core", core)
    monkeypatch.setitem(sys.modules, "cuda.core", cuda_core)
    monkeypatch.setattr(nvshmem_world, "RUNTIME", OncePerProcess("NVSHMEM"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        yield fake, nvshmem_world
    finally:
        dist.destroy_process_group()


def test_two_nvshmem_worlds_of_one_process_share_one_init(one_process_world) -> None:  # type: ignore[no-untyped-def]
    fake, nvshmem_world = one_process_world
    info = WorldInfo(0, 1, "real", "nvshmem", torch.device("cuda", 0), 60.0)
    session = nvshmem_world.NvshmemWorld(info)
    short = nvshmem_world.NvshmemWorld(WorldInfo(0, 1, "real", "nvshmem",
                                                 torch.device("cuda", 0), 2.0))
    assert fake.log == ["init"]
    short.destroy()
    assert fake.log == ["init"]  # the session's world still uses NVSHMEM
    session.destroy()
    assert fake.log == ["init", "finalize"]


def test_the_planted_world_that_inits_itself_is_caught(one_process_world, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each world initializing NVSHMEM (the world as it was): two inits in one process."""
    fake, nvshmem_world = one_process_world

    class EachWorldItsOwn(OncePerProcess):
        def acquire(self, place, init) -> None:  # type: ignore[no-untyped-def]
            init()
            self.users += 1

    monkeypatch.setattr(nvshmem_world, "RUNTIME", EachWorldItsOwn("NVSHMEM"))
    for timeout_s in (60.0, 2.0):
        nvshmem_world.NvshmemWorld(WorldInfo(0, 1, "real", "nvshmem", torch.device("cuda", 0),
                                             timeout_s))
    assert fake.log.count("init") == 2  # what the shared runtime prevents


def _world(nvshmem_world, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    return nvshmem_world.NvshmemWorld(WorldInfo(0, 1, "real", "nvshmem",
                                                torch.device("cuda", 0), timeout_s))


def _peer(world, answer) -> None:  # type: ignore[no-untyped-def]
    """What the gather of every rank's health returns: this rank's and one peer's."""
    def gather(obj):  # type: ignore[no-untyped-def]
        if isinstance(answer, Exception):
            raise answer
        return [obj, answer]

    world.all_gather_object = gather


def test_a_healthy_world_frees_and_finalizes(one_process_world) -> None:  # type: ignore[no-untyped-def]
    fake, nvshmem_world = one_process_world
    world = _world(nvshmem_world)
    _peer(world, True)
    world._free(torch.zeros(4))
    world.destroy()
    assert fake.log == ["init", "free", "finalize"] and world.failure is None


@pytest.mark.parametrize("peer", [False, CommTimeoutError(1, "all_gather_object", -1, "gone")],
                         ids=["failed", "absent"])
def test_a_failure_anywhere_skips_the_collective_teardown(one_process_world, peer) -> None:  # type: ignore[no-untyped-def]
    """This rank saw no failure (the peer that never came to the step); its peer timed out
    (or never reaches the gather): no free, no finalize, and the world is marked failed."""
    fake, nvshmem_world = one_process_world
    world = _world(nvshmem_world)
    _peer(world, peer)
    world._free(torch.zeros(4))
    world.destroy()
    assert fake.log == ["init"], fake.log
    assert world.failure is not None and world.failure.startswith("free: ")


def test_the_planted_teardown_judged_by_this_rank_alone_is_caught(one_process_world,  # type: ignore[no-untyped-def]
                                                                 monkeypatch) -> None:
    fake, nvshmem_world = one_process_world
    world = _world(nvshmem_world)
    _peer(world, False)
    monkeypatch.setattr(world, "healthy_everywhere", lambda step: world.failure is None)
    world._free(torch.zeros(4))
    assert "free" in fake.log  # it entered the collective free its peer skips


@pytest.mark.parametrize(("backend", "sub_backend"), [("nvshmem", "torch_symm"),
                                                      ("torch_symm", "torch_symm")])
def test_the_multi_tiers_smaller_sub_worlds_of_an_nvshmem_world_use_torch_symm(
        monkeypatch, backend: str, sub_backend: str) -> None:  # type: ignore[no-untyped-def]
    """The invariance test's sub-worlds (``tests.multi.ep_world.SubWorlds``): NVSHMEM runs
    once per process over every rank, so an nvshmem world of 4 ranks makes its worlds of 1 and
    2 ranks on torch symmetric memory, and keeps itself as the world of 4 (H100, 2026-12-05:
    made on nvshmem, the sub-worlds were refused as a second place of the one runtime)."""
    from tests.multi import ep_world

    made: list[WorldInfo] = []
    monkeypatch.setattr(ep_world.dist, "new_group", lambda ranks, backend: tuple(ranks))
    monkeypatch.setattr(ep_world, "make_world", lambda info, group: made.append(info) or info)
    whole = types.SimpleNamespace(rank=3, size=4, mode="emulated", backend=backend,
                                  device=torch.device("cpu"), timeout_s=5.0)
    subs = ep_world.SubWorlds.create(whole)  # type: ignore[arg-type]
    assert subs.worlds[4] is whole
    assert [(i.size, i.rank, i.backend) for i in made] == [(1, 0, sub_backend),
                                                           (2, 1, sub_backend)]
