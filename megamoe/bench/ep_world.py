"""The EP world of a benchmark run under torchrun (``python -m torch.distributed.run
--nproc-per-node=P -m megamoe.bench NAME``): started once by the CLI
(``megamoe.comm.init_world``: the mode from the machine or ``MEGAMOE_EP_MODE``), read by the
builders of multi-rank arms (``current_world``)."""

from __future__ import annotations

from megamoe.comm.world import World

_WORLD: list[World] = []


def start_world() -> World:
    """Start this process's rank of the world torchrun launched (once)."""
    if not _WORLD:
        from megamoe.comm import init_world

        _WORLD.append(init_world())
    return _WORLD[0]


def current_world() -> World:
    """The world ``start_world`` started; a clear error outside torchrun."""
    if not _WORLD:
        raise RuntimeError("this arm runs in an EP world: launch the benchmark with torchrun "
                           "(python -m torch.distributed.run --nproc-per-node=P -m "
                           "megamoe.bench NAME)")
    return _WORLD[0]
