"""EP worlds (docs/contract.md s7, s11): ``init_world`` starts this process's rank of a world
launched by torchrun; a ``World`` hands out symmetric memory with its peer-pointer table;
``megamoe.comm.push`` and ``megamoe.comm.signal`` are the only ways kernels reach peers."""

from megamoe.comm.launch import init_world
from megamoe.comm.world import BACKENDS, MODES, SymmetricBuffer, World, WorldInfo

__all__ = ["BACKENDS", "MODES", "SymmetricBuffer", "World", "WorldInfo", "init_world"]
