"""Masked combine launcher (docs/contract.md s6, s8, s9).

``masked_combine(terms, ids, out, num_tokens)`` writes, for every row ``t < T``
(``T = num_tokens``)::

    out[t] = bf16( sum over k = 0..K-1 with ids[t, k] != -1 of float32(terms[t, k]) )

float32 accumulation from ``+0.0`` in slot order, one round-to-nearest-even at the end. Terms
behind masked slots are never read (NaN/Inf there cannot leak); a row without an active slot
is exactly ``+0.0``. Rows ``>= T`` of ``out`` and every caller input are never written.

Shapes: ``terms`` bf16 ``[R, K, H]`` (e.g. the capacity-shaped workspace, ``R >= T``, last
dim contiguous), ``ids`` int32/int64 ``[R', K]`` (``R' >= T``; the staged ids), ``out`` bf16
``[R'', H]`` (``R'' >= T``, last dim contiguous). The CuTe DSL kernel runs on CUDA tensors
(16-byte vector variant when aligned, else the scalar variant); the Torch path covers the
rest. ``combine_plan`` says which one a call takes.
"""

from __future__ import annotations

import torch

from megamoe.compile_once import compile_once
from megamoe.errors import ConfigError
from megamoe.validation import I32_LIMIT, ID_DTYPES

MASKED_ID = -1
VEC_WIDE = 8  # = megamoe.combine.combine_kernel.VEC_WIDE (checked by tests)
THREADS = 256  # = megamoe.combine.combine_kernel.THREADS
PLAN_WIDE = "kernel_v8"
PLAN_SCALAR = "kernel_v1"
PLAN_TORCH = "torch"


