"""The ``torch_symm`` backend: torch symmetric memory (``torch.distributed._symmetric_memory``)
over the world's gloo group (docs/contract.md s11, real and emulated worlds).

An allocation is ``symm_mem.empty`` on this rank's device, zeroed, then
``symm_mem.rendezvous`` with the group (collective); ``peer(r)`` is the handle's
``get_buffer(r, ...)``, rank r's memory mapped into this process (NVLink peer mappings in the
real world, CUDA IPC mappings of the same GPU in the emulated world, which needs
``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``: ``megamoe.comm.launch`` sets it). Multicast
stays off (``world.NO_MULTICAST_ENV``). Freeing drops the tensors and the handle (no
collective).
"""

from __future__ import annotations

import torch

from megamoe.comm.process_group_world import ProcessGroupWorld
from megamoe.comm.world import SymmetricBuffer

OVERLAPPING_DEVICES_ENV = "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"


class TorchSymmWorld(ProcessGroupWorld):
    """Symmetric memory through torch (module docstring)."""

    def _allocate(self, nbytes: int) -> SymmetricBuffer:
        import torch.distributed._symmetric_memory as symm_mem

        local = symm_mem.empty(nbytes, dtype=torch.uint8, device=self.device)
        local.zero_()
        torch.cuda.synchronize(self.device)
        handle = symm_mem.rendezvous(local, self.group_name)
        peers = [local if r == self.rank else handle.get_buffer(r, (nbytes,), torch.uint8)
                 for r in range(self.size)]
        self.barrier("allocate: zeroed and mapped")
        return SymmetricBuffer(self.rank, peers, owner=handle)
