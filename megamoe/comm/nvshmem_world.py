"""The ``nvshmem`` backend: NVSHMEM symmetric memory through nvshmem4py (docs/contract.md s11).

Initialisation by unique id under torchrun: rank 0 makes the id, the world's gloo group
hands it to every rank, each calls ``nvshmem.core.init(..., initializer_method="uid")`` on
its device. An allocation is ``nvshmem.core.tensor`` (collective), zeroed; ``peer(r)`` is
``get_peer_tensor`` (``nvshmem_ptr``: a load/store mapping of rank r's copy).

NVSHMEM's free and finalize are collective (they barrier): ``destroy`` runs them only on a
healthy world. After a recorded failure (a peer that timed out may never reach the
barrier) it drops its references and leaves the heap to process exit, so ``destroy`` still
ends in bounded time.

Several PEs on one GPU (the emulated world): NVSHMEM documents only limited support for
several processes per GPU without MPS. Until a run on the H200 shows it works for what the
layer needs (allocation, peer mappings, loads and stores), an emulated ``nvshmem`` world is
refused with a clear error; ``MEGAMOE_NVSHMEM_SHARED_GPU=1`` lets the probe that decides it
try (bounded by the runner's timeout).
"""

from __future__ import annotations

import os

import torch

from megamoe.comm.process_group_world import ProcessGroupWorld
from megamoe.comm.world import SymmetricBuffer, WorldInfo
from megamoe.errors import ConfigError

SHARED_GPU_ENV = "MEGAMOE_NVSHMEM_SHARED_GPU"


def check_shared_gpu(mode: str) -> None:
    """Refuse an emulated nvshmem world unless the probe's opt-in is set (module
    docstring)."""
    if mode == "emulated" and os.environ.get(SHARED_GPU_ENV, "") != "1":
        raise ConfigError(
            "backend", "torch_symm for an emulated world (several ranks on one GPU)",
            "nvshmem",
            f"NVSHMEM's support for several PEs on one GPU without MPS is not verified on "
            f"this project's GPUs; set {SHARED_GPU_ENV}=1 to probe it")


class NvshmemWorld(ProcessGroupWorld):
    """Symmetric memory through NVSHMEM (module docstring)."""

    def __init__(self, info: WorldInfo, group=None) -> None:  # type: ignore[no-untyped-def]
        check_shared_gpu(info.mode)
        super().__init__(info, group)
        import numpy as np
        import nvshmem.core as nvshmem
        from cuda.core import Device

        self._nvshmem = nvshmem
        uid = nvshmem.get_unique_id(empty=self.rank != 0)
        raw = self.all_gather_object(uid._data.view(np.int8).tobytes())[0]
        if self.rank != 0:
            uid._data.view(np.int8)[:] = np.frombuffer(raw, dtype=np.int8)
        dev = Device(self.device.index)
        dev.set_current()
        nvshmem.init(device=dev, uid=uid, rank=self.rank, nranks=self.size,
                     initializer_method="uid")

    def _allocate(self, nbytes: int) -> SymmetricBuffer:
        nvshmem = self._nvshmem
        local = nvshmem.tensor((nbytes,), dtype=torch.uint8)
        local.zero_()
        torch.cuda.synchronize(self.device)
        peers = [local if r == self.rank else nvshmem.get_peer_tensor(local, r)
                 for r in range(self.size)]
        self.barrier("allocate: zeroed")

        def release() -> None:
            if self.failure is None:
                torch.cuda.synchronize(self.device)
                nvshmem.free_tensor(local)

        return SymmetricBuffer(self.rank, peers, release=release)

    def _release(self) -> None:
        if self.failure is None:
            self._nvshmem.finalize()
