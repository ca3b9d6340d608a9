"""Activation operands in their wire formats, and the hidden rows a rank takes (docs/contract.md s1, s3-s5).

A1 (the quantized hidden rows, s3) and A2 (the quantized SwiGLU output, s5) are
``ActivationRows`` in the recipe's activation format. Every quantizer and dequantizer is
row-local and bit-exact (``oracle.formats``), so each row's bytes depend on that row alone
(s7, s8). ``hidden`` is bf16 ``[T, H]`` or, for ``mxfp8``/``nvfp4``, A1 rows already in the
wire format (``prequantized_a1``); ``check_hidden`` validates either and ``stage_a1`` turns
it into one rank's A1 rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oracle.formats import (
    FI_A2_BLOCK,
    dequantize_fp8_rows,
    dequantize_mxfp8,
    dequantize_nvfp4,
    quantize_fp8_rows,
    quantize_mxfp8,
    quantize_nvfp4,
    safe_fp8_dequantize,
    safe_fp8_quantize,
)
from oracle.moe_config import MoEConfig, _bad, _scale_columns
from oracle.recipes import Format
from oracle.routing import MASKED_ID


@dataclass(frozen=True)
class ActivationRows:
    """An activation operand (A1 or A2) in its recipe's wire format, one row per token/slot.

    fmt: the format (``oracle.recipes.Format``).
    payload: ``[n, K]`` bf16 (BF16), float8 (MXFP8, SAFE_FP8), or packed uint8 ``[n, K/2]``
        (NVFP4).
    scale: ``None`` (BF16), E8M0 bytes uint8 ``[n, K/32]`` (MXFP8), float8_e4m3fn
        ``[n, K/16]`` (NVFP4), the float32 dequant scale ``d [n]`` (SAFE_FP8), or float32
        block scales ``[n, K/128]`` (FP8_BLOCK) or ``[n, K/64]`` (FP8_BLOCK_FI, A2 only).
    global_scale: NVFP4 global decode scale ``g`` (1.0 for other formats).
    """

    fmt: Format
    payload: torch.Tensor
    scale: torch.Tensor | None
    global_scale: float = 1.0

    @property
    def num_rows(self) -> int:
        return int(self.payload.shape[0])

    def rows(self, index: torch.Tensor) -> ActivationRows:
        """The rows ``index`` (int64 [m]) of this operand: a gather of payload and scale rows."""
        scale = None if self.scale is None else self.scale.index_select(0, index)
        return ActivationRows(
            self.fmt, self.payload.index_select(0, index), scale, self.global_scale
        )

    def dequantize(self) -> torch.Tensor:
        """float32 ``[n, K]``: the operand's values as the GEMM sees them (docs/contract.md s4)."""
        if self.fmt is Format.BF16:
            return self.payload.to(torch.float32)
        if self.fmt is Format.MXFP8:
            return dequantize_mxfp8(self.payload, self.scale)
        if self.fmt is Format.NVFP4:
            return dequantize_nvfp4(self.payload, self.scale, self.global_scale)
        if self.fmt is Format.SAFE_FP8:
            return safe_fp8_dequantize(self.payload, self.scale)
        if self.fmt is Format.FP8_BLOCK:
            return dequantize_fp8_rows(self.payload, self.scale)
        if self.fmt is Format.FP8_BLOCK_FI:
            return dequantize_fp8_rows(self.payload, self.scale, FI_A2_BLOCK)
        raise AssertionError(f"no activation format {self.fmt}")  # the recipe table has none


