"""The row permute's host side (megamoe.layer.permute; docs/contract.md s5, s9): metadata checks
name the argument, the Torch path moves exactly rows ``i < count``, constants agree with
the kernel module, and which inputs the kernel covers."""

from __future__ import annotations

import pytest
import torch

from megamoe import ConfigError
from megamoe.layer import permute as pm
from megamoe.layer import permute_kernel as pk


def _case(n_src: int = 6, n_dst: int = 9, cols: int = 16, routes: int = 5):
    g = torch.Generator().manual_seed(3)
    src = torch.randn(n_src, cols, generator=g).bfloat16()
    dst = torch.full((n_dst, cols), 7.0, dtype=torch.bfloat16)
    si = torch.randint(0, n_src, (routes,), generator=g)
    di = torch.randperm(n_dst, generator=g)[:routes]
    return src, dst, si, di


def test_constants_agree_with_the_kernel_module() -> None:
    assert (pm.WORD_BYTES, pm.THREADS, pm.MAX_BLOCKS) == (pk.WORD_BYTES, pk.THREADS,
                                                          pk.MAX_BLOCKS)


@pytest.mark.parametrize("n", [0, 1, 3, 5, 99, -2])
def test_torch_path_moves_rows_below_count_and_nothing_else(n: int) -> None:
    src, dst, si, di = _case()
    want = dst.clone()
    live = max(0, min(n, si.numel()))
    for i in range(live):
        want[di[i]] = src[si[i]]
    src_before = src.clone()
    assert pm.permute_rows(src, dst, si, di, torch.tensor([n])) == pm.PATH_TORCH
    assert torch.equal(dst.view(torch.int16), want.view(torch.int16))
    assert torch.equal(src.view(torch.int16), src_before.view(torch.int16))


@pytest.mark.parametrize(("argument", "edit"), [
    ("src", lambda s, d, si, di, n: (s[0], d, si, di, n)),
    ("dst.dtype", lambda s, d, si, di, n: (s, d.float(), si, di, n)),
    ("dst.shape", lambda s, d, si, di, n: (s, d[:, :8], si, di, n)),
    ("src.stride", lambda s, d, si, di, n: (s.t().contiguous().t(), d, si, di, n)),
    ("src_index", lambda s, d, si, di, n: (s, d, si.float(), di, n)),
    ("dst_index", lambda s, d, si, di, n: (s, d, si, di[:-1], n)),
    ("count", lambda s, d, si, di, n: (s, d, si, di, torch.tensor([1, 2]))),
    ("count", lambda s, d, si, di, n: (s, d, si, di, 3)),
])
def test_bad_metadata_names_the_argument_and_writes_nothing(argument: str, edit) -> None:  # type: ignore[no-untyped-def]
    src, dst, si, di = _case()
    before = dst.clone()
    args = edit(src, dst, si, di, torch.tensor([2]))
    with pytest.raises(ConfigError, match=f"^{argument}"):
        pm.permute_rows(*args)
    assert torch.equal(dst.view(torch.int16), before.view(torch.int16))


def test_kernel_plan_sends_cpu_tensors_to_the_torch_path() -> None:
    src, dst, _, _ = _case(cols=16)
    assert "CUDA" in pm.kernel_plan(src, dst)
