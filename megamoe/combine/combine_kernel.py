"""Masked BF16 combine kernel (CuTe DSL, sm_90a; docs/contract.md s6).

``out[t, h] = bf16(sum over k = 0..K-1 with ids[t, k] != -1 of float32(terms[t, k, h]))`` for
``t < T``: one thread per (row, chunk of ``VEC`` columns), a float32 accumulator starting at
``+0.0``, active slots added one IEEE float32 addition at a time in slot order, one
round-to-nearest-even conversion to bf16 at the end. A masked slot's term is never loaded
(so NaN/Inf behind it cannot leak, and the bytes read scale with the live routes); a row
without an active slot is exactly ``+0.0``. Rows ``>= T`` of ``out`` are never touched.

Two compiled variants per id dtype: ``VEC = 8`` (16-byte loads and stores; needs 16-byte
aligned bases, ``H % 8 == 0`` and row/slot strides that are multiples of 8 elements) and
``VEC = 1`` (any element strides, last dim contiguous).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64
from cutlass.cute.runtime import make_ptr

from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs

THREADS = 256
VEC_WIDE = 8
ID_TYPES = {"int32": Int32, "int64": Int64}


def _make(vec: int, id_type):
    """The kernel and launcher for ``vec`` columns per thread and one id dtype."""

    @cute.kernel
    def _combine_kernel(
        terms_ptr: cute.Pointer, st0: Int32, st1: Int32,
        ids_ptr: cute.Pointer, si0: Int32, si1: Int32,
        out_ptr: cute.Pointer, so0: Int32,
        T: Int32, K: Int32, H: Int32,
    ):
        await_inputs()
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        nchunks = H // vec
        st0a = cute.assume(st0, divby=vec)
        st1a = cute.assume(st1, divby=vec)
        so0a = cute.assume(so0, divby=vec)
        m_terms = cute.make_tensor(
            terms_ptr,
            cute.make_layout((T, K, nchunks, vec), stride=(st0a, st1a, vec, 1)),
        )
        m_ids = cute.make_tensor(ids_ptr, cute.make_layout((T, K), stride=(si0, si1)))
        m_out = cute.make_tensor(
            out_ptr, cute.make_layout((T, nchunks, vec), stride=(so0a, vec, 1))
        )
        idx = bidx * THREADS + tidx
        if idx < T * nchunks:
            t = idx // nchunks
            c = idx - t * nchunks
            acc = cute.make_rmem_tensor(cute.make_layout(vec), Float32)
            acc.fill(0.0)
            for k in range(K):
                if m_ids[t, k] != id_type(-1):
                    term = m_terms[t, k, c, None].load().to(Float32)
                    acc.store(acc.load() + term)
            m_out[t, c, None].store(acc.load().to(BFloat16))

    def combine_launch(
        terms_ptr: cute.Pointer, st0: Int32, st1: Int32,
        ids_ptr: cute.Pointer, si0: Int32, si1: Int32,
        out_ptr: cute.Pointer, so0: Int32,
        T: Int32, K: Int32, H: Int32, blocks: Int32,
        stream: cuda.CUstream,
    ):
        _combine_kernel(
            terms_ptr, st0, st1, ids_ptr, si0, si1, out_ptr, so0, T, K, H
        ).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream, use_pdl=PDL)

    # A distinct host symbol per variant (the DSL names the compiled function after it).
    combine_launch.__name__ = f"masked_combine_v{vec}_{id_type.__name__.lower()}"
    combine_launch.__qualname__ = combine_launch.__name__
    return cute.jit(combine_launch)


_FAKE_ADDR = 1 << 20


def _ptr(dtype, align: int, addr: int = _FAKE_ADDR):
    return make_ptr(dtype, addr, cute.AddressSpace.gmem, assumed_align=align)


def pointer_align(vec: int) -> int:
    """The alignment (bytes) the ``vec`` variant assumes for its bf16 pointers."""
    return (BFloat16.width // 8) * vec


def compile_combine(vec: int, id_dtype: str):
    """``cute.compile`` the combine for ``vec`` in (8, 1) and an id dtype (``int32``/``int64``).
    Pointers, strides and sizes are runtime arguments."""
    it = ID_TYPES[id_dtype]
    i0 = Int32(0)
    return cute.compile(
        _make(vec, it),
        _ptr(BFloat16, pointer_align(vec)), i0, i0,
        _ptr(it, it.width // 8), i0, i0,
        _ptr(BFloat16, pointer_align(vec)), i0,
        i0, i0, i0, i0,
        cuda.CUstream(0),
    )


@register_kernel("masked_combine_v8_i32")
def build_masked_combine_v8_i32():
    return compile_combine(VEC_WIDE, "int32")


@register_kernel("masked_combine_v1_i64")
def build_masked_combine_v1_i64():
    return compile_combine(1, "int64")