def _check(terms, ids, out, num_tokens) -> None:
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
        raise ConfigError("num_tokens", "an int >= 0", repr(num_tokens))
    for name, t in (("terms", terms), ("ids", ids), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise ConfigError(name, "a torch.Tensor", type(t).__name__)
    if terms.dtype != torch.bfloat16:
        raise ConfigError("terms", "dtype torch.bfloat16", terms.dtype)
    if terms.dim() != 3:
        raise ConfigError("terms", "a 3-D tensor [R, K, H]", f"shape {tuple(terms.shape)}")
    _rows, top_k, hidden = terms.shape
    if top_k < 1 or hidden < 1:
        raise ConfigError("terms", "K >= 1 and H >= 1", f"shape {tuple(terms.shape)}")
    if ids.dtype not in ID_DTYPES:
        raise ConfigError("ids", "dtype int32 or int64", ids.dtype)
    if ids.dim() != 2 or ids.shape[1] != top_k:
        raise ConfigError("ids", f"a 2-D tensor [R, K={top_k}]", f"shape {tuple(ids.shape)}")
    if out.dtype != torch.bfloat16:
        raise ConfigError("out", "dtype torch.bfloat16", out.dtype)
    if out.dim() != 2 or out.shape[1] != hidden:
        raise ConfigError("out", f"a 2-D tensor [R, H={hidden}]", f"shape {tuple(out.shape)}")
    for name, t in (("terms", terms), ("ids", ids), ("out", out)):
        if t.shape[0] < num_tokens:
            raise ConfigError(name, f"at least num_tokens={num_tokens} rows",
                              f"{t.shape[0]} rows")
        if t.device != terms.device:
            raise ConfigError(name, f"device {terms.device} (that of terms)", t.device)
    if hidden > 1 and (terms.stride(2) != 1 or out.stride(1) != 1):
        raise ConfigError("terms/out", "a contiguous last dim (stride 1)",
                          f"strides {terms.stride()} and {out.stride()}")


def _fits(t: torch.Tensor) -> bool:
    return all(s >= 0 for s in t.stride()) and sum(
        (d - 1) * s for d, s in zip(t.shape, t.stride(), strict=True)
    ) <= I32_LIMIT


def combine_plan(terms, ids, out, num_tokens) -> str:
    """``kernel_v8``, ``kernel_v1`` or ``torch``: the path ``masked_combine`` takes."""
    _check(terms, ids, out, num_tokens)
    if terms.device.type != "cuda":
        return PLAN_TORCH
    hidden = terms.shape[2]
    if not (_fits(terms) and _fits(ids) and _fits(out)) or num_tokens * hidden > I32_LIMIT:
        return PLAN_TORCH
    wide = (
        hidden % VEC_WIDE == 0
        and terms.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
        and terms.stride(0) % VEC_WIDE == 0 and terms.stride(1) % VEC_WIDE == 0
        and out.stride(0) % VEC_WIDE == 0
    )
    return PLAN_WIDE if wide else PLAN_SCALAR


_COMPILED: dict[tuple[int, str, int], object] = {}


def _compiled(vec: int, id_dtype: torch.dtype, device: torch.device):
    name = "int32" if id_dtype == torch.int32 else "int64"
    key = (vec, name, device.index if device.index is not None else 0)

    def build():  # type: ignore[no-untyped-def]
        from megamoe.combine import combine_kernel

        return combine_kernel.compile_combine(vec, name)

    return compile_once(_COMPILED, key, build, what=f"masked_combine kernel (vec={vec}, ids "
                        f"{name})", warmup="megamoe.combine.warmup(...)")


def warmup(device: torch.device | str, id_dtypes=ID_DTYPES) -> None:
    """Compile both variants for ``device`` and each id dtype (before graph capture)."""
    device = torch.device(device)
    for dt in id_dtypes:
        for vec in (VEC_WIDE, 1):
            _compiled(vec, dt, device)


def _torch_combine(terms, ids, out, num_tokens) -> None:
    if num_tokens == 0:
        return
    live = terms[:num_tokens]
    active = (ids[:num_tokens] != MASKED_ID).unsqueeze(-1)
    acc = torch.zeros((num_tokens, terms.shape[2]), dtype=torch.float32, device=terms.device)
    for k in range(terms.shape[1]):
        # A masked slot leaves acc as it is (never acc + 0: NaN * 0 and -0.0 would leak).
        acc = torch.where(active[:, k], acc + live[:, k].to(torch.float32), acc)
    out[:num_tokens].copy_(acc.to(torch.bfloat16))


def masked_combine(terms, ids, out, num_tokens: int, *, use_kernel: bool | None = None):
    """Write the masked combine of rows ``[0, num_tokens)`` into ``out`` and return ``out``
    (module docstring; docs/contract.md s6). ``use_kernel=False`` forces the Torch path, True
    insists on the kernel (ConfigError when the case needs the Torch path)."""
    plan = combine_plan(terms, ids, out, num_tokens)
    if use_kernel is True and plan == PLAN_TORCH:
        raise ConfigError("use_kernel", "a case the combine kernel covers",
                          "a Torch-path case (CPU tensors or strides beyond int32)")
    if use_kernel is False or plan == PLAN_TORCH:
        _torch_combine(terms, ids, out, num_tokens)
        return out
    if num_tokens == 0:
        return out
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    vec = VEC_WIDE if plan == PLAN_WIDE else 1
    compiled = _compiled(vec, ids.dtype, terms.device)
    hidden = terms.shape[2]
    id_t = cutlass.Int32 if ids.dtype == torch.int32 else cutlass.Int64
    align = 2 * vec  # = combine_kernel.pointer_align(vec)
    gm = cute.AddressSpace.gmem
    work = num_tokens * (hidden // vec)
    blocks = (work + THREADS - 1) // THREADS
    stream = cuda.CUstream(torch.cuda.current_stream(terms.device).cuda_stream)
    compiled(
        make_ptr(cutlass.BFloat16, terms.data_ptr(), gm, assumed_align=align),
        terms.stride(0), terms.stride(1),
        make_ptr(id_t, ids.data_ptr(), gm, assumed_align=id_t.width // 8),
        ids.stride(0), ids.stride(1),
        make_ptr(cutlass.BFloat16, out.data_ptr(), gm, assumed_align=align),
        out.stride(0),
        num_tokens, terms.shape[1], hidden, blocks,
        stream,
    )
    return out
