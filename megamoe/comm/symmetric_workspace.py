"""Named regions of one symmetric buffer (docs/contract.md s3, s7, s9).

Everything peers write into a rank during a forward lives in one symmetric allocation cut
into fixed, 16-byte aligned regions with untouched guard gaps before, between and after
them (tests fill the whole buffer with a pattern and check that every byte outside the
regions keeps it). Pointers never change, so a captured forward replays.

For each region the workspace keeps the typed view of this rank's copy (``local``), of any
rank's copy as this rank maps it (``peer``) and the region's peer-pointer table (``table``:
int64 ``[P]`` on the world's device, rank r's copy of the region as this rank addresses
it), which is all a kernel gets to reach a peer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from megamoe.comm.world import SymmetricBuffer, World
from megamoe.errors import ConfigError

REGION_ALIGN = 16
GUARD_BYTES = 64


@dataclass(frozen=True)
class RegionSpec:
    """A region's name, element dtype and shape."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return torch.Size(self.shape).numel() * torch.empty((), dtype=self.dtype).element_size()


class SymmetricWorkspace:
    """Regions ``specs`` in one symmetric buffer of ``world`` (collective: every rank builds
    the same workspace in the same order). ``guard_bytes`` between regions are never
    written by a forward."""

    def __init__(self, world: World, specs: Sequence[RegionSpec],
                 guard_bytes: int = GUARD_BYTES) -> None:
        if guard_bytes < 0 or guard_bytes % REGION_ALIGN:
            raise ConfigError("guard_bytes", f"a multiple of {REGION_ALIGN} >= 0", guard_bytes)
        self.world = world
        self.specs = {s.name: s for s in specs}
        if len(self.specs) != len(specs):
            raise ConfigError("specs", "distinct region names", [s.name for s in specs])
        self.offsets: dict[str, int] = {}
        offset = guard_bytes
        for s in specs:
            offset = -(-offset // REGION_ALIGN) * REGION_ALIGN
            self.offsets[s.name] = offset
            offset += s.nbytes + guard_bytes
        self.buffer: SymmetricBuffer = world.allocate(offset)
        self._local = {n: self._typed(self.buffer.local, n) for n in self.specs}
        self._tables = {n: self.buffer.peer_ptrs + self.offsets[n] for n in self.specs}

    def _typed(self, raw: torch.Tensor, name: str) -> torch.Tensor:
        s, off = self.specs[name], self.offsets[name]
        return raw[off : off + s.nbytes].view(s.dtype).view(s.shape)

    def local(self, name: str) -> torch.Tensor:
        """This rank's copy of region ``name``."""
        return self._local[name]

    def peer(self, name: str, rank: int) -> torch.Tensor:
        """Rank ``rank``'s copy of region ``name``, as this rank maps it."""
        return self._typed(self.buffer.peer(rank), name)

    def table(self, name: str) -> torch.Tensor:
        """int64 ``[P]``: the address of every rank's copy of region ``name``."""
        return self._tables[name]

    def region_mask(self) -> torch.Tensor:
        """Bool over this rank's bytes: True inside a region (what a forward may write)."""
        mask = torch.zeros(self.buffer.nbytes, dtype=torch.bool, device=self.buffer.local.device)
        for n, s in self.specs.items():
            mask[self.offsets[n] : self.offsets[n] + s.nbytes] = True
        return mask

    def free(self) -> None:
        self._local.clear()
        self._tables.clear()
        self.buffer.free()
