"""The ``nvshmem`` backend: NVSHMEM symmetric memory through nvshmem4py (docs/contract.md s11).

Initialisation by unique id under torchrun: rank 0 makes the id, the world's gloo group
hands it to every rank, each calls ``nvshmem.core.init(..., initializer_method="uid")`` on
its device. An allocation is ``nvshmem.core.tensor`` (collective), zeroed; ``peer(r)`` is
``get_peer_tensor`` (``nvshmem_ptr``: a load/store mapping of rank r's copy).

NVSHMEM's free and finalize are collective (they barrier): they run only on a world whose
ranks all agree it is healthy (``healthy_everywhere``: a bounded gather of every rank's state
first; a rank that missed a step saw no failure of its own, yet its peer that timed out
skips them). After a failure anywhere the world drops its references and leaves the heap to
process exit, so ``destroy`` still ends in bounded time.

NVSHMEM is initialized once per process (a second ``nvshmem_init`` is undefined behaviour):
the first world of a process initializes it, later worlds over the same ranks and device
share it, and the last one's ``destroy`` finalizes it unless a world failed
(``megamoe.comm.process_runtime``).

Several PEs on one GPU (the emulated world) serve what the layer needs (allocation, peer
mappings, loads and stores, the step signal): the whole multi tier passed in an emulated
nvshmem world of 2 ranks on an H100 without MPS (nvshmem4py 0.4.1, NVSHMEM 3.4.5;
``devtools/nvshmem_device.sh all``, its record in docs/qualification/), so it is served like
the ``torch_symm`` one.
"""

from __future__ import annotations

import torch

from megamoe.comm.process_group_world import ProcessGroupWorld
from megamoe.comm.process_runtime import OncePerProcess, Place
from megamoe.comm.world import SymmetricBuffer, WorldInfo
from megamoe.errors import CommTimeoutError

RUNTIME = OncePerProcess("NVSHMEM")
"""This process's NVSHMEM runtime, shared by its worlds."""


class NvshmemWorld(ProcessGroupWorld):
    """Symmetric memory through NVSHMEM (module docstring)."""

    def __init__(self, info: WorldInfo, group=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(info, group)
        import numpy as np
        import nvshmem.core as nvshmem
        from cuda.core import Device

        self._nvshmem = nvshmem

        def init() -> None:
            uid = nvshmem.get_unique_id(empty=self.rank != 0)
            raw = self.all_gather_object(uid._data.view(np.int8).tobytes())[0]
            if self.rank != 0:
                uid._data.view(np.int8)[:] = np.frombuffer(raw, dtype=np.int8)
            dev = Device(self.device.index)
            dev.set_current()
            nvshmem.init(device=dev, uid=uid, rank=self.rank, nranks=self.size,
                         initializer_method="uid")

        RUNTIME.acquire(Place(self.rank, self.size, self.device.index), init)

    def _allocate(self, nbytes: int) -> SymmetricBuffer:
        nvshmem = self._nvshmem
        local = nvshmem.tensor((nbytes,), dtype=torch.uint8)
        local.zero_()
        torch.cuda.synchronize(self.device)
        peers = [local if r == self.rank else nvshmem.get_peer_tensor(local, r)
                 for r in range(self.size)]
        self.barrier("allocate: zeroed")
        return SymmetricBuffer(self.rank, peers, release=lambda: self._free(local))

    def healthy_everywhere(self, step: str) -> bool:
        """Whether no rank of this world recorded a failure: a bounded all-gather of every
        rank's state before a collective teardown. NVSHMEM's free and finalize barrier, so a
        rank that saw no failure (the peer that never came to a step) must not enter them
        while the rank that timed out skips them: it would wait there for ever. A failure
        anywhere, or a peer that does not reach the gather in time, marks this world failed
        too."""
        try:
            healthy = self.all_gather_object(self.failure is None)
        except CommTimeoutError as err:
            self.mark_failed(f"{step}: a peer did not reach the teardown's agreement ({err})")
            return False
        failed = [r for r, ok in enumerate(healthy) if not ok]
        if failed:
            self.mark_failed(f"{step}: rank(s) {failed} of this world failed")
        return not failed

    def _free(self, local: torch.Tensor) -> None:
        if self.healthy_everywhere("free"):
            torch.cuda.synchronize(self.device)
            self._nvshmem.free_tensor(local)

    def destroy(self) -> None:
        """``World.destroy``, after the ranks agree whether the world is healthy
        (``healthy_everywhere``): only then are its collective free and finalize run."""
        if not self._destroyed:
            self.healthy_everywhere("destroy")
        super().destroy()

    def _release(self) -> None:
        RUNTIME.release(self.failure is not None, self._nvshmem.finalize)
