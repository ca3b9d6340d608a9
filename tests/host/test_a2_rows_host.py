"""The A2 quantizers walk a route list (``rows``, ``count``; megamoe.layer.a2_quant): every
listed row inside ``[0, M_cap)`` below ``count`` is quantized, nothing else is touched; and
``segment_rows`` lists exactly the live rows of a grouped layout (docs/contract.md s5 step 5)."""

from __future__ import annotations

import pytest
import torch

from megamoe.errors import ConfigError
from megamoe.experts import api
from megamoe.layer import a2_quant
from megamoe.layer.a2_quant import quantize_a2_safe_fp8, quantize_a2_torch, segment_rows
from tests.bitwise import same_bits


@pytest.mark.parametrize("counts", [[3, 0, 5], [0, 0], [130, 1, 0, 127], [-4, 2]])
def test_segment_rows_lists_the_live_rows_in_order(counts) -> None:
    cnt = torch.tensor(counts, dtype=torch.int32)
    seg = api.padded_segment_starts(cnt)
    m_cap = int(seg[-1]) + 128
    rows, count = segment_rows(seg, cnt, m_cap)
    starts = seg.tolist()
    want = torch.tensor([r for e, c in enumerate(counts)
                         for r in range(starts[e], min(starts[e] + max(c, 0), starts[e + 1]))],
                        dtype=torch.int64)
    assert rows.dtype == torch.int64 and tuple(rows.shape) == (m_cap,)
    assert count.dtype == torch.int64 and int(count[0]) == want.numel()
    assert torch.equal(rows[: want.numel()], want)
    assert bool((rows[want.numel():] == 0).all())


def _case(seed: int):
    g = torch.Generator().manual_seed(seed)
    act = torch.randn(12, 64, generator=g) * torch.logspace(-20, 20, 12).view(-1, 1)
    return act, torch.full((12, 64), 5.0, dtype=torch.bfloat16), torch.full((12, 4), 5.0)


def test_only_listed_rows_below_count_inside_m_cap_are_written() -> None:
    act, a2, d = _case(1)
    rows = torch.tensor([7, -1, 2, 12, 9, 4], dtype=torch.int64)
    count = torch.tensor([5], dtype=torch.int64)  # row 4 is past the count
    assert quantize_a2_safe_fp8(act, a2, d, rows, count) == a2_quant.PATH_TORCH
    done = torch.tensor([2, 7, 9])
    ref_a2, ref_d = _case(1)[1:]
    quantize_a2_torch(act, ref_a2, ref_d, done, torch.tensor([3]))
    assert same_bits(a2, ref_a2) and same_bits(d, ref_d)
    untouched = torch.ones(12, dtype=torch.bool)
    untouched[done] = False
    assert bool((a2[untouched] == 5.0).all()) and bool((d[untouched] == 5.0).all())
    assert not bool((a2[done] == 5.0).all())


def test_a_count_past_the_list_is_clamped_and_a_negative_count_writes_nothing() -> None:
    act, a2, d = _case(2)
    rows = torch.tensor([3, 1], dtype=torch.int64)
    quantize_a2_safe_fp8(act, a2, d, rows, torch.tensor([50], dtype=torch.int64))
    assert not bool((a2[[1, 3]] == 5.0).all()) and bool((a2[[0, 2, 4]] == 5.0).all())
    act, a2, d = _case(2)
    quantize_a2_safe_fp8(act, a2, d, rows, torch.tensor([-3], dtype=torch.int64))
    assert bool((a2 == 5.0).all()) and bool((d == 5.0).all())


@pytest.mark.parametrize(("name", "rows", "count"), [
    ("rows", torch.zeros(3, dtype=torch.int32), torch.zeros(1, dtype=torch.int64)),
    ("count", torch.zeros(3, dtype=torch.int64), torch.zeros(1, dtype=torch.int32)),
    ("count", torch.zeros(3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)),
])
def test_bad_route_list_metadata_names_the_argument(name, rows, count) -> None:
    act, a2, d = _case(3)
    before = a2.clone()
    with pytest.raises(ConfigError, match=name):
        quantize_a2_safe_fp8(act, a2, d, rows, count)
    assert same_bits(a2, before)
