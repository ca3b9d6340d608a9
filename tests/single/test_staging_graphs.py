"""Staging under CUDA graphs (docs/contract.md s2, s3, s9): capture once at capacity, replay
through changed, shrunk (T -> 0), masked, bad and restored contents; every replay is
bitwise equal to the eager result and to the oracle; no stale route survives a shrink;
bad routes give NaN rows and the status word, read by ``check_errors``; compiling during
capture is an error."""

from __future__ import annotations

import pytest
import torch

from megamoe import ConfigError, RouteError
from megamoe.graphs import capture
from megamoe.staging import (
    KERNEL_FORMATS,
    CompileDuringCaptureError,
    StageFormat,
    StagingWorkspace,
    check_errors,
    stage,
    warmup,
)
from tests.single.test_staging_helpers import (
    caller_hidden,
    fill_guards,
    guards_intact,
    make_hidden,
    make_routes,
    mismatches,
    oracle_stage,
    same_bytes,
)

C, K, H, E = 256, 8, 1024, 64


def _contents(gen, fmt, t, phase):
    """(hidden payload [t, ...], scales or None, ids [t, K], scores [t, K]) for one replay."""
    x = make_hidden(gen, t, H)
    mask_frac = {"masked": 1.0, "sparse": 0.9}.get(phase, 0.25)
    ids, w = make_routes(gen, t, K, E, mask_frac=mask_frac)
    return (*caller_hidden(fmt, x), ids, w)


PHASES = (
    ("full", C), ("changed", C), ("shrunk", 100), ("shrunk", 1), ("empty", 0),
    ("masked", 64), ("sparse", C), ("changed", 129), ("empty", 0), ("restored", C),
    ("changed", 37), ("masked", C), ("shrunk", 2), ("changed", 255), ("restored", C),
    ("empty", 0), ("changed", 200), ("restored", C), ("shrunk", 5),
)


GRAPH_CASES = [
    pytest.param(f, p, id=f"{f.key}-{p}")
    for f in (StageFormat("bf16"), StageFormat("mxfp8_prequant", "e5m2"),
              StageFormat("nvfp4_prequant"), StageFormat("mxfp8", "e4m3"),
              StageFormat("mxfp8", "e5m2", "floor"), StageFormat("nvfp4"), StageFormat("safe_fp8"))
    for p in ("kernel", "torch")
    if p == "torch" or f.kind in KERNEL_FORMATS
]


@pytest.mark.contract("s3.tail-rows-emptied", "s9.replay-equals-eager")
@pytest.mark.parametrize(("fmt", "path"), GRAPH_CASES)
@pytest.mark.mega_sm107("staging-tails")
@pytest.mark.mega_sm90_mxfp4("safe-fp8-graphs", "guard-bytes")
def test_graph_replays_match_eager_and_oracle(cuda_device, fmt, path):
    dev = cuda_device
    gen = torch.Generator().manual_seed(11)
    ws = StagingWorkspace.create(C, K, H, fmt, dev, guard_bytes=64)
    eager = StagingWorkspace.create(C, K, H, fmt, dev)
    warmup(ws, id_dtypes=(torch.int64,), score_dtypes=(torch.float32,))
    warmup(eager, id_dtypes=(torch.int64,), score_dtypes=(torch.float32,))
    x0, s0, ids0, w0 = _contents(gen, fmt, C, "full")
    hidden, ids, w = x0.to(dev), ids0.to(dev), w0.to(dev)
    scales = s0.to(dev) if s0 is not None else None
    live = torch.full((1,), C, dtype=torch.int32, device=dev)

    def run():
        return stage(ws, hidden, ids, w, num_experts=E, hidden_scales=scales, live_tokens=live,
                     path=path)

    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()  # eager warm call on the capture stream
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        res = run()
    assert res.path == path
    fill_guards(ws)  # guards and regions; the check record starts clean, as after warmup
    ws.view("status").zero_()
    ws.view("row_code").zero_()
    saved = None
    for i, (phase, t) in enumerate(PHASES):
        if phase == "restored":
            xs, ss, ids_t, w_t = saved
        else:
            xs, ss, ids_t, w_t = _contents(gen, fmt, t, phase)
            if saved is None:
                saved = (xs, ss, ids_t, w_t)
        # in-place update of the captured capacity-shaped inputs; rows >= t hold garbage
        hidden.view(torch.uint8).fill_(0xFF)
        ids.copy_(torch.randint(-5, 3 * E, (C, K)))
        w.fill_(float("nan"))
        hidden[:t].copy_(xs.to(dev))
        ids[:t].copy_(ids_t.to(dev))
        w[:t].copy_(w_t.to(dev))
        if scales is not None:
            scales.view(torch.uint8).fill_(0xEE)
            scales[:t].copy_(ss.to(dev))
        live.fill_(t)
        graph.replay()
        torch.cuda.synchronize()
        exp = oracle_stage(fmt, xs, ids_t, w_t, C, hidden_scales=ss)
        assert mismatches(ws, exp, t) == [], f"replay {i} ({phase}, T={t})"
        assert guards_intact(ws), f"replay {i}"
        check_errors(ws)  # nothing recorded
        stage(eager, xs.to(dev), ids_t.to(dev), w_t.to(dev), num_experts=E,
              hidden_scales=ss.to(dev) if ss is not None else None, path=path)
        for name in ("ids", "scores"):
            assert same_bytes(ws.view(name), eager.view(name)), f"replay {i} {name}"
        assert same_bytes(ws.payload[:t], eager.payload[:t])
        if ws.scales is not None:
            assert same_bytes(ws.scales[:t], eager.scales[:t])
    assert len(PHASES) >= 17


