"""The EP world interface on the host (docs/contract.md s7, s11): world descriptions and
launches checked before anything starts, the runner's names agree with the launcher's,
symmetric regions with guard bytes and peer tables, and the push and signal PyTorch paths
(the CPU world's) against their contracts in a single-rank world (the multi-rank behaviour
is the multi tier's, run in a CPU world by tests/host/test_multi_cpu_world.py)."""

from __future__ import annotations

import re

import pytest
import torch

from megamoe import CommTimeoutError, ConfigError
from megamoe.comm import launch, world
from megamoe.comm.push import push_rows
from megamoe.comm.signal import STATUS_TIMEOUT, StepSignal
from megamoe.comm.symmetric_workspace import GUARD_BYTES, RegionSpec, SymmetricWorkspace
from megamoe.comm.world import SymmetricBuffer, World, WorldInfo
from tests.harness import worlds as runner_worlds


class OneRankWorld(World):
    """A world of one rank whose symmetric memory is a plain CPU tensor (no process group):
    the interface's logic without a launcher."""

    def _allocate(self, nbytes: int) -> SymmetricBuffer:
        return SymmetricBuffer(0, [torch.zeros(nbytes, dtype=torch.uint8)])

    def barrier(self, step: str = "barrier") -> None:
        self._alive()

    def all_gather_object(self, obj: object) -> list[object]:
        return [obj]


def one_rank(timeout_s: float = 0.2) -> OneRankWorld:
    return OneRankWorld(WorldInfo(0, 1, "cpu", "host", torch.device("cpu"), timeout_s))


def test_the_runner_and_the_launcher_name_the_same_worlds() -> None:
    assert runner_worlds.MODES == world.MODES
    assert {m: world.MODE_BACKENDS[m] for m in world.MODES} == runner_worlds.BACKENDS
    assert runner_worlds.NO_MULTICAST_ENV == world.NO_MULTICAST_ENV
    assert runner_worlds.MODE_ENV == launch.MODE_ENV
    assert runner_worlds.BACKEND_ENV == launch.BACKEND_ENV


@pytest.mark.parametrize(("field", "value"), [
    ("rank", 2), ("rank", -1), ("size", 0), ("mode", "fake"), ("backend", "host"),
    ("timeout_s", 0.0), ("timeout_s", float("inf")),
])
def test_world_info_rejects_bad_fields_by_name(field: str, value: object) -> None:
    kw = dict(rank=0, size=2, mode="emulated", backend="torch_symm",
              device=torch.device("cpu"), timeout_s=5.0)
    kw[field] = value
    with pytest.raises(ConfigError, match=f"^{field}: expected"):
        WorldInfo(**kw)  # type: ignore[arg-type]


def test_init_world_outside_torchrun_is_refused_by_name(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for var in launch.TORCHRUN_VARS:
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match=r"^RANK: expected set by torchrun"):
        launch.init_world()


@pytest.mark.contract("s11.unservable-world-refused")
def test_a_world_the_machine_cannot_serve_is_refused_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match=r"LOCAL_WORLD_SIZE.*at most the 1 visible GPU"):
        launch.choose_device("real", 0, 4, 1)
    with pytest.raises(ConfigError, match=re.escape("'cpu' on a machine without a CUDA GPU")):
        launch.choose_device("emulated", 1, 2, 0)
    assert launch.choose_device("emulated", 3, 4, 1) == torch.device("cuda", 0)
    assert launch.choose_device("real", 3, 4, 4) == torch.device("cuda", 3)
    with pytest.raises(ConfigError, match=r"^backend: expected one of"):
        launch.resolve("cpu", "nvshmem", 2, 0)
    assert launch.resolve(None, None, 2, 0) == ("cpu", "host")
    assert launch.resolve(None, None, 2, 1) == ("emulated", "torch_symm")
    assert launch.resolve(None, None, 2, 2) == ("real", "torch_symm")


def test_an_emulated_nvshmem_world_is_served_like_torch_symm() -> None:
    """The whole multi tier passed in an emulated nvshmem world (megamoe.comm.nvshmem_world):
    the launcher takes it as it takes torch_symm's, and a CPU world still refuses it."""
    assert launch.resolve("emulated", "nvshmem", 2, 1) == ("emulated", "nvshmem")
    assert launch.resolve("emulated", "torch_symm", 2, 1) == ("emulated", "torch_symm")
    with pytest.raises(ConfigError, match=r"^backend: expected one of"):
        launch.resolve("cpu", "nvshmem", 2, 0)


