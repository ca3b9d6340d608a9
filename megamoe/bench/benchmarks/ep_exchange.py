"""``ep_dispatch`` and ``ep_combine``: the EP layer's exchange alone, against NCCL's
``all_to_all_single`` of the same bytes and the peer-copy ceiling (issue 38 item 3).

Run under torchrun, one process per rank (``python -m torch.distributed.run
--nproc-per-node=P -m megamoe.bench ep_dispatch``). Each rank sets up one exchange of the
case (``megamoe.bench.exchange_state``), then times one push step repeated:

- ``ep_dispatch``, candidate ``push-dispatch``: ``EpExchange.dispatch``, each of this rank's
  routes' wire row (A1 payload, scales, staged score) pushed into its owner's receive buffer
  through the peer table, then the step signal (every rank waits for every rank);
- ``ep_combine``, candidate ``push-return``: ``EpExchange.give_back``, each received route's
  term (bf16 ``[H]``) pushed back to its source rank's slot, then the signal. The local
  masked sum that follows in a forward is not timed here (``layer_stages``'s ``combine``).

Baselines (``all-to-all-dispatch``, ``all-to-all-return``): ``torch.distributed.
all_to_all_single`` of the same rows, packed by destination beforehand (split sizes known on
the host, as stock EP code reads them), over NCCL in a real world. In an emulated or CPU
world NCCL cannot run (two ranks on one GPU hang), so the baseline goes over the world's gloo
group through host memory: a correctness arm only, which a CUDA graph cannot capture; run
there with ``--no-graph``. In a real world both arms are captured (NCCL collectives are
capturable once the communicator exists, which the untimed warmup calls make sure of); where a
machine's NCCL refuses capture, ``--no-graph`` times both eagerly.

Work: ``bytes_sent``, the bytes of the rows the world sends (each rank's to itself included)
divided by P, the same for both arms, compared with the ``peer_copy_bw`` ceiling measured in
the same run; the record's achieved values are bytes per second per rank (DeepEP's intranode anchor on H800: about 153 GB/s dispatch, 158 GB/s
combine). Each sample is the slowest rank's time. Before timing, each arm's check clears what
it writes (NaN bytes), runs once on every rank and compares every received row, bit for bit,
with the oracle's order (``exchange_state``).

Cases: the DeepSeek-like shape (H = 7168, E = 256, K = 8) at T in {128, 1024, 4096} tokens
per rank with uniform routes and T = 4096 with skewed ones; dispatch in bf16 (2H bytes a
row) and mxfp8 (H + H/32 bytes: the bytes of a 1x128-scaled FP8 row with float32 scales);
combine in bf16 terms. ``--quick`` keeps T = 128.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from megamoe.bench.benchmarks.layer import DEEPSEEK
from megamoe.bench.exchange_state import (
    ExchangeState,
    case_recipe,
    exchange_state,
    row_bytes,
    score_bytes,
)
from megamoe.bench.registry import Arm, Benchmark, BuildContext, Case, Workload, register_benchmark
from megamoe.bench.torch_ep import all_to_all, exchange_group

POISON = 0xFF
"""The byte a check writes over every buffer an arm fills (0xFFFF is a bf16 NaN)."""


def _fresh_call(state: ExchangeState, targets: list[torch.Tensor], fn) -> None:  # type: ignore[no-untyped-def]
    """Fill ``targets`` with ``POISON`` on every rank, then run ``fn`` once on every rank:
    barriers around the poison, so no earlier push lands after it and no push of this call
    before it."""
    world = state.world
    _sync(world.device)
    world.barrier()
    for t in targets:
        t.view(torch.uint8).fill_(POISON)
    _sync(world.device)
    world.barrier()
    fn()
    _sync(world.device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _same_bytes(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if got.shape != want.shape or not torch.equal(got, want):
        bad = (got != want).any(1).nonzero().reshape(-1)[:8].tolist() if got.shape == want.shape \
            else f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
        raise AssertionError(f"{what}: received rows differ from the oracle's order (rows {bad})")


def _exchange(case: Case, ctx: BuildContext):  # type: ignore[no-untyped-def]
    st = exchange_state(case, ctx)
    assert st.exchange is not None
    return st, st.exchange


def build_push_dispatch(case: Case, ctx: BuildContext) -> Workload:
    st, ex = _exchange(case, ctx)
    ws = st.stage_ws
    fn = lambda: ex.dispatch(ws)  # noqa: E731

    def check() -> None:
        targets = [ex.recv_payload, ex.recv_scores]
        if ex.recv_scales is not None:
            targets.append(ex.recv_scales)
        _fresh_call(st, targets, fn)
        n = st.received.numel()
        got = torch.cat([row_bytes(ex.recv_payload[:n], None if ex.recv_scales is None
                                   else ex.recv_scales[:n]),
                         score_bytes(ex.recv_scores[:n, 0])], 1)
        _same_bytes(f"{case.name} push-dispatch", got, st.wire_rows(st.received))

    return Workload(fn, bytes_sent=st.bytes_per_rank(st.wire_bytes),
                    ceiling="peer_copy_bw", check=check)


def build_push_return(case: Case, ctx: BuildContext) -> Workload:
    st, ex = _exchange(case, ctx)
    rows_in = ex.recv_payload.shape[0]
    h2 = torch.zeros(rows_in, st.shape.hidden, dtype=torch.bfloat16, device=ctx.device)
    n = st.received.numel()
    h2[:n] = st.term_rows(st.received)
    gemm_rows = torch.arange(rows_in, dtype=torch.int64, device=ctx.device)
    fn = lambda: ex.give_back(h2, gemm_rows)  # noqa: E731

    def check() -> None:
        _fresh_call(st, [ex.terms], fn)
        _, row, slot = st.order[st.sent].unbind(1)
        _same_bytes(f"{case.name} push-return", ex.terms[row, slot].view(torch.uint8),
                    st.term_rows(st.sent).view(torch.uint8))

    return Workload(fn, bytes_sent=st.bytes_per_rank(st.shape.hidden * 2),
                    ceiling="peer_copy_bw", check=check)


def _all_to_all_arm(st: ExchangeState, send: torch.Tensor, want: torch.Tensor,
                    send_splits: list[int], recv_splits: list[int], what: str) -> Workload:
    """``send`` (uint8 rows packed by destination) through ``all_to_all_single``; its check:
    the rows received are ``want``."""
    group, on_device = exchange_group(st.world)
    recv = torch.empty_like(want)

    def fn() -> None:
        if on_device:
            dist.all_to_all_single(recv, send, recv_splits, send_splits, group=group)
            return
        if send.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{what}: in a {st.world.mode} world the all-to-all goes over "
                               "gloo through host memory, which a CUDA graph cannot capture: "
                               "run the benchmark with --no-graph")
        recv.copy_(all_to_all(group, False, send, send_splits, recv_splits))

    def check() -> None:
        _fresh_call(st, [recv], fn)
        _same_bytes(what, recv, want)

    return Workload(fn, bytes_sent=st.bytes_per_rank(send.shape[1]), ceiling="peer_copy_bw",
                    check=check)


def build_all_to_all_dispatch(case: Case, ctx: BuildContext) -> Workload:
    st = exchange_state(case, ctx, exchange=False)
    send_splits, recv_splits = st.split_sizes()
    return _all_to_all_arm(st, st.wire_rows(st.sent), st.wire_rows(st.received_by_source()),
                           send_splits, recv_splits, f"{case.name} all-to-all-dispatch")


def build_all_to_all_return(case: Case, ctx: BuildContext) -> Workload:
    st = exchange_state(case, ctx, exchange=False)
    send_splits, recv_splits = st.split_sizes()
    return _all_to_all_arm(st, st.term_rows(st.received_by_source()).view(torch.uint8),
                           st.term_rows(st.sent).view(torch.uint8), recv_splits, send_splits,
                           f"{case.name} all-to-all-return")


def _cases(recipes: tuple[str, ...]) -> tuple[Case, ...]:
    s = DEEPSEEK
    shape = {"hidden": s.hidden, "inter": s.inter, "experts": s.experts, "top_k": s.top_k}
    runs = [("uniform", 128), ("uniform", 1024), ("uniform", 4096), ("skewed", 4096)]
    return tuple(Case(f"{s.name}-{recipe}-{routes}-T{t}", {"tokens": t, **shape},
                      scenario=routes, seed=29, quick=t == 128, calls_per_sample=10)
                 for recipe in recipes for routes, t in runs)


EP_DISPATCH = register_benchmark(
    Benchmark(
        name="ep_dispatch",
        description="the EP dispatch push (P ranks under torchrun) vs all_to_all_single of "
                    "the same bytes, against the peer-copy ceiling",
        cases=_cases(("bf16", "mxfp8")),
        candidate=Arm("push-dispatch", build_push_dispatch),
        baselines=(Arm("all-to-all-dispatch", build_all_to_all_dispatch),),
        ceilings=("peer_copy_bw",),
    )
)

EP_COMBINE = register_benchmark(
    Benchmark(
        name="ep_combine",
        description="the EP return push of the terms (P ranks under torchrun) vs "
                    "all_to_all_single of the same bytes, against the peer-copy ceiling",
        cases=_cases(("bf16",)),
        candidate=Arm("push-return", build_push_return),
        baselines=(Arm("all-to-all-return", build_all_to_all_return),),
        ceilings=("peer_copy_bw",),
    )
)

__all__ = ["EP_COMBINE", "EP_DISPATCH", "case_recipe"]