SAFE_FP8_SHAPES = ((160, 2), (4096, 4), (7168, 8))
"""(H, K) of seed 001's safe-FP8 staging across graphs: its (4096, 4) and (7168, 8), and for its
(129, 2) the smallest H our staging takes that is no multiple of 64 (129 is refused by name)."""
SAFE_FP8_GRAPH_PHASES = (("a", "full", 64), ("b", "changed", 64), ("a", "shrunk", 5),
                         ("b", "empty", 0), ("a", "restored", 64), ("b", "changed", 33),
                         ("a", "masked", 64), ("b", "restored", 64))


@pytest.mark.contract("s3.tail-rows-emptied", "s9.replay-equals-eager")
@pytest.mark.mega_sm90_mxfp4("safe-fp8-graphs", "guard-bytes")
@pytest.mark.parametrize(("h", "k"), SAFE_FP8_SHAPES, ids=[f"{h}-{k}" for h, k in SAFE_FP8_SHAPES])
def test_safe_fp8_staging_reuses_one_workspace_across_graphs(cuda_device, h, k):
    """Seed 001: two graphs captured on one safe-FP8 staging workspace (the fused kernel), each
    over its own capacity-shaped inputs, replayed in turn through full, changed, shrunk, empty,
    masked and restored contents: after every replay the workspace holds the oracle's bytes of
    that graph's contents, no byte outside its regions was written and no error is recorded.
    H = 129 (the seed's first shape) is refused by name before anything is allocated."""
    dev = cuda_device
    with pytest.raises(ConfigError, match="hidden_size: expected a multiple of 32, got 129"):
        StagingWorkspace.create(64, 2, 129, StageFormat("safe_fp8"), dev)
    c, e = 64, 16
    fmt = StageFormat("safe_fp8")
    gen = torch.Generator().manual_seed(29 + h)
    ws = StagingWorkspace.create(c, k, h, fmt, dev, guard_bytes=64)
    warmup(ws, id_dtypes=(torch.int64,), score_dtypes=(torch.float32,))
    inputs = {g: (torch.zeros(c, h, dtype=torch.bfloat16, device=dev),
                  torch.full((c, k), -1, dtype=torch.int64, device=dev),
                  torch.zeros(c, k, dtype=torch.float32, device=dev),
                  torch.full((1,), c, dtype=torch.int32, device=dev)) for g in "ab"}
    graphs = {}
    for g, (x, ids, w, live) in inputs.items():
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            stage(ws, x, ids, w, num_experts=e, live_tokens=live, path="kernel")
        torch.cuda.current_stream().wait_stream(side)
        graphs[g] = torch.cuda.CUDAGraph()
        with capture(graphs[g]):
            res = stage(ws, x, ids, w, num_experts=e, live_tokens=live, path="kernel")
        assert res.path == "kernel"
    fill_guards(ws)
    ws.view("status").zero_()
    ws.view("row_code").zero_()
    first: dict[str, tuple] = {}
    for i, (g, phase, t) in enumerate(SAFE_FP8_GRAPH_PHASES):
        x, ids, w, live = inputs[g]
        if phase == "restored":
            xs, ids_t, w_t = first[g]
        else:
            ids_t, w_t = make_routes(gen, t, k, e, mask_frac=1.0 if phase == "masked" else 0.3)
            xs = make_hidden(gen, t, h)
            first.setdefault(g, (xs, ids_t, w_t))
        x.view(torch.int16).fill_(-1)  # rows >= t: garbage (bf16 NaN)
        ids.fill_(3 * e)
        w.fill_(float("nan"))
        x[:t].copy_(xs.to(dev))
        ids[:t].copy_(ids_t.to(dev))
        w[:t].copy_(w_t.to(dev))
        live.fill_(t)
        graphs[g].replay()
        torch.cuda.synchronize()
        exp = oracle_stage(fmt, xs, ids_t, w_t, c)
        assert mismatches(ws, exp, t) == [], f"replay {i} (graph {g}, {phase}, T={t})"
        assert guards_intact(ws), f"replay {i}"
        check_errors(ws)


