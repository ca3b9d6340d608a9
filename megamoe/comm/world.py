"""The EP world interface (docs/contract.md s7, s11): rank, world size, symmetric memory with
its peer-pointer table, a host barrier, and the errors of a world.

A ``World`` is one rank's handle on an expert-parallel world of ``size`` ranks. Its
backends differ only in how symmetric memory is made:

- ``torch_symm`` (``megamoe.comm.torch_symm_world``): torch symmetric memory
  (``torch.distributed._symmetric_memory``), real and emulated worlds;
- ``nvshmem`` (``megamoe.comm.nvshmem_world``): nvshmem4py, uid initialisation;
- ``host`` (``megamoe.comm.host_world``): CPU shared memory; P processes on the CPU that run
  the layer's PyTorch paths. It proves the exchange protocol, the launcher and the runner on
  any machine; it runs no kernel and proves nothing about GPU memory ordering.

Every backend hands out the same thing, a ``SymmetricBuffer``: this rank's bytes
(``local``), every rank's bytes mapped here (``peer(r)``), and the peer-pointer table
(``peer_ptrs``, int64 ``[P]`` on the world's device: the base address of each rank's copy
as this rank addresses it). Kernels reach peers only through that table, so the same
kernels run in every world (``megamoe.comm.push``, ``megamoe.comm.signal``).

Host-side collectives (the rendezvous of an allocation, ``barrier``) go through a gloo
process group: NCCL refuses two ranks on one GPU (the emulated world) and is never used.
Every wait is bounded (``timeout_s``); a host wait that expires raises ``CommTimeoutError``
naming the rank and the step.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch

from megamoe.errors import CommTimeoutError, ConfigError

MODES = ("real", "emulated", "cpu")
"""``real``: one process and one GPU per rank; ``emulated``: P processes sharing one GPU;
``cpu``: P processes on the CPU (the ``host`` backend). docs/contract.md s11."""
BACKENDS = ("torch_symm", "nvshmem", "host")
MODE_BACKENDS = {"real": ("torch_symm", "nvshmem"), "emulated": ("torch_symm", "nvshmem"),
                 "cpu": ("host",)}
"""The backends each mode may use (``launch.init_world`` refuses the others)."""
MEMORY_ORDERING_PROVEN = {"real": True, "emulated": False, "cpu": False}
"""Whether a world of this mode can show cross-GPU memory-ordering bugs: only ``real``
(docs/contract.md s11: the emulated world time-slices one GPU; the CPU world runs no kernel)."""
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                    "NVSHMEM_DISABLE_NVLS": "1"}
"""Set in every process of every world: NVLink multicast stays off (on shared hosts
multicast objects can take GPUs out of service)."""
DEFAULT_TIMEOUT_S = 120.0
"""How long a host or device wait may take before it becomes ``CommTimeoutError``. Generous
because the emulated world time-slices one GPU between P processes (a spin there waits
for the other processes' kernels); tests that provoke a timeout pass a short one."""
ALIGN = 256
"""Byte alignment of every symmetric allocation's size (and so of each rank's copy)."""


def apply_no_multicast_env() -> None:
    """Put ``NO_MULTICAST_ENV`` into this process's environment (before any backend
    starts)."""
    os.environ.update(NO_MULTICAST_ENV)


@dataclass(frozen=True)
class WorldInfo:
    """What a world is: ``rank`` of ``size``, its ``mode`` and ``backend``, the ``device``
    this rank computes on, and the bound of every wait (``timeout_s``)."""

    rank: int
    size: int
    mode: str
    backend: str
    device: torch.device
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        for name, low in (("size", 1), ("rank", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ConfigError(name, f"an int >= {low}", repr(v))
        if self.rank >= self.size:
            raise ConfigError("rank", f"0 <= rank < size = {self.size}", self.rank)
        if self.mode not in MODES:
            raise ConfigError("mode", f"one of {MODES}", repr(self.mode))
        if self.backend not in MODE_BACKENDS[self.mode]:
            raise ConfigError("backend", f"one of {MODE_BACKENDS[self.mode]} for mode "
                              f"{self.mode!r}", repr(self.backend))
        if not (isinstance(self.timeout_s, int | float) and 0 < self.timeout_s < float("inf")):
            raise ConfigError("timeout_s", "a finite number of seconds > 0", self.timeout_s)


class SymmetricBuffer:
    """One symmetric allocation of ``nbytes`` on every rank (module docstring).

    ``local``: this rank's uint8 ``[nbytes]``; ``peer(r)``: rank r's bytes as this rank
    addresses them (``peer(rank)`` is ``local``); ``peer_ptrs``: int64 ``[P]`` on the
    world's device, ``peer_ptrs[r] = peer(r).data_ptr()``. ``free`` releases this rank's
    part (no collective), after which every view is gone."""

    def __init__(self, rank: int, peers: list[torch.Tensor], owner: object = None,
                 release: Callable[[], None] | None = None) -> None:
        self._rank = rank
        self._peers: list[torch.Tensor] | None = peers
        self._owner = owner  # keeps the backend's handle (rendezvous, mapping) alive
        self._release = release
        device = peers[rank].device
        self.peer_ptrs = torch.tensor([p.data_ptr() for p in peers], dtype=torch.int64,
                                      device=device)

    @property
    def nbytes(self) -> int:
        return self.local.numel()

    @property
    def local(self) -> torch.Tensor:
        return self.peer(self._rank)

    def peer(self, r: int) -> torch.Tensor:
        if self._peers is None:
            raise ConfigError("symmetric buffer", "a buffer that has not been freed", "freed")
        return self._peers[r]

    @property
    def freed(self) -> bool:
        return self._peers is None

    def free(self) -> None:
        """Release this rank's part (idempotent; never waits for another rank)."""
        if self._peers is None:
            return
        self._peers = None
        self._owner = None
        self.peer_ptrs = None
        if self._release is not None:
            release, self._release = self._release, None
            release()


class World(ABC):
    """One rank's handle on an EP world (module docstring). Backends implement
    ``_allocate``, ``barrier`` and ``_release``; ``destroy`` frees every symmetric buffer
    this rank allocated (without a collective, so it also ends a failed world in bounded
    time) and then the backend."""

    def __init__(self, info: WorldInfo) -> None:
        self.info = info
        self._buffers: list[SymmetricBuffer] = []
        self._destroyed = False
        self.failure: str | None = None
        """Why the world failed (a wait timed out), or None: ``mark_failed``."""

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def size(self) -> int:
        return self.info.size

    @property
    def device(self) -> torch.device:
        return self.info.device

    @property
    def mode(self) -> str:
        return self.info.mode

    @property
    def backend(self) -> str:
        return self.info.backend

    @property
    def timeout_s(self) -> float:
        return self.info.timeout_s

    def _alive(self) -> None:
        if self._destroyed:
            raise ConfigError("world", "a world that has not been destroyed", "destroyed")

    def allocate(self, nbytes: int) -> SymmetricBuffer:
        """A zeroed symmetric buffer of ``nbytes`` (rounded up to ``ALIGN``) on every rank.
        Collective: every rank calls it with the same size, in the same order."""
        self._alive()
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
            raise ConfigError("nbytes", "an int >= 1", repr(nbytes))
        size = -(-nbytes // ALIGN) * ALIGN
        sizes = self.all_gather_object(size)
        if len(set(sizes)) != 1:
            raise ConfigError("nbytes", "the same size on every rank (a symmetric buffer)",
                              f"{sizes} by rank")
        buf = self._allocate(size)
        self._buffers.append(buf)
        return buf

    @abstractmethod
    def _allocate(self, nbytes: int) -> SymmetricBuffer: ...

    @abstractmethod
    def barrier(self, step: str = "barrier") -> None:
        """Wait until every rank has reached a barrier (host; bounded by ``timeout_s``:
        ``CommTimeoutError`` naming this rank and ``step`` when it expires)."""

    @abstractmethod
    def all_gather_object(self, obj: object) -> list[object]:
        """Every rank's ``obj`` (picklable), in rank order; bounded like ``barrier``."""

    def mark_failed(self, reason: str) -> None:
        """Record that a wait of this world timed out (the first reason is kept): a failed
        world may hold a rank that never reaches another collective, so backends whose
        teardown is collective skip it (``destroy`` stays bounded)."""
        if self.failure is None:
            self.failure = reason

    def _release(self) -> None:  # noqa: B027 - backends with nothing to release keep this
        """Release the backend after every buffer is freed (no collective)."""

    def destroy(self) -> None:
        """Free every symmetric buffer of this rank, then the backend. Never waits for
        another rank; idempotent."""
        if self._destroyed:
            return
        for buf in self._buffers:
            buf.free()
        self._buffers.clear()
        self._destroyed = True
        self._release()

    @property
    def live_buffers(self) -> int:
        """Symmetric buffers allocated and not yet freed."""
        return sum(not b.freed for b in self._buffers)


def timeout_error(info: WorldInfo, step: str, detail: str) -> CommTimeoutError:
    """The error of a host wait that expired (``World.barrier``)."""
    return CommTimeoutError(rank=info.rank, step=step, peer=-1,
                            detail=f"{detail} (timeout {info.timeout_s} s)")
