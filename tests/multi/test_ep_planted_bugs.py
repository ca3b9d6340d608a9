"""The multi tier catches the bugs an exchange can have (planted here, in the suite
itself): a wrong peer index, a stale receive tail, a flag not reset between replays (the
epoch that never advances, so a wait is satisfied by the previous step's flags) and a
missing wait. Each is planted into the real layer and must make the tier's own judge
(``eager_changing_run``: every row of every rank against the oracle and EP1, NaN poured
between states) report problems; the same run without the bug is clean, so the failure is
the bug's. The ordering bugs need a slow peer to show in a run: rank 0 pauses before it
pushes its rows (also in the clean control)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import torch

from megamoe.comm.signal import StepSignal
from megamoe.layer.ep_exchange import EpExchange
from tests.multi.ep_world import OURS, build_layer, config, eager_changing_run, shape_of

NAMES = ("dense-C", "sparse-holes", "asymmetric", "last-capacity-row-only", "dense-C")
PAUSE_S = 0.5


def _wrong_peer(mp: pytest.MonkeyPatch) -> None:
    real = EpExchange.send_tables

    def send_tables(self: EpExchange) -> str:
        path = real(self)
        self.send_dest.copy_((self.send_dest + 1) % self.world.size)
        return path

    mp.setattr(EpExchange, "send_tables", send_tables)


def _stale_tail(mp: pytest.MonkeyPatch) -> None:
    real = EpExchange.recv_tables

    def recv_tables(self: EpExchange) -> str:
        # tables are rewritten below this batch's count only, and the count is kept from the
        # largest batch so far: the rows past the count (a stale tail of the receive buffer,
        # with the previous batch's tables) are processed and returned again
        path = real(self)
        lay = self.recv_layout
        tables = (lay.order_expert, self.ret_dest, self.ret_dst)
        prev = getattr(self, "_planted_prev", None)
        if prev is not None:
            stale_n, old = prev
            tail = (self._recv >= lay.num_routes) & (self._recv < stale_n)
            for t, o in zip(tables, old, strict=True):
                t.copy_(torch.where(tail, o, t))
            torch.maximum(stale_n, lay.num_routes, out=lay.num_routes)
        self._planted_prev = (lay.num_routes.clone(), tuple(t.clone() for t in tables))
        return path

    mp.setattr(EpExchange, "recv_tables", recv_tables)


def _epoch_not_advanced(mp: pytest.MonkeyPatch) -> None:
    real = StepSignal.signal

    def signal(self: StepSignal, step: str) -> str:
        path = real(self, step)
        self.epoch.sub_(1)
        return path

    mp.setattr(StepSignal, "signal", signal)


def _missing_wait(mp: pytest.MonkeyPatch) -> None:
    real = StepSignal.signal

    def signal(self: StepSignal, step: str) -> str:
        if step != "dispatch":
            return real(self, step)
        e = self.epoch + 1
        world = self.ws.world
        for d in range(world.size):  # the flags are set, nobody waits for them
            self.ws.peer(self.region, d)[world.rank : world.rank + 1].copy_(e)
        self.epoch.copy_(e)
        return "torch"

    mp.setattr(StepSignal, "signal", signal)


def _slow_rank_zero(mp: pytest.MonkeyPatch) -> None:
    real = EpExchange.dispatch

    def dispatch(self: EpExchange, stage_ws) -> str:  # type: ignore[no-untyped-def]
        if self.world.rank == 0:
            if self.world.device.type == "cuda":
                torch.cuda._sleep(int(PAUSE_S * 2e9))  # the GPU pauses, not the host
            else:
                time.sleep(PAUSE_S)
        return real(self, stage_ws)

    mp.setattr(EpExchange, "dispatch", dispatch)


PLANTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], bool]] = {
    "wrong-peer-index": (_wrong_peer, False),
    "stale-receive-tail": (_stale_tail, False),
    "flag-not-reset-between-replays": (_epoch_not_advanced, True),
    "missing-wait": (_missing_wait, True),
}
"""name -> (plant the bug, needs the slow peer)."""


def _run(world, recipe: str) -> list[str]:  # type: ignore[no-untyped-def]
    shape = shape_of(world)
    cfg = config(shape, recipe)
    layer = build_layer(OURS, cfg, world, shape, world.device)
    ep1 = build_layer(OURS, cfg, None, shape, world.device)
    try:
        verdict = eager_changing_run(world, layer, ep1, shape, cfg, NAMES, seed=41)
    finally:
        layer.destroy()
        ep1.destroy()
    return verdict.gather(world)


@pytest.mark.contract("s7.ep-equals-ep1", "s7.ep-rows-meet-reference")
@pytest.mark.parametrize("bug", list(PLANTS))
def test_the_tier_catches_a_planted_exchange_bug(world, bug) -> None:
    assert world.size >= 2, "planted exchange bugs need peers: run the multi tier with P >= 2"
    plant, slow = PLANTS[bug]
    with pytest.MonkeyPatch.context() as mp:
        if slow:
            _slow_rank_zero(mp)
        clean = _run(world, "bf16")
        plant(mp)
        caught = _run(world, "bf16")
    assert clean == [], "the control run without the bug must pass:\n" + "\n".join(clean)
    assert caught, f"planted bug {bug!r} was not caught by the multi tier's judge"
