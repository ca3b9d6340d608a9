"""Cross-rank waits are bounded (docs/contract.md s7): a peer that never arrives becomes a
``CommTimeoutError`` naming the waiting rank, the step and the missing peer, after about the
world's timeout and never an endless wait (the missing peer is alive but absent from the
step); the failed world refuses further forwards;
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


def _warm_layer(world, seed: int):  # type: ignore[no-untyped-def]
    """A world with the short timeout, our layer in it, and this rank's rows of the dense-C
    state, after one healthy step (so a timeout is the absent peer's doing)."""
    shape = shape_of(world)
    short = short_timeout_world(world, TIMEOUT_S)
    layer = build_layer(OURS, config(shape), short, shape, world.device)
    x, ids, w = rank_scenario_inputs(world, shape, "dense-C", seed)
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
