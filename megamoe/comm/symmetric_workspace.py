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

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from megamoe.comm.world import SymmetricBuffer, World
from megamoe.errors import ConfigError
from megamoe.workspace import GUARD_BYTES, REGION_ALIGN, pack_regions, region_mask


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
        self._regions, nbytes = pack_regions([(s.name, s.dtype, s.shape) for s in specs],
                                             guard_bytes)
        self.offsets = {n: r.offset for n, r in self._regions.items()}
        self.buffer: SymmetricBuffer = world.allocate(nbytes)
        self._local = {n: self._typed(self.buffer.local, n) for n in self.specs}
        self._tables = {n: self.buffer.peer_ptrs + self.offsets[n] for n in self.specs}
        bases = [self.buffer.peer(r).data_ptr() for r in range(world.size)]
        self._peer_align = {n: math.gcd(*(b + off for b in bases), 1 << 12)
                            for n, off in self.offsets.items()}

    def _typed(self, raw: torch.Tensor, name: str) -> torch.Tensor:
        r = self._regions[name]
        return raw[r.offset : r.offset + r.nbytes].view(r.dtype).view(r.shape)

    def local(self, name: str) -> torch.Tensor:
        """This rank's copy of region ``name``."""
        return self._local[name]

    def peer(self, name: str, rank: int) -> torch.Tensor:
        """Rank ``rank``'s copy of region ``name``, as this rank maps it."""
        return self._typed(self.buffer.peer(rank), name)

    def peer_alignment(self, name: str) -> int:
        """The largest power-of-two alignment (up to 4 KiB) of every rank's copy of region
        ``name`` as this rank maps it (fixed for the workspace's life: computed once)."""
        return self._peer_align[name]

    def table(self, name: str) -> torch.Tensor:
        """int64 ``[P]``: the address of every rank's copy of region ``name``."""
        return self._tables[name]

    def region_mask(self) -> torch.Tensor:
        """Bool over this rank's bytes: True inside a region (what a forward may write)."""
        return region_mask(self._regions.values(), self.buffer.nbytes, self.buffer.local.device)

    def free(self) -> None:
        self._local.clear()
        self._tables.clear()
        self.buffer.free()
