"""Rank groups: which logical ranks this process times, and how samples are combined.

Every sample of a multi-rank workload is the maximum over ranks (the critical
rank decides the latency of a collective operation); the per-rank values are
kept too. Before every sample the group runs an unmeasured barrier, and the
values are gathered after the timed region (seed 001).

- :class:`SingleRank`: one rank, no communication (EP1).
- :class:`EmulatedRanks`: P logical ranks in one process on one device
  (DESIGN.md "Execution model"); each rank's workload is timed in turn, with a
  device synchronisation before each, and the sample is their maximum.
- :class:`DistributedRanks`: one process per rank under ``torch.distributed``;
  a host barrier plus an optional device gate (queued before the start event)
  align the ranks, and ``all_gather_object`` collects the values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from megamoe.bench.device import Backend


class RankGroup(Protocol):
    mode: str
    world_size: int

    def local_ranks(self) -> Sequence[int]:
        """Logical ranks whose workloads this process builds and times."""

    def barrier(self, backend: Backend) -> None:
        """Unmeasured: wait until every rank (and the device) is idle."""

    def gate(self) -> Callable[[], None] | None:
        """Device work queued just before the start event (aligns ranks), or None."""

    def gather(self, local_values: Sequence[float]) -> list[float]:
        """Values of all ``world_size`` ranks in rank order (outside any timed region)."""

    @property
    def is_writer(self) -> bool:
        """Whether this process writes the records."""

    def describe(self) -> dict[str, Any]:
        """Mode and world size, for the records."""


class SingleRank:
    mode = "single"
    world_size = 1
    is_writer = True

    def local_ranks(self) -> Sequence[int]:
        return (0,)

    def barrier(self, backend: Backend) -> None:
        backend.synchronize()

    def gate(self) -> Callable[[], None] | None:
        return None

    def gather(self, local_values: Sequence[float]) -> list[float]:
        return list(local_values)

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "world_size": self.world_size}


class EmulatedRanks:
    """``world_size`` logical ranks driven phase by phase by this process."""

    mode = "emulated"
    is_writer = True

    def __init__(self, world_size: int) -> None:
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size: expected a positive int, got {world_size!r}")
        self.world_size = world_size

    def local_ranks(self) -> Sequence[int]:
        return range(self.world_size)

    def barrier(self, backend: Backend) -> None:
        backend.synchronize()

    def gate(self) -> Callable[[], None] | None:
        return None

    def gather(self, local_values: Sequence[float]) -> list[float]:
        if len(local_values) != self.world_size:
            raise ValueError(
                f"local_values: expected one value per emulated rank ({self.world_size}), "
                f"got {len(local_values)}"
            )
        return list(local_values)

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "world_size": self.world_size}


class DistributedRanks:
    """One rank per process in an initialised ``torch.distributed`` world.

    ``group`` is the (CPU-capable, e.g. gloo) group used for the host barrier
    and the gather; ``gate`` is optional device work (such as an all-reduce of
    one element on the NCCL group) that lines the ranks' start events up.
    """

    mode = "distributed"

    def __init__(self, group: Any = None, gate: Callable[[], None] | None = None) -> None:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ValueError("group: expected an initialised torch.distributed world, got none")
        self._dist = dist
        self._group = group
        self._gate = gate
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    def local_ranks(self) -> Sequence[int]:
        return (self.rank,)

    def barrier(self, backend: Backend) -> None:
        backend.synchronize()
        self._dist.barrier(group=self._group)

    def gate(self) -> Callable[[], None] | None:
        return self._gate

    def gather(self, local_values: Sequence[float]) -> list[float]:
        (value,) = local_values
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, float(value), group=self._group)
        return [float(v) for v in out]

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "world_size": self.world_size, "rank": self.rank}