def test_symmetric_regions_are_aligned_guarded_and_tabled() -> None:
    w = one_rank()
    specs = [RegionSpec("a", torch.int32, (3, 5)), RegionSpec("b", torch.bfloat16, (7,)),
             RegionSpec("c", torch.float32, (2, 2))]
    ws = SymmetricWorkspace(w, specs)
    assert ws.buffer.nbytes % world.ALIGN == 0
    ends = []
    for s in specs:
        off = ws.offsets[s.name]
        assert off % 16 == 0 and off >= GUARD_BYTES + (ends[-1] if ends else 0)
        ends.append(off + s.nbytes)
        assert ws.local(s.name).shape == s.shape and ws.local(s.name).dtype == s.dtype
        assert int(ws.table(s.name)[0]) == ws.local(s.name).data_ptr()
        align = ws.peer_alignment(s.name)  # what the push's kernel plan reads, computed once
        assert align >= 16 and align & (align - 1) == 0
        assert ws.peer(s.name, 0).data_ptr() % align == 0
        assert ws.peer(s.name, 0).data_ptr() % (2 * align) != 0 or align == 1 << 12
    mask = ws.region_mask()
    assert int(mask.sum()) == sum(s.nbytes for s in specs)
    with pytest.raises(ConfigError, match=r"^specs: expected distinct region names"):
        SymmetricWorkspace(w, [specs[0], specs[0]])


def test_destroy_frees_every_buffer_and_refuses_later_use() -> None:
    w = one_rank()
    ws = SymmetricWorkspace(w, [RegionSpec("a", torch.int32, (4,))])
    assert w.live_buffers == 1
    w.destroy()
    assert w.live_buffers == 0 and ws.buffer.freed
    with pytest.raises(ConfigError, match=r"^world: expected a world that has not been"):
        w.allocate(16)
    w.destroy()  # idempotent


@pytest.mark.contract("s3.no-stray-writes")
def test_push_writes_the_listed_rows_and_nothing_else() -> None:
    w = one_rank()
    ws = SymmetricWorkspace(w, [RegionSpec("rows", torch.int32, (6, 4))])
    ws.buffer.local.fill_(0xAB)  # regions and guard bytes alike
    src = torch.arange(20, dtype=torch.int32).view(5, 4)
    idx = torch.tensor([3, 0, 4, 1], dtype=torch.int64)
    path = push_rows(src, ws, "rows", torch.zeros(4, dtype=torch.int64), idx,
                     torch.tensor([5, 2, 0, 9], dtype=torch.int64),
                     torch.tensor([3], dtype=torch.int64))  # entry 3 is past the count
    assert path == "torch"
    got = ws.local("rows")
    assert torch.equal(got[[5, 2, 0]], src[[3, 0, 4]])
    untouched = torch.ones(ws.buffer.nbytes, dtype=torch.bool)
    for r in (5, 2, 0):
        off = ws.offsets["rows"] + r * 16
        untouched[off : off + 16] = False
    assert bool((ws.buffer.local[untouched] == 0xAB).all())


@pytest.mark.parametrize(("name", "bad"), [
    ("region", dict(region="nope")),
    ("src.dtype", dict(src=torch.zeros(2, 4, dtype=torch.float32))),
    ("src.shape[1]", dict(src=torch.zeros(2, 3, dtype=torch.int32))),
    ("dest", dict(dest=torch.zeros(2, dtype=torch.int32))),
    ("count", dict(count=torch.tensor([1, 2]))),
])
def test_push_metadata_is_checked_by_name(name: str, bad: dict) -> None:
    ws = SymmetricWorkspace(one_rank(), [RegionSpec("rows", torch.int32, (6, 4))])
    i = torch.zeros(2, dtype=torch.int64)
    kw = dict(src=torch.zeros(2, 4, dtype=torch.int32), region="rows", dest=i, src_index=i,
              dst_index=i, count=torch.tensor([1]))
    kw.update(bad)
    with pytest.raises(ConfigError, match=f"^{re.escape(name)}"):
        push_rows(kw["src"], ws, kw["region"], kw["dest"], kw["src_index"], kw["dst_index"],
                  kw["count"])


@pytest.mark.contract("s7.bounded-waits")
def test_a_signal_advances_the_epoch_and_a_missing_flag_is_a_bounded_timeout() -> None:
    w = one_rank(timeout_s=0.2)
    ws = SymmetricWorkspace(w, [RegionSpec("flags", torch.int32, (1,))])
    sig = StepSignal(ws, "flags", ("a", "b"))
    sig.signal("a")
    sig.signal("b")
    assert int(sig.epoch[0]) == 2 and int(ws.local("flags")[0]) == 2
    assert sig.error() is None
    # a peer that never arrives: make this rank's own store land nowhere, then wait
    real = ws.peer
    ws.peer = lambda name, r: torch.zeros_like(real(name, r))  # type: ignore[method-assign]
    sig.signal("a")
    err = sig.error()
    assert isinstance(err, CommTimeoutError)
    assert (err.rank, err.step, err.peer) == (0, "a", 0)
    assert int(sig.status[0]) == STATUS_TIMEOUT
    sig.signal("b")  # a failed world waits no more: returns at once, keeps the first failure
    assert sig.error().step == "a"
