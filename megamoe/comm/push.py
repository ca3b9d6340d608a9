"""Host launcher of the peer push (``megamoe.comm.push_kernel``; docs/contract.md s7, s9).

``push_rows(src, ws, region, dest, src_index, dst_index, count)`` writes
``ws.peer(region, dest[i])[dst_index[i]] = src[src_index[i]]`` for ``i < count[0]`` and
nothing else. ``src`` is a local 2-D tensor whose rows have the region's row bytes; the
indices, destinations and count are int64 device tensors (the EP glue makes them, in range
for ``i < count``; entries past the count are never read).

The CuTe DSL kernel runs on a Hopper GPU (16-byte variant when every row base is 16-byte
aligned, else the word variant: rows of whole 4-byte words); anything else takes the
PyTorch path (CPU worlds; it reads ``count`` on the host, so it is not capturable), which
writes through the peer views with one indexed copy per destination rank. Compiled once per
(variant, device); compiling during capture is an error (docs/contract.md s9).
"""

from __future__ import annotations

import torch

from megamoe.comm.symmetric_workspace import SymmetricWorkspace
from megamoe.compile_once import compile_once
from megamoe.errors import ConfigError
from megamoe.experts import api as _gemm
from megamoe.validation import I32_LIMIT

PATH_KERNEL = "kernel"
PATH_TORCH = "torch"
THREADS = 128  # = push_kernel.THREADS
MAX_BLOCKS = 2048  # = push_kernel.MAX_BLOCKS
_CACHE: dict[tuple[int, str], object] = {}


def _compiled(unit: int, device: torch.device):
    def build():  # type: ignore[no-untyped-def]
        from megamoe.comm.push_kernel import compile_push

        return compile_push(unit)

    return compile_once(_CACHE, (unit, str(device)), build,
                        what=f"peer push (unit {unit}) on {device}",
                        warmup="megamoe.comm.push.warmup(device)", device=device)


def warmup(device: torch.device | str) -> None:
    """Compile both variants for ``device`` where the kernel runs (a Hopper GPU)."""
    device = torch.device(device)
    if _gemm.kernel_supported(device):
        for unit in (4, 1):
            _compiled(unit, device)


def _check(src, ws: SymmetricWorkspace, region: str, dest, src_index, dst_index, count) -> None:
    if region not in ws.specs:
        raise ConfigError("region", f"one of {sorted(ws.specs)}", repr(region))
    dst = ws.local(region)
    for name, t in (("src", src), ("dest", dest), ("src_index", src_index),
                    ("dst_index", dst_index), ("count", count)):
        if not isinstance(t, torch.Tensor):
            raise ConfigError(name, "a torch.Tensor", type(t).__name__)
        if t.device != dst.device:
            raise ConfigError(f"{name}.device", str(dst.device), str(t.device))
    if src.dim() != 2 or (src.shape[1] > 1 and src.stride(1) != 1):
        raise ConfigError("src", "a 2-D tensor with a contiguous last dim",
                          f"{tuple(src.shape)} strides {src.stride()}")
    if src.dtype != dst.dtype:
        raise ConfigError("src.dtype", f"{dst.dtype} (region {region!r})", src.dtype)
    row_bytes = src.shape[1] * src.element_size()
    dst_bytes = dst[0].numel() * dst.element_size()
    if row_bytes != dst_bytes or row_bytes % 4:
        raise ConfigError("src.shape[1]", f"rows of {dst_bytes} bytes (region {region!r}; "
                          "whole 4-byte words)", f"{row_bytes} bytes")
    for name, t in (("dest", dest), ("src_index", src_index), ("dst_index", dst_index)):
        if t.dtype != torch.int64 or t.dim() != 1 or not t.is_contiguous():
            raise ConfigError(name, "a contiguous int64 [R]", f"{t.dtype} {tuple(t.shape)}")
        if t.numel() != dest.numel():
            raise ConfigError(name, f"{dest.numel()} entries (dest's)", t.numel())
    if count.dtype != torch.int64 or count.numel() != 1:
        raise ConfigError("count", "an int64 [1]", f"{count.dtype} {tuple(count.shape)}")


def kernel_plan(src: torch.Tensor, ws: SymmetricWorkspace, region: str) -> int:
    """The kernel's unit (4: 16-byte vectors, 1: words), or 0 for the PyTorch path."""
    if not _gemm.kernel_supported(src.device):
        return 0
    es = src.element_size()
    dst = ws.local(region)
    if src.shape[0] * src.stride(0) * es // 4 > I32_LIMIT or src.data_ptr() % 4:
        return 0
    strides = (src.stride(0) * es, dst.stride(0) * dst.element_size())
    row_bytes = src.shape[1] * es
    if (src.data_ptr() % 16 == 0 and ws.peer_alignment(region) % 16 == 0
            and all(s % 16 == 0 for s in (*strides, row_bytes))):
        return 4
    return 1 if all(s % 4 == 0 for s in strides) else 0


def push_rows(src: torch.Tensor, ws: SymmetricWorkspace, region: str, dest: torch.Tensor,
              src_index: torch.Tensor, dst_index: torch.Tensor, count: torch.Tensor) -> str:
    """Push rows to peers (module docstring); returns the path taken."""
    _check(src, ws, region, dest, src_index, dst_index, count)
    unit = kernel_plan(src, ws, region)
    if unit == 0:
        n = max(0, min(int(count[0]), dest.numel()))
        d, si, di = dest[:n], src_index[:n], dst_index[:n]
        for r in range(ws.world.size):
            mine = d == r
            if bool(mine.any()):
                ws.peer(region, r)[di[mine]] = src[si[mine]]
        return PATH_TORCH
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    compiled = _compiled(unit, src.device)
    rows = dest.numel()
    if rows == 0:
        return PATH_KERNEL
    gm = cute.AddressSpace.gmem
    es = src.element_size()
    dst = ws.local(region)

    def p(t: torch.Tensor, ty, align: int):
        return make_ptr(ty, t.data_ptr(), gm, assumed_align=align)

    i64 = cutlass.Int64
    table = ws.table(region)
    stream = cuda.CUstream(torch.cuda.current_stream(src.device).cuda_stream)
    compiled(
        p(src, cutlass.Int32, 4 * unit), src.shape[0], src.stride(0) * es // 4,
        src.shape[1] * es // (4 * unit), p(table, i64, 8), table.numel(),
        dst.stride(0) * dst.element_size() // 4, p(dest, i64, 8), p(src_index, i64, 8),
        p(dst_index, i64, 8), p(count, i64, 8), rows, min(rows, MAX_BLOCKS), stream,
    )
    return PATH_KERNEL
