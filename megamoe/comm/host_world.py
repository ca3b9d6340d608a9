"""The ``host`` backend: symmetric memory in CPU shared memory (docs/contract.md s11, mode
``cpu``).

Each rank creates a file of the allocation's size under ``/dev/shm`` (zero-filled by the
kernel), the ranks meet at a barrier, each maps every rank's file, they meet again, and
each unlinks its own file: from then on nothing outlives the processes that map it, even
after a crash. ``peer(r)`` is rank r's file mapped here; ``peer_ptrs`` holds their
addresses (CPU integers: no kernel runs in this world, the layer's PyTorch paths do).

Why our own: a CPU world needs symmetric memory that P separate processes map, which
neither torch symmetric memory nor NVSHMEM offers without a GPU; ``torch.from_file`` over
POSIX shared memory is all it takes.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import torch

from megamoe.comm.process_group_world import ProcessGroupWorld
from megamoe.comm.world import SymmetricBuffer, WorldInfo

SHM_DIR = Path("/dev/shm")
PREFIX = "megamoe-symm"


class HostWorld(ProcessGroupWorld):
    """A CPU world of P processes (module docstring)."""

    def __init__(self, info: WorldInfo, group=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(info, group)
        if not SHM_DIR.is_dir():
            raise RuntimeError(f"the host world needs POSIX shared memory at {SHM_DIR}")
        self._job = str(self.all_gather_object(uuid.uuid4().hex)[0])
        self._seq = 0

    def _path(self, seq: int, rank: int) -> Path:
        return SHM_DIR / f"{PREFIX}-{self._job}-{seq}-r{rank}"

    def _allocate(self, nbytes: int) -> SymmetricBuffer:
        seq = self._seq
        self._seq += 1
        mine = self._path(seq, self.rank)
        fd = os.open(mine, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, nbytes)
        finally:
            os.close(fd)
        try:
            self.barrier("allocate: files created")
            peers = [torch.from_file(str(self._path(seq, r)), shared=True, size=nbytes,
                                     dtype=torch.uint8) for r in range(self.size)]
            self.barrier("allocate: files mapped")
        finally:
            mine.unlink(missing_ok=True)
        return SymmetricBuffer(self.rank, peers)
