"""Taking samples: warmup, capture, unmeasured barrier, timed unit, rank maximum, AB/BA rounds.

Per sample and per local rank: optional L2 flush, then the rank group's
barrier (both unmeasured), then the backend times one execution of the unit
(``calls_per_sample`` calls) with the rank group's device gate queued before
the start event. The time per call of every rank is gathered after the timed
region; the sample is their maximum and all per-rank values are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from megamoe.bench.device import Backend, Unit
from megamoe.bench.protocol import Order, Protocol, abba_schedule
from megamoe.bench.ranks import RankGroup
from megamoe.bench.registry import Workload
from megamoe.bench.remote import RemoteUnit, prepare_remote


@dataclass(frozen=True)
class RoundData:
    """One round of a comparison: the order of each pair and every sample of both arms.

    ``samples[arm][i]`` is the rank maximum of arm ``arm`` (0 = A, 1 = B) in
    pair ``i``; ``rank_samples[arm][i]`` holds every rank's value.
    """

    order: tuple[Order, ...]
    samples: tuple[tuple[float, ...], tuple[float, ...]]
    rank_samples: tuple[tuple[tuple[float, ...], ...], tuple[tuple[float, ...], ...]]


class Measurer:
    """Runs the protocol's sampling with one backend and one rank group."""

    def __init__(self, backend: Backend, ranks: RankGroup, protocol: Protocol) -> None:
        self.backend = backend
        self.ranks = ranks
        self.protocol = protocol

    def prepare(self, workloads: Sequence[Workload]) -> list[Unit]:
        """Warm every workload up and run its check (untimed), capture its unit, run it once.
        A remote workload does all of that in its worker (``megamoe.bench.remote``)."""
        p = self.protocol
        local = [w for w in workloads if w.remote is None]
        for w in local:
            for _ in range(p.warmup):
                w.fn()
        self.backend.synchronize()
        for w in local:
            if w.check is not None:
                w.check()
        units = [prepare_remote(w.remote, p.warmup, p.calls_per_sample, p.graph)
                 if w.remote is not None else self.backend.prepare(w.fn, p.calls_per_sample, p.graph)
                 for w in workloads]
        for unit in units:
            unit()
        self.backend.synchronize()
        return units

    def _time_one(self, unit: Unit, cold: bool) -> float:
        if cold:
            self.backend.flush_l2()
        self.ranks.barrier(self.backend)
        if isinstance(unit, RemoteUnit):  # timed by its worker, after this flush and barrier
            return unit.time() / self.protocol.calls_per_sample
        return self.backend.time(unit, self.ranks.gate()) / self.protocol.calls_per_sample

    def sample(self, units: Sequence[Unit], cold: bool) -> list[float]:
        """One sample: the time per call of every rank (all ranks, in rank order)."""
        local = [self._time_one(unit, cold) for unit in units]
        return self.ranks.gather(local)

    def compare(self, units_a: Sequence[Unit], units_b: Sequence[Unit], cold: bool) -> list[RoundData]:
        """All rounds of an AB/BA comparison of two prepared arms."""
        p = self.protocol
        arms = (units_a, units_b)
        rounds = []
        for orders in abba_schedule(p.rounds, p.pairs):
            samples: tuple[list[float], list[float]] = ([], [])
            per_rank: tuple[list[tuple[float, ...]], list[tuple[float, ...]]] = ([], [])
            for order in orders:
                for arm in order:
                    values = self.sample(arms[arm], cold)
                    samples[arm].append(max(values))
                    per_rank[arm].append(tuple(values))
            rounds.append(
                RoundData(
                    order=orders,
                    samples=(tuple(samples[0]), tuple(samples[1])),
                    rank_samples=(tuple(per_rank[0]), tuple(per_rank[1])),
                )
            )
        return rounds

    def local_series(self, unit: Unit, count: int, cold: bool = False) -> list[float]:
        """``count`` samples of one local unit (device ceilings: no gather across ranks)."""
        return [self._time_one(unit, cold) for _ in range(count)]
