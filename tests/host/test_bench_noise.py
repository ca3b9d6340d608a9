"""The noise verdict end to end: A/A control, AB/BA comparisons, the floor, with a fake clock."""

from __future__ import annotations

import pytest

import megamoe.bench.measure as measure_mod
from megamoe.bench.fake import FakeDevice
from megamoe.bench.protocol import Protocol
from megamoe.bench.ranks import SingleRank
from megamoe.bench.registry import Benchmark, Case
from megamoe.bench.runner import run_benchmark
from megamoe.bench.stats import noise_floor

PROTO = Protocol(rounds=3, pairs=20, warmup=2, calls_per_sample=1, caches=("warm",))


def _run(dev: FakeDevice, candidate, baselines=(), protocol: Protocol = PROTO) -> dict:  # type: ignore[no-untyped-def]
    bench = Benchmark(
        name="fake", description="fake", cases=(Case("c", {"n": 1}),),
        candidate=candidate, baselines=tuple(baselines), ceilings=(),
    )
    return run_benchmark(bench, dev.backend, SingleRank(), protocol)


def _comparisons(record: dict, kind: str) -> list[dict]:
    return [c for case in record["cases"] for c in case["comparisons"] if c["kind"] == kind]


@pytest.mark.parametrize("seed", range(5))
def test_aa_control_of_one_arm_with_itself_is_noise(seed: int) -> None:
    dev = FakeDevice(seed=seed)
    rec = _run(dev, dev.arm("new", 1e-3, jitter=0.03))
    (aa,) = _comparisons(rec, "aa")
    assert aa["summary"]["verdict"] == "noise"
    assert rec["control_is_noise"] is True


def test_real_ten_percent_difference_is_reported_faster() -> None:
    dev = FakeDevice(seed=1)
    rec = _run(dev, dev.arm("new", 1.0e-3, jitter=0.03), [dev.arm("old", 1.1e-3, jitter=0.03)])
    (ab,) = _comparisons(rec, "ab")
    assert (ab["a"], ab["b"]) == ("old", "new")
    assert ab["summary"]["verdict"] == "faster"
    assert ab["summary"]["gain"] == pytest.approx(0.10, abs=0.02)
    assert all(g > 0 for g in ab["summary"]["round_gains"])


def test_slower_candidate_is_reported_slower() -> None:
    dev = FakeDevice(seed=2)
    rec = _run(dev, dev.arm("new", 1.2e-3, jitter=0.01), [dev.arm("old", 1.0e-3, jitter=0.01)])
    (ab,) = _comparisons(rec, "ab")
    assert ab["summary"]["verdict"] == "slower"


def test_difference_below_the_aa_floor_is_noise() -> None:
    dev = FakeDevice(seed=3)
    rec = _run(dev, dev.arm("new", 1.0e-3, jitter=0.05), [dev.arm("old", 1.002e-3, jitter=0.05)])
    (aa,), (ab,) = _comparisons(rec, "aa"), _comparisons(rec, "ab")
    floor = noise_floor(aa["summary"]["gain"], aa["summary"]["round_gains"])
    assert ab["summary"]["floor"] == floor
    assert abs(ab["summary"]["gain"]) <= floor
    assert ab["summary"]["verdict"] == "noise"
    assert any("floor" in r for r in ab["summary"]["reasons"])


def test_without_noise_any_difference_is_real() -> None:
    # Zero jitter: the A/A floor is exactly 0 and a 0.2 % difference is resolved.
    dev = FakeDevice()
    rec = _run(dev, dev.arm("new", 1.0e-3), [dev.arm("old", 1.002e-3)])
    (aa,), (ab,) = _comparisons(rec, "aa"), _comparisons(rec, "ab")
    assert aa["summary"]["gain"] == 0.0 and aa["summary"]["verdict"] == "noise"
    assert ab["summary"]["verdict"] == "faster"


def test_an_aa_control_that_is_not_identical_is_flagged() -> None:
    # Each later build of the arm is 5 % slower: not a real A/A, must not pass as noise.
    dev = FakeDevice(seed=4)
    rec = _run(dev, dev.arm("new", 1e-3, jitter=0.01, build_penalty=0.05))
    (aa,) = _comparisons(rec, "aa")
    assert aa["summary"]["verdict"] == "slower"
    assert rec["control_is_noise"] is False


def _always_ab(rounds: int, pairs: int):  # type: ignore[no-untyped-def]
    return tuple(tuple((0, 1) for _ in range(pairs)) for _ in range(rounds))


def test_abba_alternation_cancels_drift_in_the_aa_control() -> None:
    dev = FakeDevice(drift=0.05)
    rec = _run(dev, dev.arm("new", 1e-3))
    assert _comparisons(rec, "aa")[0]["summary"]["verdict"] == "noise"


def test_planted_bug_always_ab_order_under_drift_is_caught_by_the_aa_control(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(measure_mod, "abba_schedule", _always_ab)
    dev = FakeDevice(drift=0.05)
    rec = _run(dev, dev.arm("new", 1e-3))
    (aa,) = _comparisons(rec, "aa")
    assert aa["summary"]["verdict"] != "noise"
    assert rec["control_is_noise"] is False


def test_no_control_and_no_baseline_is_rejected() -> None:
    dev = FakeDevice()
    with pytest.raises(ValueError, match="aa_control"):
        _run(dev, dev.arm("new", 1e-3), protocol=PROTO.with_(aa_control=False))


def test_without_control_comparisons_have_no_floor() -> None:
    dev = FakeDevice(seed=5)
    rec = _run(
        dev, dev.arm("new", 1e-3, jitter=0.01), [dev.arm("old", 2e-3, jitter=0.01)],
        protocol=PROTO.with_(aa_control=False),
    )
    assert _comparisons(rec, "aa") == []
    (ab,) = _comparisons(rec, "ab")
    assert ab["summary"]["floor"] is None and ab["summary"]["verdict"] == "faster"
    assert rec["control_is_noise"] is None