@pytest.mark.contract("s2.route-error-graph")
@pytest.mark.parametrize("path", ["kernel", "torch"])
def test_graph_bad_route_marks_nan_row_and_status_word(cuda_device, path):
    dev = cuda_device
    gen = torch.Generator().manual_seed(12)
    fmt = StageFormat("bf16")
    ws = StagingWorkspace.create(C, K, H, fmt, dev)
    warmup(ws, id_dtypes=(torch.int32,), score_dtypes=(torch.bfloat16,))
    x, _, ids0, w0 = _contents(gen, fmt, C, "full")
    hidden, ids = x.to(dev), ids0.to(torch.int32).to(dev)
    w = w0.to(torch.bfloat16).to(dev)
    live = torch.full((1,), C, dtype=torch.int32, device=dev)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        stage(ws, hidden, ids, w, num_experts=E, live_tokens=live, path=path)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        stage(ws, hidden, ids, w, num_experts=E, live_tokens=live, path=path)
    graph.replay()
    check_errors(ws)  # good contents: nothing recorded
    good_ids = ids.clone()
    ids[7, 3] = E + 1  # out of range
    ids[9, 0], ids[9, 1] = 5, 5  # duplicate
    graph.replay()
    torch.cuda.synchronize()
    assert int(ws.view("status")[0]) == 1
    assert torch.isnan(ws.scores[7]).all() and torch.isnan(ws.scores[9]).all()
    assert ((ws.ids[7] >= 0) & (ws.ids[7] < E)).all()
    assert not torch.isnan(ws.scores[8]).any()
    ids.copy_(good_ids)
    graph.replay()  # a later good replay does not hide the recorded failure
    with pytest.raises(RouteError) as info:
        check_errors(ws)
    assert (info.value.row, info.value.slot, info.value.expert_id, info.value.rule) == (
        7, 3, E + 1, "id_out_of_range")
    check_errors(ws)  # cleared
    graph.replay()
    torch.cuda.synchronize()
    assert not torch.isnan(ws.scores).any()


@pytest.mark.contract("s9.warmup-before-capture")
def test_compile_during_capture_is_an_error(cuda_device):
    dev = cuda_device
    gen = torch.Generator().manual_seed(13)
    k = 17  # a top-k no other test compiles (they use K <= 16)
    ws = StagingWorkspace.create(16, k, 64, StageFormat("bf16"), dev)
    warmup(ws, id_dtypes=(torch.int32,), score_dtypes=(torch.float32,))
    ids, w = make_routes(gen, 16, k, 8, id_dtype=torch.int64, score_dtype=torch.float16,
                         device=dev)
    x = make_hidden(gen, 16, 64, device=dev)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(CompileDuringCaptureError, match="warmup"), capture(graph):
        stage(ws, x, ids, w, num_experts=8)
