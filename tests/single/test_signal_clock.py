"""The step signal's clock and bound (``megamoe.comm.signal_kernel``; docs/contract.md s7:
cross-rank waits are bounded by the world's timeout, never shorter).

1. ``elapsed_ns``: the time between two readings of ``%globaltimer_lo`` counts a wrap of the
   low word as the time it was and a reading earlier than the one before as no time,
   computed on the GPU by the function the signal kernel traces, against plain Python
   integers. The planted bug: the difference read unsigned (a step back counts 4.3 s).
2. A wait bounded past ``2**32`` ns lasts its bound: ``StepSignal.signal`` with a peer that
   never arrives. On an H100 (2026-12-05) the 60 s and 120 s bounds of the multi tier and
   the EP benchmark expired after about 4 s: the bound, a Python ``int``, reached the kernel
   as an Int32 (tests/host/test_dsl_annotations.py). The planted bug is the bound cut to 32
   bits."""

# No "from __future__ import annotations": CuTe DSL reads the kernels' annotations at runtime.

import time
from types import SimpleNamespace

import pytest
import torch

from megamoe.comm import signal as signal_mod
from megamoe.comm.signal import STATUS_TIMEOUT, StepSignal
from megamoe.comm.signal_kernel import elapsed_ns
from megamoe.errors import CommTimeoutError

WRAP = 1 << 32
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
PAIRS = [  # (now, last) as the kernel reads them: signed 32-bit words
    (5, 3),
    (3, 3),
    (3, 5),                  # a step back of 2 ns
    (0, -1),                 # the low word goes 0xffffffff -> 0
    (I32_MIN + 10, I32_MAX - 5),  # across the sign boundary: 16 ns
    (-1, 0),                 # a step back of 1 ns across zero
    (1_000_000, -1_000_000),  # 2 ms, across zero
    (I32_MIN, 0),            # 2**31 ns later or earlier: never a positive count of it
    (100, 100 + 4_000),      # 4 us back
]


def reference(now: int, last: int) -> int:
    """The contract's count: ``(now - last) mod 2**32`` as a signed word, at least 0."""
    d = (now - last) % WRAP
    return max(d - WRAP if d > I32_MAX else d, 0)


def _unsigned_elapsed_ns(now, last):  # type: ignore[no-untyped-def]
    """The planted bug (the signal kernel's accounting before): the difference unsigned."""
    from cutlass import Int64

    return Int64(now - last) & Int64(0xFFFFFFFF)


def probe_launcher(clock, n: int):  # type: ignore[no-untyped-def]
    """A ``@cute.jit`` launch of one CTA whose thread ``i < n`` writes
    ``out[i] = clock(now[i], last[i])`` (int32 ``now``, ``last``; int64 ``out``)."""
    import cutlass.cute as cute
    from cutlass import Int32

    @cute.kernel
    def probe(now: cute.Tensor, last: cute.Tensor, out: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        if tidx < Int32(n):
            out[tidx] = clock(now[tidx], last[tidx])

    @cute.jit
    def launch(now: cute.Tensor, last: cute.Tensor, out: cute.Tensor):
        probe(now, last, out).launch(grid=[1, 1, 1], block=[32, 1, 1])

    return launch


def device_counts(clock, pairs: list[tuple[int, int]]) -> list[int]:  # type: ignore[no-untyped-def]
    """``clock(now, last)`` for every pair, each in one thread of one CTA on the GPU."""
    from cutlass.cute.runtime import from_dlpack

    now = torch.tensor([p[0] for p in pairs], dtype=torch.int32, device="cuda")
    last = torch.tensor([p[1] for p in pairs], dtype=torch.int32, device="cuda")
    out = torch.full((len(pairs),), -7, dtype=torch.int64, device="cuda")
    probe_launcher(clock, len(pairs))(from_dlpack(now), from_dlpack(last), from_dlpack(out))
    torch.cuda.synchronize()
    return [int(v) for v in out.cpu()]


@pytest.mark.contract("s7.bounded-waits")
def test_the_wait_counts_wraps_as_time_and_steps_back_as_none() -> None:
    want = [reference(*p) for p in PAIRS]
    assert want[:4] == [2, 0, 0, 1] and want[4] == 16  # the reference, by hand
    got = device_counts(elapsed_ns, PAIRS)
    bad = [(p, g, w) for p, g, w in zip(PAIRS, got, want, strict=True) if g != w]
    assert not bad, f"(now, last), counted, expected: {bad}"


def test_the_planted_unsigned_count_is_caught() -> None:
    got = device_counts(_unsigned_elapsed_ns, PAIRS)
    bad = [p for p, g in zip(PAIRS, got, strict=True) if g != reference(*p)]
    assert (3, 5) in bad and (-1, 0) in bad, f"the unsigned count went unnoticed: {got}"


LONG_BOUND_S = 4.5
"""Past ``2**32`` ns (4.29 s): cut to 32 bits it would be 0.2 s."""


def lonely_signal(timeout_s: float) -> StepSignal:
    """A step signal of rank 0 in a world of 2 on this GPU whose peer never arrives: the
    table sends this rank's store for rank 1 to a scratch word, and nothing writes flag 1."""
    flags = torch.zeros(2, dtype=torch.int32, device="cuda")
    scratch = torch.zeros(2, dtype=torch.int32, device="cuda")
    table = torch.tensor([flags.data_ptr(), scratch.data_ptr()], dtype=torch.int64,
                         device="cuda")
    world = SimpleNamespace(rank=0, size=2, timeout_s=timeout_s)
    ws = SimpleNamespace(world=world, local=lambda region: flags, table=lambda region: table,
                         keep=(flags, scratch))
    signal_mod.warmup(flags.device)  # compiled before the clock starts
    return StepSignal(ws, "flags", ("ids", "dispatch"))  # type: ignore[arg-type]


def waited_s(sig: StepSignal) -> float:
    torch.cuda.synchronize()
    t0 = time.monotonic()
    sig.signal("dispatch")
    torch.cuda.synchronize()
    return time.monotonic() - t0


@pytest.mark.contract("s7.bounded-waits")
def test_a_bound_past_two_to_the_32_ns_is_waited_in_full() -> None:
    sig = lonely_signal(LONG_BOUND_S)
    took = waited_s(sig)
    err = sig.error()
    assert isinstance(err, CommTimeoutError) and (err.rank, err.step, err.peer) == (
        0, "dispatch", 1), err
    assert int(sig.status[0]) == STATUS_TIMEOUT
    assert LONG_BOUND_S <= took < LONG_BOUND_S + 10.0, f"a {LONG_BOUND_S} s bound took {took:.2f} s"


def test_the_planted_32_bit_bound_is_caught(monkeypatch) -> None:
    """The bound as the kernel got it before: cut to its low 32 bits (what an Int32 in place
    of the Int64 carried), passed through the real launcher. The wait must end early."""
    import cutlass

    sig = lonely_signal(LONG_BOUND_S)
    real = signal_mod._compiled

    def compiled(device):  # type: ignore[no-untyped-def]
        launcher = real(device)

        def call(*args):  # type: ignore[no-untyped-def]
            *head, _bound, stream = args
            return launcher(*head, cutlass.Int64(sig.timeout_ns % (1 << 32)), stream)

        return call

    monkeypatch.setattr(signal_mod, "_compiled", compiled)
    took = waited_s(sig)
    assert isinstance(sig.error(), CommTimeoutError)
    assert took < 0.5 * LONG_BOUND_S, f"the bound cut to 32 bits still took {took:.2f} s"
