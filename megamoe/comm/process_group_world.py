"""The host side every multi-process world shares: a gloo process group for the rendezvous
of allocations, barriers and small host collectives (docs/contract.md s11).

gloo, never NCCL: NCCL refuses two ranks on one GPU (the emulated world), and a host
collective here only moves a few bytes at setup. Every call is bounded by the world's
``timeout_s`` (the group's timeout; ``barrier`` uses ``monitored_barrier``, which names the
ranks that never arrived) and a wait that expires raises ``CommTimeoutError``.
"""

from __future__ import annotations

import re
from datetime import timedelta

import torch.distributed as dist

from megamoe.comm.world import World, WorldInfo, timeout_error


class ProcessGroupWorld(World):
    """A ``World`` whose host collectives run on a gloo ``group`` (None: the default group,
    which ``megamoe.comm.launch.init_world`` creates)."""

    def __init__(self, info: WorldInfo, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(info)
        self.group = group if group is not None else dist.group.WORLD
        if dist.get_world_size(self.group) != info.size or dist.get_rank(self.group) != info.rank:
            raise ValueError(
                f"process group: expected rank {info.rank} of {info.size}, got rank "
                f"{dist.get_rank(self.group)} of {dist.get_world_size(self.group)}")

    @property
    def group_name(self) -> str:
        return self.group.group_name

    def barrier(self, step: str = "barrier") -> None:
        self._alive()
        try:
            dist.monitored_barrier(self.group, timeout=timedelta(seconds=self.timeout_s),
                                   wait_all_ranks=True)
        except RuntimeError as err:
            missing = [int(r) for r in re.findall(r"\d+", str(err).split("failed")[0])]
            exc = timeout_error(self.info, step, f"host barrier: {str(err).splitlines()[0]}")
            exc.peer = missing[0] if missing else -1
            raise exc from err

    def all_gather_object(self, obj: object) -> list[object]:
        self._alive()
        out: list[object] = [None] * self.size
        try:
            dist.all_gather_object(out, obj, group=self.group)
        except RuntimeError as err:
            raise timeout_error(self.info, "all_gather_object",
                                f"host collective: {str(err).splitlines()[0]}") from err
        return out