def _quantize_activation(
    x: torch.Tensor, fmt: Format, g: float, config: MoEConfig
) -> ActivationRows:
    if fmt is Format.BF16:
        return ActivationRows(fmt, x.to(torch.bfloat16), None)
    if fmt is Format.MXFP8:
        payload, scale = quantize_mxfp8(x, elem=config.mxfp8_elem, mode=config.mxfp8_mode)
        return ActivationRows(fmt, payload, scale)
    if fmt is Format.NVFP4:
        packed, scale = quantize_nvfp4(x, global_scale=g)
        return ActivationRows(fmt, packed, scale, g)
    if fmt is Format.SAFE_FP8:
        payload, d = safe_fp8_quantize(x)
        return ActivationRows(fmt, payload, d)
    if fmt is Format.FP8_BLOCK:
        payload, d = quantize_fp8_rows(x)
        return ActivationRows(fmt, payload, d)
    if fmt is Format.FP8_BLOCK_FI:
        payload, d = quantize_fp8_rows(x, FI_A2_BLOCK, reciprocal=True)
        return ActivationRows(fmt, payload, d)
    raise AssertionError(f"no activation format {fmt}")  # the recipe table has none


def quantize_a1(hidden: torch.Tensor, config: MoEConfig) -> ActivationRows:
    """A1 of ``hidden`` (bf16 ``[T, H]``) in the recipe's A1 format (docs/contract.md s3, s5).

    Row-local: each row's bytes depend on that row alone. bf16 hidden is used as given; the
    NVFP4 A1 uses ``g = config.nvfp4_input_scale``. Safe FP8 needs finite rows (ValueError).
    """
    return _quantize_activation(hidden, config.spec.a1, config.nvfp4_input_scale, config)


def quantize_a2(act: torch.Tensor, config: MoEConfig) -> ActivationRows:
    """A2 of the float32 SwiGLU output ``act [n, I]`` in the recipe's A2 format (docs/contract.md s5).

    The NVFP4 A2 uses ``g = config.nvfp4_a2_scale``.
    """
    return _quantize_activation(act, config.spec.a2, config.nvfp4_a2_scale, config)


