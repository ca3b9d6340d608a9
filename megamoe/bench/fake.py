"""Fake workloads on a :class:`ManualClock`, so the harness logic runs and is tested on the CPU.

A fake call advances the clock by ``mean * (1 + drift * calls_so_far)``
times a lognormal jitter factor; ``drift`` models a device that slows down
during the run (the effect AB/BA alternation cancels), and ``build_penalty``
makes each later build of the same arm slower (an A/A control that is not
really A/A).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from megamoe.bench.device import HostBackend, ManualClock
from megamoe.bench.registry import Arm, BuildContext, Case, Workload


@dataclass
class FakeDevice:
    """A manual clock, a call counter shared by all fake arms, and a host backend on it."""

    seed: int = 0
    drift: float = 0.0
    flush_seconds: float = 0.0
    clock: ManualClock = field(default_factory=ManualClock)
    calls: int = 0
    flushes: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.backend = HostBackend(clock=self.clock, flush=self._flush)

    def _flush(self) -> None:
        self.flushes += 1
        self.clock.advance(self.flush_seconds)

    def call(self, mean: float, jitter: float) -> None:
        factor = math.exp(self.rng.gauss(0.0, jitter)) if jitter > 0 else 1.0
        self.clock.advance(mean * (1.0 + self.drift * self.calls) * factor)
        self.calls += 1

    def arm(
        self,
        name: str,
        mean: float,
        *,
        jitter: float = 0.0,
        rank_scale: float = 0.0,
        build_penalty: float = 0.0,
        bytes_moved: int = 0,
        flops: int = 0,
        ceiling: str | None = None,
        log: list[str] | None = None,
    ) -> Arm:
        """An arm whose call takes ``mean * (1 + rank_scale * rank) * (1 + build_penalty * build)``.

        ``log`` (if given) receives ``"<name>/<build>"`` for every call, to check the order.
        """
        builds = 0

        def build(case: Case, ctx: BuildContext) -> Workload:
            nonlocal builds
            index = builds
            builds += 1
            t = mean * (1.0 + rank_scale * ctx.rank) * (1.0 + build_penalty * index)
            tag = f"{name}/{index}"

            def fn() -> None:
                if log is not None:
                    log.append(tag)
                self.call(t, jitter)

            return Workload(fn, bytes_moved=bytes_moved, flops=flops, ceiling=ceiling)

        return Arm(name, build)
