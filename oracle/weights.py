"""All experts' weights in one recipe's weight format (docs/contract.md s4, s5).

``prepare_weights`` quantizes float weights (or validates and normalizes already-quantized
ones) into an ``ExpertWeights``; ``check_weights`` checks an ``ExpertWeights`` against a
``MoEConfig`` and a device. W13 ``[E, 2I, H]`` has the gate rows first, then the up rows
(the canonical layout); W2 is ``[E, H, I]``. Weight tensors are referenced, never written.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oracle.formats import (
    FI_GATE_UP_INTERLEAVE,
    FP8_BLOCK,
    dequantize_fp8_tiles,
    dequantize_mxfp4,
    dequantize_mxfp8,
    dequantize_nvfp4,
    nvfp4_global_scale,
    quantize_fp8_tiles,
    quantize_mxfp4,
    quantize_mxfp8,
    quantize_nvfp4,
)
from oracle.moe_config import MoEConfig, _bad, _scale_columns
from oracle.recipes import MXFP8_WEIGHT_ELEM, Format, get_recipe

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _payload_shape(fmt: Format, rows: int, k: int) -> tuple[int, int]:
    return (rows, k // 2) if fmt in (Format.NVFP4, Format.MXFP4) else (rows, k)



@dataclass(frozen=True)
class ExpertWeights:
    """All experts' weights in one recipe's weight format (docs/contract.md s4, s5).

    recipe: the recipe name the weights were prepared for.
    w13: payload of W13 ``[E, 2I, H]`` (gate rows ``[0, I)``, then up rows ``[I, 2I)``):
        bf16 (BF16), float8_e4m3fn (MXFP8), packed E2M1 uint8 ``[E, 2I, H/2]`` (NVFP4, MXFP4).
    w2: payload of W2 ``[E, H, I]``, formats as ``w13`` (packed: ``[E, H, I/2]``).
    w13_scale, w2_scale: ``None`` (BF16); E8M0 bytes uint8 ``[E, N, K/32]``, columns possibly
        padded to a multiple of 4 (MXFP8, MXFP4); float8_e4m3fn ``[E, N, K/16]`` (NVFP4);
        float32 ``[E, N/128, K/128]``, one per 128 x 128 tile (FP8_BLOCK; FP8_BLOCK_FI, whose
        W13 tiles are those of its rows with gate and up alternating in groups of 8, the
        payload in the canonical order: ``oracle.formats.quantize_fp8_tiles``).
    w13_global_scale, w2_global_scale: float32 ``[E]`` per-expert NVFP4 global decode scales
        (``None`` for other formats).

    Build with ``prepare_weights``; the tensors are referenced, not copied, and never written.
    """

    recipe: str
    w13: torch.Tensor
    w2: torch.Tensor
    w13_scale: torch.Tensor | None = None
    w2_scale: torch.Tensor | None = None
    w13_global_scale: torch.Tensor | None = None
    w2_global_scale: torch.Tensor | None = None

    @property
    def num_experts(self) -> int:
        return int(self.w13.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.w2.shape[1])

    @property
    def intermediate_size(self) -> int:
        return int(self.w13.shape[1]) // 2

    @property
    def device(self) -> torch.device:
        return self.w13.device

    def _dequantize(
        self, payload: torch.Tensor, scale: torch.Tensor | None, g: torch.Tensor | None, e: int,
        gate_up: bool = False,
    ) -> torch.Tensor:
        fmt = get_recipe(self.recipe).weights
        if fmt is Format.BF16:
            return payload[e].to(torch.float32)
        assert scale is not None
        if fmt is Format.MXFP8:
            return dequantize_mxfp8(payload[e], scale[e])
        if fmt is Format.MXFP4:
            return dequantize_mxfp4(payload[e], scale[e])
        if fmt is Format.FP8_BLOCK:
            return dequantize_fp8_tiles(payload[e], scale[e])
        if fmt is Format.FP8_BLOCK_FI:
            return dequantize_fp8_tiles(payload[e], scale[e],
                                        FI_GATE_UP_INTERLEAVE if gate_up else None)
        assert g is not None
        return dequantize_nvfp4(payload[e], scale[e], g[e : e + 1].view(1, 1))

    def dequantize_w13(self, expert: int) -> torch.Tensor:
        """float32 ``[2I, H]``: expert ``expert``'s W13 as the GEMM sees it (gate rows first)."""
        return self._dequantize(self.w13, self.w13_scale, self.w13_global_scale, expert,
                                gate_up=True)

    def dequantize_w2(self, expert: int) -> torch.Tensor:
        """float32 ``[H, I]``: expert ``expert``'s W2 as the GEMM sees it."""
        return self._dequantize(self.w2, self.w2_scale, self.w2_global_scale, expert)


