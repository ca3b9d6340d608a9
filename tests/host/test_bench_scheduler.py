"""AB/BA scheduling and sampling order of the measurer, with a fake clock."""

from __future__ import annotations

import pytest

from megamoe.bench.device import HostBackend, ManualClock
from megamoe.bench.fake import FakeDevice
from megamoe.bench.measure import Measurer
from megamoe.bench.protocol import FULL, Protocol, abba_order, abba_schedule
from megamoe.bench.ranks import SingleRank
from megamoe.bench.registry import BuildContext, Case, Workload

CASE = Case("c", {"n": 1})


def _ctx(backend: HostBackend, rank: int = 0) -> BuildContext:
    return BuildContext(backend.device, rank, 1, 0)


def test_pairs_alternate_ab_ba_inside_a_round() -> None:
    orders = abba_schedule(1, 6)[0]
    assert orders == ((0, 1), (1, 0), (0, 1), (1, 0), (0, 1), (1, 0))


def test_each_round_starts_with_the_other_order_than_the_last() -> None:
    sched = abba_schedule(3, 20)
    assert [r[0] for r in sched] == [(0, 1), (1, 0), (0, 1)]
    assert abba_order(1, 0) == (1, 0)


def test_every_round_runs_each_arm_first_equally_often_for_even_pairs() -> None:
    for r in abba_schedule(3, 20):
        assert sum(o == (0, 1) for o in r) == sum(o == (1, 0) for o in r) == 10


def test_default_protocol_is_three_rounds_of_twenty_pairs() -> None:
    assert (FULL.rounds, FULL.pairs, FULL.samples_per_arm) == (3, 20, 60)
    assert FULL.flush_bytes == 512 * 2**20


@pytest.mark.parametrize(
    ("change", "argument"),
    [({"rounds": 0}, "rounds"), ({"pairs": -1}, "pairs"), ({"caches": ("hot",)}, "caches"),
     ({"resolution": 1.5}, "resolution"), ({"warmup": -1}, "warmup"), ({"confidence": 0.2}, "confidence")],
)
def test_bad_protocol_names_the_argument(change: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=argument):
        Protocol(**change)


def test_measurer_times_arms_in_schedule_order_and_keeps_every_sample() -> None:
    dev = FakeDevice()
    log: list[str] = []
    proto = Protocol(rounds=2, pairs=3, warmup=2, calls_per_sample=1, caches=("warm",))
    m = Measurer(dev.backend, SingleRank(), proto)
    wa = [dev.arm("A", 1e-3, log=log).build(CASE, _ctx(dev.backend))]
    wb = [dev.arm("B", 2e-3, log=log).build(CASE, _ctx(dev.backend))]
    ua, ub = m.prepare(wa), m.prepare(wb)
    # warmup (2 calls) + one untimed run of each unit
    assert log == ["A/0"] * 3 + ["B/0"] * 3
    log.clear()
    rounds = m.compare(ua, ub, cold=False)
    expected = []
    for r in abba_schedule(2, 3):
        for order in r:
            expected += ["A/0" if arm == 0 else "B/0" for arm in order]
    assert log == expected
    assert [len(r.samples[0]) for r in rounds] == [3, 3]
    assert all(s == pytest.approx(1e-3) for r in rounds for s in r.samples[0])
    assert all(s == pytest.approx(2e-3) for r in rounds for s in r.samples[1])


def test_sample_is_time_per_call_of_the_captured_calls() -> None:
    dev = FakeDevice()
    log: list[str] = []
    m = Measurer(dev.backend, SingleRank(), Protocol(warmup=0, calls_per_sample=5))
    (u,) = m.prepare([dev.arm("A", 1e-3, log=log).build(CASE, _ctx(dev.backend))])
    log.clear()
    assert m.sample([u], cold=False) == [pytest.approx(1e-3)]
    assert len(log) == 5


class _CountingRanks(SingleRank):
    """A single rank whose barrier and gather cost a second each on the fake clock."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock, self.barriers, self.gathers = clock, 0, 0

    def barrier(self, backend):  # type: ignore[no-untyped-def]
        self.barriers += 1
        self.clock.advance(1.0)

    def gather(self, local_values):  # type: ignore[no-untyped-def]
        self.gathers += 1
        self.clock.advance(1.0)
        return list(local_values)


def _flush_barrier_setup(measurer_cls: type[Measurer]) -> tuple[FakeDevice, _CountingRanks, list[float]]:
    dev = FakeDevice(flush_seconds=10.0)
    ranks = _CountingRanks(dev.clock)
    m = measurer_cls(dev.backend, ranks, Protocol(rounds=1, pairs=4, warmup=0, calls_per_sample=1))
    ua = m.prepare([dev.arm("A", 1e-3).build(CASE, _ctx(dev.backend))])
    ub = m.prepare([dev.arm("B", 1e-3).build(CASE, _ctx(dev.backend))])
    (rnd,) = m.compare(ua, ub, cold=True)
    return dev, ranks, [*rnd.samples[0], *rnd.samples[1]]


def _untimed(samples: list[float]) -> bool:
    return all(s == pytest.approx(1e-3) for s in samples)


def test_flush_barrier_and_gather_precede_or_follow_every_sample_untimed() -> None:
    dev, ranks, samples = _flush_barrier_setup(Measurer)
    assert dev.flushes == ranks.barriers == ranks.gathers == 8
    assert _untimed(samples)


def test_planted_bug_flush_inside_the_timed_region_is_caught() -> None:
    class FlushInside(Measurer):
        def _time_one(self, unit, cold):  # type: ignore[no-untyped-def]
            self.ranks.barrier(self.backend)

            def timed() -> None:
                if cold:
                    self.backend.flush_l2()
                unit()

            return self.backend.time(timed) / self.protocol.calls_per_sample

    _, _, samples = _flush_barrier_setup(FlushInside)
    assert not _untimed(samples)


def test_warm_samples_do_not_flush() -> None:
    dev = FakeDevice(flush_seconds=10.0)
    m = Measurer(dev.backend, SingleRank(), Protocol(rounds=1, pairs=2, warmup=0))
    u = m.prepare([dev.arm("A", 1e-3).build(CASE, _ctx(dev.backend))])
    m.compare(u, u, cold=False)
    assert dev.flushes == 0


def test_gate_runs_before_the_start_of_timing_and_is_not_timed() -> None:
    clock = ManualClock()
    backend = HostBackend(clock=clock)
    w = Workload(lambda: clock.advance(2.0))
    assert backend.time(backend.prepare(w.fn, 1, graph=True), gate=lambda: clock.advance(100.0)) == 2.0


def test_check_runs_once_after_warmup_and_before_timing() -> None:
    dev = FakeDevice()
    events: list[str] = []
    w = Workload(lambda: events.append("call"), check=lambda: events.append("check"))
    m = Measurer(dev.backend, SingleRank(), Protocol(warmup=2, calls_per_sample=1))
    m.prepare([w])
    assert events == ["call", "call", "check", "call"]


def test_a_failing_check_stops_the_run_before_any_sample() -> None:
    dev = FakeDevice()

    def wrong() -> None:
        raise AssertionError("output differs from the oracle")

    m = Measurer(dev.backend, SingleRank(), Protocol(warmup=1))
    with pytest.raises(AssertionError, match="oracle"):
        m.prepare([Workload(lambda: None, check=wrong)])