def prequantized_a1(
    payload: torch.Tensor, scale: torch.Tensor, config: MoEConfig
) -> ActivationRows:
    """Hidden rows already in the recipe's A1 wire format (docs/contract.md s1), as oracle input.

    mxfp8: ``payload`` float8 ``[T, H]`` of ``config.mxfp8_elem``, ``scale`` E8M0 bytes
    ``[T, H/32]`` (uint8 or float8_e8m0fnu; columns may be padded to a multiple of 4).
    nvfp4: ``payload`` packed uint8 or float4_e2m1fn_x2 ``[T, H/2]``, ``scale`` float8_e4m3fn
    ``[T, H/16]``; decoded with ``g = config.nvfp4_input_scale``. Other recipes take bf16
    hidden rows. The tensors are referenced, not copied. Pass the result as ``hidden``.
    """
    fmt = config.spec.a1
    if fmt not in (Format.MXFP8, Format.NVFP4):
        raise _bad("config.recipe", "mxfp8 or nvfp4 (recipes with a prequantized A1)", fmt)
    for name, value in (("payload", payload), ("scale", scale)):
        if not isinstance(value, torch.Tensor) or value.dim() != 2:
            raise _bad(name, "a 2-D torch.Tensor", getattr(value, "shape", type(value).__name__))
    t, h = payload.shape[0], config.hidden_size
    if fmt is Format.MXFP8:
        want = torch.float8_e4m3fn if config.mxfp8_elem == "e4m3" else torch.float8_e5m2
        if payload.dtype != want:
            raise _bad("payload", f"dtype {want} (config.mxfp8_elem)", payload.dtype)
        payload_shape = (t, h)
        scale_dtypes: tuple[torch.dtype, ...] = (torch.uint8, torch.float8_e8m0fnu)
    else:
        if payload.dtype == torch.float4_e2m1fn_x2:
            payload = payload.view(torch.uint8)
        if payload.dtype != torch.uint8:
            raise _bad("payload", "dtype torch.uint8 or torch.float4_e2m1fn_x2", payload.dtype)
        payload_shape = (t, h // 2)
        scale_dtypes = (torch.float8_e4m3fn,)
    if tuple(payload.shape) != payload_shape:
        raise _bad("payload", f"shape {list(payload_shape)}", f"shape {list(payload.shape)}")
    if scale.dtype not in scale_dtypes:
        raise _bad("scale", f"dtype one of {scale_dtypes}", scale.dtype)
    if scale.dtype == torch.float8_e8m0fnu:
        scale = scale.view(torch.uint8)
    columns = _scale_columns(fmt, h)
    if scale.shape[0] != t or scale.shape[1] not in columns:
        raise _bad("scale", f"shape [{t}, n] with n in {columns}", f"shape {list(scale.shape)}")
    if scale.device != payload.device:
        raise _bad("scale", f"device {payload.device} (that of payload)", scale.device)
    g = config.nvfp4_input_scale if fmt is Format.NVFP4 else 1.0
    return ActivationRows(fmt, payload, scale, g)


def num_hidden_rows(hidden: torch.Tensor | ActivationRows) -> int:
    return hidden.num_rows if isinstance(hidden, ActivationRows) else int(hidden.shape[0])


def hidden_device(hidden: torch.Tensor | ActivationRows) -> torch.device:
    return hidden.payload.device if isinstance(hidden, ActivationRows) else hidden.device


def check_hidden(argument: str, hidden: object, config: MoEConfig) -> torch.Tensor | ActivationRows:
    """Metadata check of one rank's hidden rows (docs/contract.md s1): bf16 ``[T, H]``, or an
    ``ActivationRows`` in the recipe's A1 format (see ``prequantized_a1``)."""
    if isinstance(hidden, ActivationRows):
        if hidden.fmt is not config.spec.a1 or hidden.fmt not in (Format.MXFP8, Format.NVFP4):
            raise _bad(argument, f"A1 rows in format {config.spec.a1}", hidden.fmt)
        if hidden.fmt is Format.NVFP4 and hidden.global_scale != config.nvfp4_input_scale:
            raise _bad(
                f"{argument}.global_scale",
                f"config.nvfp4_input_scale = {config.nvfp4_input_scale}",
                hidden.global_scale,
            )
        # Validate payload and scale (the dataclass itself checks nothing) and normalize them.
        return prequantized_a1(hidden.payload, hidden.scale, config)
    if not isinstance(hidden, torch.Tensor):
        raise _bad(argument, "a torch.Tensor or ActivationRows", type(hidden).__name__)
    if hidden.dtype != torch.bfloat16:
        raise _bad(argument, "dtype torch.bfloat16", hidden.dtype)
    if hidden.dim() != 2 or hidden.shape[1] != config.hidden_size:
        raise _bad(argument, f"shape [T, {config.hidden_size}] (H)", f"shape {list(hidden.shape)}")
    return hidden


def stage_a1(
    argument: str,
    hidden: torch.Tensor | ActivationRows,
    staged_ids: torch.Tensor,
    config: MoEConfig,
) -> ActivationRows:
    """A1 rows of one rank (docs/contract.md s3), row i for token i.

    Prequantized rows are used as given. bf16 rows with no active slot are zeroed before
    quantizing (they never matter); ``staged_ids`` is int32/int64 ``[T', K]`` with
    ``T' >= T`` and the result has ``T'`` rows. Raises ``ValueError`` for a non-finite row
    that has an active slot when the A1 format is safe FP8 (docs/contract.md s4).
    """
    if isinstance(hidden, ActivationRows):
        return hidden
    t = hidden.shape[0]
    used = (staged_ids[:t] != MASKED_ID).any(dim=1)
    rows = torch.zeros(
        (staged_ids.shape[0], hidden.shape[1]), dtype=hidden.dtype, device=hidden.device
    )
    rows[:t] = torch.where(
        used.unsqueeze(1), hidden, torch.zeros((), dtype=hidden.dtype, device=hidden.device)
    )
    if config.spec.a1 is Format.SAFE_FP8:
        finite = torch.isfinite(rows).all(dim=1)
        if not bool(finite.all()):
            row = int((~finite).nonzero()[0, 0])
            raise _bad(
                f"{argument}[{row}]",
                f"finite values in a row with an active slot (recipe {config.recipe}, safe FP8)",
                "a non-finite value",
            )
    return quantize_a1(rows, config)