def _prepare_matrix(
    name: str,
    w: object,
    scale: object,
    global_scale: object,
    shape: tuple[int, int, int],
    config: MoEConfig,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Quantize one float weight tensor, or validate and normalize a prequantized one."""
    fmt = config.spec.weights
    num_experts, rows, k = shape
    if not isinstance(w, torch.Tensor):
        raise _bad(name, "a torch.Tensor", type(w).__name__)
    quantized_dtypes = {
        Format.BF16: (torch.bfloat16,),
        Format.MXFP8: (torch.float8_e4m3fn,),
        Format.NVFP4: (torch.uint8, torch.float4_e2m1fn_x2),
        Format.MXFP4: (torch.uint8, torch.float4_e2m1fn_x2),
        Format.FP8_BLOCK: (torch.float8_e4m3fn,),
        Format.FP8_BLOCK_FI: (torch.float8_e4m3fn,),
    }[fmt]
    from_float = scale is None and (fmt is Format.BF16 or w.dtype in _FLOAT_DTYPES)
    if from_float:
        if w.dtype not in _FLOAT_DTYPES:
            raise _bad(
                name, f"a float tensor {list(shape)} (dtype one of {_FLOAT_DTYPES})", w.dtype
            )
        if tuple(w.shape) != shape:
            raise _bad(name, f"shape {list(shape)}", f"shape {list(w.shape)}")
        if fmt is not Format.NVFP4 and global_scale is not None:
            raise _bad(f"{name}_global_scale", f"None for {fmt} weights", "a value")
        finite = torch.isfinite(w).all(dim=2).all(dim=1)
        if not bool(finite.all()):
            e = int((~finite).nonzero()[0, 0])
            raise _bad(name, "finite weights", f"a non-finite value in expert {e}")
        if fmt is Format.BF16:
            return w.to(torch.bfloat16), None, None
        if fmt is Format.MXFP8:
            payload, s = quantize_mxfp8(w, elem=MXFP8_WEIGHT_ELEM, mode=config.mxfp8_mode)
            return payload, s, None
        if fmt is Format.MXFP4:
            packed, s = quantize_mxfp4(w, mode=config.mxfp4_mode)
            return packed, s, None
        if fmt in (Format.FP8_BLOCK, Format.FP8_BLOCK_FI):
            interleave = FI_GATE_UP_INTERLEAVE if fmt is Format.FP8_BLOCK_FI and name == "w13" \
                else None
            payload, s = quantize_fp8_tiles(w, interleave)
            return payload, s, None
        if global_scale is None:
            # Per-expert g = amax / (448 * 6) (docs/contract.md s4). An all-zero expert has no
            # amax to scale by; any g quantizes it to zero codes, so it gets g = 1.
            amax = w.abs().amax(dim=(1, 2)).to(torch.float32)
            g = nvfp4_global_scale(amax)
            g = torch.where(amax == 0, torch.ones_like(g), g)
        else:
            g = _normalize_global_scale(f"{name}_global_scale", global_scale, num_experts, w)
        packed, s = quantize_nvfp4(w, global_scale=g.view(num_experts, 1, 1))
        return packed, s, g
    # Already quantized.
    if w.dtype not in quantized_dtypes:
        raise _bad(name, f"dtype one of {quantized_dtypes} for prequantized {fmt}", w.dtype)
    if w.dtype == torch.float4_e2m1fn_x2:
        w = w.view(torch.uint8)
    payload_shape = (num_experts, *_payload_shape(fmt, rows, k))
    if tuple(w.shape) != payload_shape:
        raise _bad(name, f"shape {list(payload_shape)} ({fmt} payload)", f"shape {list(w.shape)}")
    if fmt is Format.BF16:
        raise _bad(f"{name}_scale", "None for bf16 weights", "a tensor")
    if not isinstance(scale, torch.Tensor):
        raise _bad(f"{name}_scale", "a torch.Tensor", type(scale).__name__)
    if fmt in (Format.FP8_BLOCK, Format.FP8_BLOCK_FI):
        tiles = (num_experts, rows // FP8_BLOCK, k // FP8_BLOCK)
        if scale.dtype != torch.float32 or tuple(scale.shape) != tiles:
            raise _bad(f"{name}_scale", f"float32 {list(tiles)} (one per 128 x 128 tile)",
                       f"{scale.dtype} {list(scale.shape)}")
        if scale.device != w.device:
            raise _bad(f"{name}_scale", f"device {w.device} (that of {name})", scale.device)
        if global_scale is not None:
            raise _bad(f"{name}_global_scale", f"None for {fmt} weights", "a value")
        return w, scale, None
    scale_dtypes = (
        (torch.float8_e4m3fn,) if fmt is Format.NVFP4 else (torch.uint8, torch.float8_e8m0fnu)
    )
    if scale.dtype not in scale_dtypes:
        raise _bad(f"{name}_scale", f"dtype one of {scale_dtypes} for {fmt}", scale.dtype)
    if scale.dtype == torch.float8_e8m0fnu:
        scale = scale.view(torch.uint8)
    columns = _scale_columns(fmt, k)
    if (
        scale.dim() != 3
        or tuple(scale.shape[:2]) != (num_experts, rows)
        or (scale.shape[2] not in columns)
    ):
        raise _bad(
            f"{name}_scale",
            f"shape [{num_experts}, {rows}, n] with n in {columns}",
            f"shape {list(scale.shape)}",
        )
    if scale.device != w.device:
        raise _bad(f"{name}_scale", f"device {w.device} (that of {name})", scale.device)
    if fmt is not Format.NVFP4:
        if global_scale is not None:
            raise _bad(f"{name}_global_scale", f"None for {fmt} weights", "a value")
        return w, scale, None
    if global_scale is None:
        raise _bad(f"{name}_global_scale", "the per-expert NVFP4 global scales", None)
    g = _normalize_global_scale(f"{name}_global_scale", global_scale, num_experts, w)
    return w, scale, g


def _normalize_global_scale(
    argument: str, value: object, num_experts: int, like: torch.Tensor
) -> torch.Tensor:
    """A finite positive float, or float32 tensor [E] -> float32 [E] on ``like``'s device."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        g = torch.full((num_experts,), float(value), dtype=torch.float32, device=like.device)
    elif isinstance(value, torch.Tensor):
        if value.dtype != torch.float32:
            raise _bad(argument, "dtype torch.float32", value.dtype)
        if tuple(value.shape) != (num_experts,):
            raise _bad(argument, f"shape [{num_experts}]", f"shape {list(value.shape)}")
        if value.device != like.device:
            raise _bad(argument, f"device {like.device}", value.device)
        g = value
    else:
        raise _bad(argument, "a float or a float32 tensor [E]", type(value).__name__)
    ok = torch.isfinite(g) & (g > 0)
    if not bool(ok.all()):
        e = int((~ok).nonzero()[0, 0])
        raise _bad(f"{argument}[{e}]", "a finite value > 0", float(g[e]))
    return g


def prepare_weights(
    w13: torch.Tensor,
    w2: torch.Tensor,
    config: MoEConfig,
    *,
    w13_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    w13_global_scale: torch.Tensor | float | None = None,
    w2_global_scale: torch.Tensor | float | None = None,
) -> ExpertWeights:
    """All experts' weights in the recipe's weight format (docs/contract.md s4, s5).

    From float weights (``w13 [E, 2I, H]``, ``w2 [E, H, I]``, float16/bf16/float32/float64,
    finite, canonical layout: gate rows first), with no scale given:

    - ``bf16``: rounded to bf16 (bf16 input is used as is);
    - ``mxfp8``: MXFP8 E4M3 along the last dim (K), scale mode ``config.mxfp8_mode``;
    - ``nvfp4``: NVFP4 along K with a per-expert global decode scale
      ``g[e] = amax(|W[e]|) / (448 * 6)`` (one float32 division; ``g = 1`` for an all-zero
      expert), separately for W13 and W2, unless ``w13_global_scale``/``w2_global_scale``
      is given (then that ``g``);
    - ``fp8_mxfp4``: MXFP4 along K, scale mode ``config.mxfp4_mode``;
    - ``fp8_block``: FP8 E4M3 with one float32 scale per 128 x 128 tile (docs/contract.md
      s12), on the canonical layout (gate tiles, then up tiles).

    Already-quantized weights: pass the payload (float8_e4m3fn for MXFP8; packed uint8 or
    float4_e2m1fn_x2 ``[E, N, K/2]`` for NVFP4/MXFP4) with its scales (``*_scale``: E8M0
    bytes as uint8 or float8_e8m0fnu, columns exact or padded to a multiple of 4; NVFP4:
    float8_e4m3fn ``[E, N, K/16]``) and, for NVFP4, the global scales (float or float32
    ``[E]``). W13 and W2 are handled independently. Tensors are never written.

    Raises ``ValueError`` naming the argument, expected and actual value on any mismatch.
    """
    if not isinstance(config, MoEConfig):
        raise _bad("config", "a MoEConfig", type(config).__name__)
    e, h, i = config.num_experts, config.hidden_size, config.intermediate_size
    p13, s13, g13 = _prepare_matrix("w13", w13, w13_scale, w13_global_scale, (e, 2 * i, h), config)
    p2, s2, g2 = _prepare_matrix("w2", w2, w2_scale, w2_global_scale, (e, h, i), config)
    if p2.device != p13.device:
        raise _bad("w2", f"device {p13.device} (that of w13)", p2.device)
    return ExpertWeights(config.recipe, p13, p2, s13, s2, g13, g2)


def check_weights(weights: object, config: MoEConfig, device: torch.device) -> ExpertWeights:
    if not isinstance(weights, ExpertWeights):
        raise _bad("weights", "an ExpertWeights (see prepare_weights)", type(weights).__name__)
    if weights.recipe != config.recipe:
        raise _bad("weights.recipe", f"{config.recipe!r} (config.recipe)", repr(weights.recipe))
    got = (weights.num_experts, weights.hidden_size, weights.intermediate_size)
    want = (config.num_experts, config.hidden_size, config.intermediate_size)
    if got != want:
        raise _bad("weights", f"(E, H, I) = {want} from config", f"{got}")
    if weights.device != device:
        raise _bad("weights", f"device {device} (that of hidden)", weights.device)
    return weights
