"""Cross-rank waits are bounded (docs/contract.md s7): a peer that never arrives becomes a
``CommTimeoutError`` naming the waiting rank, the step and the missing peer, after about the
world's timeout and never an endless wait (the missing peer is alive but absent from the
step); a peer that arrives late but inside the bound is waited for (the bound is never
shorter than the world's timeout); the failed world refuses further forwards;
``destroy()`` frees every rank's symmetric memory in bounded time after the failure."""

from __future__ import annotations

import time

import pytest

from megamoe import CommTimeoutError, ConfigError
from tests.multi.ep_world import (
    OURS,
    Verdict,
    build_layer,
    config,
    rank_scenario_inputs,
    shape_of,
    short_timeout_world,
)

TIMEOUT_S = 2.0
SLACK_S = 20.0
"""What a timed-out forward may take beyond the timeout: its other steps, the host read of
the status word, and in the emulated world the time slices of the other processes."""
LATE_S = 8.0
"""How late the late peer of the in-bound test is: long enough for thousands of polls of the
clock by every waiting rank, the other processes time-slicing the GPU."""
LATE_BOUND_S = 60.0
"""That test's world timeout: far above ``LATE_S``, so only a wait that counts time wrong
(``signal_kernel.elapsed_ns``) expires."""


def _warm_layer(world, seed: int, timeout_s: float = TIMEOUT_S):  # type: ignore[no-untyped-def]
    """A world with the timeout (default the short one), our layer in it, and this rank's
    rows of the dense-C state, after one healthy step (so a timeout is the absent peer's
    doing). The kernels are compiled first by a layer of the outer world and its own bound:
    the ranks compile at their own pace, and under the short bound a rank compiling 2 s
    longer than its peer failed the healthy step (an H200, ``--filter ep_timeouts``, where no
    earlier test had compiled them)."""
    shape = shape_of(world)
    x, ids, w = rank_scenario_inputs(world, shape, "dense-C", seed)
    compiling = build_layer(OURS, config(shape), world, shape, world.device)
    compiling.warmup(x, ids, w)
    compiling.destroy()
    world.barrier("before the short world")  # its gloo group waits timeout_s at most
    short = short_timeout_world(world, timeout_s)
    layer = build_layer(OURS, config(shape), short, shape, world.device)
    world.barrier("before the healthy step under the short bound")
    layer.warmup(x, ids, w)
    return short, layer, (x, ids, w)


def _timed_forward(layer, rows) -> tuple[CommTimeoutError | None, float]:  # type: ignore[no-untyped-def]
    """The timeout a forward raised (None if it returned) and the seconds it took."""
    t0 = time.monotonic()
    try:
        layer.forward(*rows)
        raised = None
    except CommTimeoutError as err:
        raised = err
    return raised, time.monotonic() - t0


@pytest.mark.contract("s7.bounded-waits")
def test_a_peer_that_never_arrives_is_a_timeout_naming_rank_step_and_peer(world) -> None:
    short, layer, rows = _warm_layer(world, seed=37)
    absent = world.size - 1
    verdict = Verdict()
    world.barrier("before the missed step")
    if world.rank != absent or world.size == 1:
        raised, took = _timed_forward(layer, rows)
        if world.size == 1:
            verdict.check(world.rank, f"one rank has no peer to miss, got {raised!r}",
                          raised is None)
        else:
            verdict.check(world.rank, f"expected a timeout at step 'ids' waiting for rank "
                          f"{absent}, got {raised!r}", raised is not None and
                          (raised.rank, raised.step, raised.peer) == (world.rank, "ids", absent))
            verdict.check(world.rank, f"the timed-out forward took {took:.1f} s (timeout "
                          f"{TIMEOUT_S} s)", TIMEOUT_S * 0.9 <= took <= TIMEOUT_S + SLACK_S)
            try:
                layer.forward(*rows)
                verdict.check(world.rank, "a failed world ran another forward", False)
            except ConfigError as err:
                verdict.check(world.rank, f"unclear refusal: {err}", "failed" in str(err))
    # The absent peer is alive, only late: its memory stays mapped until the others have
    # timed out (the outer world's barrier), as a hung or slow rank's would. A peer that
    # frees its symmetric memory while the others still write into it is a crashed
    # process, which no device-side bound can make safe.
    world.barrier("after the missed step")
    t0 = time.monotonic()
    layer.destroy()
    short.destroy()
    took = time.monotonic() - t0
    verdict.check(world.rank, f"destroy after the failure took {took:.1f} s", took < SLACK_S)
    verdict.check(world.rank, "symmetric buffers left after destroy", short.live_buffers == 0)
    verdict.assert_clean(world)


@pytest.mark.contract("s7.bounded-waits")
def test_a_peer_that_arrives_after_the_others_timed_out_times_out_too(world) -> None:
    """The ranks that timed out signal no more, so the late peer's forward cannot run on
    rows their failed forward pushed: it times out at its next step ('dispatch', waiting for
    a rank that failed) instead of returning an output. One rank has no peer to be late for:
    its forward returns."""
    short, layer, rows = _warm_layer(world, seed=38)
    late = world.size - 1
    verdict = Verdict()
    world.barrier("before the missed step")
    if world.rank != late:
        raised, _ = _timed_forward(layer, rows)  # what that timeout must name is the test above's
        verdict.check(world.rank, f"no timeout while rank {late} was absent", raised is not None)
    world.barrier("after the others timed out")
    if world.rank == late:
        raised, took = _timed_forward(layer, rows)
        if world.size == 1:
            verdict.check(world.rank, f"one rank has no peer to be late for, got {raised!r}",
                          raised is None)
        else:
            verdict.check(world.rank, f"the late peer returned an output or the wrong error: "
                          f"expected a timeout at step 'dispatch' waiting for a failed rank, "
                          f"got {raised!r}", raised is not None and
                          (raised.rank, raised.step) == (late, "dispatch") and
                          raised.peer != late)
            verdict.check(world.rank, f"the late forward took {took:.1f} s (timeout "
                          f"{TIMEOUT_S} s)", took <= TIMEOUT_S + SLACK_S)
    world.barrier("after the late step")
    layer.destroy()
    short.destroy()
    verdict.assert_clean(world)


@pytest.mark.contract("s7.bounded-waits")
def test_a_peer_late_inside_the_bound_is_waited_for(world) -> None:
    """The last rank starts its step ``LATE_S`` after the others, inside a bound of
    ``LATE_BOUND_S``: every rank returns the rows of a step taken together, bitwise, and the
    early ranks' forward lasted about as long as they waited."""
    long, layer, rows = _warm_layer(world, seed=39, timeout_s=LATE_BOUND_S)
    verdict = Verdict()
    world.barrier("before the step taken together")
    want = layer.forward(*rows).clone()
    late = world.size - 1
    world.barrier("before the late step")
    if world.rank == late:
        time.sleep(LATE_S)
    t0 = time.monotonic()
    try:
        got, raised = layer.forward(*rows), None
    except CommTimeoutError as err:
        got, raised = None, err
    took = time.monotonic() - t0
    verdict.check(world.rank, f"a peer {LATE_S} s late inside a {LATE_BOUND_S} s bound: "
                  f"{raised!r}", raised is None)
    if got is not None:
        verdict.equal_bits(world.rank, "the late step", got, want)
    if world.rank != late and world.size > 1:
        verdict.check(world.rank, f"the forward waiting for the late peer took {took:.1f} s",
                      took >= 0.5 * LATE_S)
    world.barrier("after the late step")
    layer.destroy()
    long.destroy()
    verdict.assert_clean(world)
