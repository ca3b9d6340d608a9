"""Properties of the fused staging kernels on the GPU (docs/contract.md s2-s3, s9).

Hypothesis drives arbitrary routes, including invalid ones (ids anywhere in
``[-3, E + 3]``, NaN/Inf scores on any slot), through the kernel path and the Torch path:

- with checks on, both paths write identical bytes to every route region (ids, scores,
  row codes, bad id/score, status word) and raise the same ``RouteError``, which names the
  oracle's first violation;
- with checks off, both paths write identical bytes and raise nothing;
- a device live count (the graph-replay form) stages exactly what an eager call on the
  first ``live`` rows stages.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from megamoe import RouteError
from megamoe.staging import StageFormat, StagingWorkspace, stage, warmup
from oracle.routing import SCORE_DTYPES, find_route_violations
from tests.single.test_staging_helpers import (
    LAYOUTS,
    layout,
    make_hidden,
    make_routes,
    same_bytes,
)

pytestmark = pytest.mark.gpu

ROUTE_REGIONS = ("ids", "scores", "row_code", "bad_id", "bad_score", "status")
ID_DTYPES = (torch.int32, torch.int64)


def _wild_routes(seed, t, k, e, id_dtype, score_dtype, bad_frac):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(-1, e, (t, k), generator=gen)
    wild = torch.rand(t, k, generator=gen) < bad_frac
    ids = torch.where(wild, torch.randint(-3, e + 4, (t, k), generator=gen), ids)
    scores = torch.randn(t, k, generator=gen, dtype=torch.float64)
    junk = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=torch.float64)
    nonfinite = torch.rand(t, k, generator=gen) < bad_frac
    scores = torch.where(nonfinite, junk[torch.randint(0, 3, (t, k), generator=gen)], scores)
    return ids.to(id_dtype), scores.to(score_dtype)


def _run(path, dev, k, e, ids, w, x, live=None, check=True):
    ws = StagingWorkspace.create(64, k, 64, StageFormat("bf16"), dev)
    warmup(ws, id_dtypes=(ids.dtype,), score_dtypes=(w.dtype,))
    ws.check_routes = check  # the setting recorded at warmup (parsing: host tests)
    err = None
    try:
        stage(ws, x, ids, w, num_experts=e, path=path, live_tokens=live)
    except RouteError as exc:
        err = exc
    assert ws.last_path == path
    return ws, err


@pytest.mark.contract("s1.route-dtypes-and-layouts", "s2.active-slot-rules", "s3.fused-equals-fallback")
@given(
    t=st.integers(0, 64),
    k=st.integers(1, 16),
    e=st.integers(1, 40),
    id_dtype=st.sampled_from(ID_DTYPES),
    score_dtype=st.sampled_from(SCORE_DTYPES),
    id_layout=st.sampled_from(LAYOUTS),
    score_layout=st.sampled_from(LAYOUTS),
    bad_frac=st.sampled_from((0.0, 0.01, 0.1, 0.5)),
    check=st.booleans(),
    seed=st.integers(0, 2**31),
)
@pytest.mark.mega_sm107("masked-routes")
@pytest.mark.mega_sm90_mxfp4("fused-equals-fallback")
def test_kernel_and_torch_path_agree_on_any_routes(
    cuda_device, t, k, e, id_dtype, score_dtype, id_layout, score_layout, bad_frac, check, seed,
):
    ids, w = _wild_routes(seed, t, k, e, id_dtype, score_dtype, bad_frac)
    ids = layout(ids.to(cuda_device), id_layout)
    w = layout(w.to(cuda_device), score_layout)
    x = make_hidden(torch.Generator().manual_seed(seed), t, 64, device=cuda_device)
    (ws_k, err_k), (ws_t, err_t) = (_run(p, cuda_device, k, e, ids, w, x, check=check)
                                    for p in ("kernel", "torch"))
    for name in ROUTE_REGIONS:
        assert same_bytes(ws_k.view(name), ws_t.view(name)), name
    violations = find_route_violations(ids.cpu(), w.cpu(), e)
    if not check or not violations:
        assert err_k is None and err_t is None
        return
    first = violations[0]
    for err in (err_k, err_t):
        assert err is not None
        assert (err.row, err.slot, err.expert_id, err.rule) == (
            first.row, first.slot, first.expert_id, first.rule)


@given(
    live=st.integers(-2, 70),
    k=st.integers(1, 16),
    id_dtype=st.sampled_from(ID_DTYPES),
    score_dtype=st.sampled_from(SCORE_DTYPES),
    seed=st.integers(0, 2**31),
)
@pytest.mark.mega_sm107("sparse-decode")
def test_device_live_count_equals_eager_prefix(cuda_device, live, k, id_dtype, score_dtype,
                                               seed):
    e = 32
    gen = torch.Generator().manual_seed(seed)
    ids, w = make_routes(gen, 64, k, e, id_dtype=id_dtype, score_dtype=score_dtype,
                         device=cuda_device)
    x = make_hidden(gen, 64, 64, device=cuda_device)
    live_t = torch.full((1,), live, dtype=torch.int32, device=cuda_device)
    ws_dev, err_dev = _run("kernel", cuda_device, k, e, ids, w, x, live=live_t)
    n = max(0, min(live, 64))
    ws_ref, err_ref = _run("kernel", cuda_device, k, e, ids[:n], w[:n], x[:n])
    assert err_dev is None and err_ref is None
    for name in ("ids", "scores"):
        assert same_bytes(ws_dev.view(name), ws_ref.view(name)), name
    assert same_bytes(ws_dev.payload[:n], ws_ref.payload[:n])
