"""The expert FFN of every recipe, and the single-rank forward (CONTRACTS.md s1, s4-s6).

Per active slot (token t, slot k, expert e), exactly as CONTRACTS.md s5:

1. ``h1 = deq(A1[t]) @ deq(W13[e]).T`` in float32; W13 ``[2I, H]`` has the gate rows first,
   then the up rows (the canonical layout);
2. optional clamp ``c``: ``gate = min(gate, c)``, ``up = clamp(up, -c, c)``;
3. ``act = up * gate * sigmoid(gate)`` in float32 (two float32 multiplies, left to right);
4. early weighting (default): ``act *= score`` (one float32 multiply);
5. ``A2 = quantize(act)`` in the recipe's A2 format, ``h2 = deq(A2) @ deq(W2[e]).T``;
6. late weighting: ``h2 *= score``;
7. ``term[t, k] = bf16(h2)``: one rounding per slot.

The output of a token is the masked combine of its terms (``oracle.combine``, s6).

How the oracle makes every slot's term depend on that slot alone (CONTRACTS.md s7, s8: the
same row gives the same bits whatever the other rows, their order, or the world size):

- every quantizer and dequantizer is row-local and bit-exact (``oracle.formats``);
- the GEMMs run per expert on the gathered rows of that expert, but always as matmul calls
  of one fixed shape, ``ROW_TILE`` rows (zero-padded): a BLAS picks its kernel by shape, and
  with a varying row count MKL computes the same row with different summation orders
  (observed with MKL 2024.2 on AVX2 for 1-3, 5-7 and 9-11 rows), so a row's bits would
  depend on how many other rows share its expert. With one shape, no shape-dependent choice is left. Float32 matmuls are forced
  to full IEEE float32 precision (no TF32 / bf16 shortcuts) whatever the global setting;
- ``sigmoid`` is ``1 / (1 + exp(-x))`` evaluated in float64 and rounded once to float32, so
  it does not depend on which (vector or scalar) code path a tensor position happens to take.
  (``torch.sigmoid`` on CPU does: its vector and scalar loops differ in the last bit.)

Everything is pure PyTorch and runs on any device; the GPU keeps the same semantics, but its
GEMM summation order (cuBLAS) differs from the CPU's, so CPU and GPU oracles agree within
rounding, not bitwise.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from oracle.combine import masked_combine
from oracle.formats import (
    MX_BLOCK,
    NVFP4_BLOCK,
    SCALE_COLUMN_MULTIPLE,
    dequantize_mxfp4,
    dequantize_mxfp8,
    dequantize_nvfp4,
    nvfp4_global_scale,
    quantize_mxfp4,
    quantize_mxfp8,
    quantize_nvfp4,
    safe_fp8_dequantize,
    safe_fp8_quantize,
)
from oracle.recipes import MXFP8_WEIGHT_ELEM, Format, Recipe, get_recipe
from oracle.routing import MASKED_ID, find_route_violations, stage_routes

ROW_TILE = 64
"""Rows per GEMM call: every oracle matmul has exactly this many rows (zero-padded)."""

MXFP8_ELEMS = ("e4m3", "e5m2")
MX_SCALE_MODES = ("rceil", "floor")
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_ID_DTYPES = (torch.int32, torch.int64)


def _bad(argument: str, expected: object, actual: object) -> ValueError:
    return ValueError(f"{argument}: expected {expected}, got {actual}")


def _check_positive_int(argument: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(argument, "an int >= 1", repr(value))
    return value


def _check_real(argument: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(argument, "a real number", repr(value))
    return float(value)


# ----------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class MoEConfig:
    """One MoE layer's settings, validated once at construction (CONTRACTS.md s0, s5).

    recipe: a key of ``oracle.recipes.RECIPES`` (``bf16``, ``mxfp8``, ``nvfp4``, ``fp8_mxfp4``).
    num_experts (E), top_k (K), hidden_size (H), intermediate_size (I): positive ints; H and I
        must be multiples of the recipe's block sizes (``Recipe.hidden_multiple`` and
        ``Recipe.intermediate_multiple``: 32 for MX formats, 16 for NVFP4).
    clamp: ``None`` (no clamp) or a finite ``c >= 0``, rounded once to float32.
    late_weighting: ``False`` (default): ``act *= score`` before A2; ``True``: ``h2 *= score``.
    mxfp8_elem: the MXFP8 activation element (``"e4m3"`` or ``"e5m2"``; A1 and A2 alike).
    mxfp8_mode: MX scale mode for MXFP8 activations and weights (``"rceil"`` or ``"floor"``).
    mxfp4_mode: MX scale mode for MXFP4 weights (``"rceil"`` or ``"floor"``).
    nvfp4_input_scale: NVFP4 global decode scale ``g`` of A1 (finite, > 0).
    nvfp4_a2_scale: NVFP4 global decode scale ``g`` of A2 (finite, > 0).

    Bad values raise ``ValueError`` naming the field, the expected and the actual value.
    """

    recipe: str
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    clamp: float | None = None
    late_weighting: bool = False
    mxfp8_elem: str = "e4m3"
    mxfp8_mode: str = "rceil"
    mxfp4_mode: str = "rceil"
    nvfp4_input_scale: float = 1.0
    nvfp4_a2_scale: float = 1.0

    def __post_init__(self) -> None:
        recipe = get_recipe(self.recipe)
        for name in ("num_experts", "top_k", "hidden_size", "intermediate_size"):
            _check_positive_int(name, getattr(self, name))
        if self.hidden_size % recipe.hidden_multiple:
            raise _bad(
                "hidden_size",
                f"a multiple of {recipe.hidden_multiple} (recipe {recipe.name} block size)",
                self.hidden_size,
            )
        if self.intermediate_size % recipe.intermediate_multiple:
            raise _bad(
                "intermediate_size",
                f"a multiple of {recipe.intermediate_multiple} (recipe {recipe.name} block size)",
                self.intermediate_size,
            )
        if self.clamp is not None:
            c = _check_real("clamp", self.clamp)
            if not (math.isfinite(c) and c >= 0):
                raise _bad("clamp", "None or a finite number >= 0", repr(self.clamp))
            object.__setattr__(self, "clamp", c)
        if not isinstance(self.late_weighting, bool):
            raise _bad("late_weighting", "a bool", repr(self.late_weighting))
        if self.mxfp8_elem not in MXFP8_ELEMS:
            raise _bad("mxfp8_elem", f"one of {MXFP8_ELEMS}", repr(self.mxfp8_elem))
        for name in ("mxfp8_mode", "mxfp4_mode"):
            if getattr(self, name) not in MX_SCALE_MODES:
                raise _bad(name, f"one of {MX_SCALE_MODES}", repr(getattr(self, name)))
        for name in ("nvfp4_input_scale", "nvfp4_a2_scale"):
            g = _check_real(name, getattr(self, name))
            if not (math.isfinite(g) and g > 0):
                raise _bad(name, "a finite number > 0", repr(getattr(self, name)))
            object.__setattr__(self, name, g)

    @property
    def spec(self) -> Recipe:
        """The recipe table entry (``oracle.recipes.RECIPES[self.recipe]``)."""
        return get_recipe(self.recipe)


# ----------------------------------------------------------------------------- activations


@dataclass(frozen=True)
class ActivationRows:
    """An activation operand (A1 or A2) in its recipe's wire format, one row per token/slot.

    fmt: the format (``oracle.recipes.Format``).
    payload: ``[n, K]`` bf16 (BF16), float8 (MXFP8, SAFE_FP8), or packed uint8 ``[n, K/2]``
        (NVFP4).
    scale: ``None`` (BF16), E8M0 bytes uint8 ``[n, K/32]`` (MXFP8), float8_e4m3fn
        ``[n, K/16]`` (NVFP4), or the float32 dequant scale ``d [n]`` (SAFE_FP8).
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
        """float32 ``[n, K]``: the operand's values as the GEMM sees them (CONTRACTS.md s4)."""
        if self.fmt is Format.BF16:
            return self.payload.to(torch.float32)
        if self.fmt is Format.MXFP8:
            return dequantize_mxfp8(self.payload, self.scale)
        if self.fmt is Format.NVFP4:
            return dequantize_nvfp4(self.payload, self.scale, self.global_scale)
        if self.fmt is Format.SAFE_FP8:
            return safe_fp8_dequantize(self.payload, self.scale)
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
    raise AssertionError(f"no activation format {fmt}")  # the recipe table has none


def quantize_a1(hidden: torch.Tensor, config: MoEConfig) -> ActivationRows:
    """A1 of ``hidden`` (bf16 ``[T, H]``) in the recipe's A1 format (CONTRACTS.md s3, s5).

    Row-local: each row's bytes depend on that row alone. bf16 hidden is used as given; the
    NVFP4 A1 uses ``g = config.nvfp4_input_scale``. Safe FP8 needs finite rows (ValueError).
    """
    return _quantize_activation(hidden, config.spec.a1, config.nvfp4_input_scale, config)


def quantize_a2(act: torch.Tensor, config: MoEConfig) -> ActivationRows:
    """A2 of the float32 SwiGLU output ``act [n, I]`` in the recipe's A2 format (CONTRACTS.md s5).

    The NVFP4 A2 uses ``g = config.nvfp4_a2_scale``.
    """
    return _quantize_activation(act, config.spec.a2, config.nvfp4_a2_scale, config)


# ----------------------------------------------------------------------------- weights


def _payload_shape(fmt: Format, rows: int, k: int) -> tuple[int, int]:
    return (rows, k // 2) if fmt in (Format.NVFP4, Format.MXFP4) else (rows, k)


def _scale_columns(fmt: Format, k: int) -> tuple[int, ...]:
    """Accepted scale column counts: exact, or (E8M0 bytes) padded to a multiple of 4."""
    if fmt is Format.NVFP4:
        return (k // NVFP4_BLOCK,)
    n = k // MX_BLOCK
    return tuple(sorted({n, -(-n // SCALE_COLUMN_MULTIPLE) * SCALE_COLUMN_MULTIPLE}))


@dataclass(frozen=True)
class ExpertWeights:
    """All experts' weights in one recipe's weight format (CONTRACTS.md s4, s5).

    recipe: the recipe name the weights were prepared for.
    w13: payload of W13 ``[E, 2I, H]`` (gate rows ``[0, I)``, then up rows ``[I, 2I)``):
        bf16 (BF16), float8_e4m3fn (MXFP8), packed E2M1 uint8 ``[E, 2I, H/2]`` (NVFP4, MXFP4).
    w2: payload of W2 ``[E, H, I]``, formats as ``w13`` (packed: ``[E, H, I/2]``).
    w13_scale, w2_scale: ``None`` (BF16); E8M0 bytes uint8 ``[E, N, K/32]``, columns possibly
        padded to a multiple of 4 (MXFP8, MXFP4); float8_e4m3fn ``[E, N, K/16]`` (NVFP4).
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
        self, payload: torch.Tensor, scale: torch.Tensor | None, g: torch.Tensor | None, e: int
    ) -> torch.Tensor:
        fmt = get_recipe(self.recipe).weights
        if fmt is Format.BF16:
            return payload[e].to(torch.float32)
        assert scale is not None
        if fmt is Format.MXFP8:
            return dequantize_mxfp8(payload[e], scale[e])
        if fmt is Format.MXFP4:
            return dequantize_mxfp4(payload[e], scale[e])
        assert g is not None
        return dequantize_nvfp4(payload[e], scale[e], g[e : e + 1].view(1, 1))

    def dequantize_w13(self, expert: int) -> torch.Tensor:
        """float32 ``[2I, H]``: expert ``expert``'s W13 as the GEMM sees it (gate rows first)."""
        return self._dequantize(self.w13, self.w13_scale, self.w13_global_scale, expert)

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
        if global_scale is None:
            # Per-expert g = amax / (448 * 6) (CONTRACTS.md s4). An all-zero expert has no
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
    """All experts' weights in the recipe's weight format (CONTRACTS.md s4, s5).

    From float weights (``w13 [E, 2I, H]``, ``w2 [E, H, I]``, float16/bf16/float32/float64,
    finite, canonical layout: gate rows first), with no scale given:

    - ``bf16``: rounded to bf16 (bf16 input is used as is);
    - ``mxfp8``: MXFP8 E4M3 along the last dim (K), scale mode ``config.mxfp8_mode``;
    - ``nvfp4``: NVFP4 along K with a per-expert global decode scale
      ``g[e] = amax(|W[e]|) / (448 * 6)`` (one float32 division; ``g = 1`` for an all-zero
      expert), separately for W13 and W2, unless ``w13_global_scale``/``w2_global_scale``
      is given (then that ``g``);
    - ``fp8_mxfp4``: MXFP4 along K, scale mode ``config.mxfp4_mode``.

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


# ----------------------------------------------------------------------------- the FFN


@contextlib.contextmanager
def _ieee_fp32_matmul() -> Iterator[None]:
    """Full IEEE float32 matmuls (no TF32 / bf16 shortcuts), whatever the global setting."""
    backends = [torch.backends.cuda.matmul, torch.backends.mkldnn.matmul]
    saved = [b.fp32_precision for b in backends]
    try:
        for b in backends:
            b.fp32_precision = "ieee"
        yield
    finally:
        for b, old in zip(backends, saved, strict=True):
            b.fp32_precision = old


def rows_matmul(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float32 ``a [n, K] @ w[N, K].T -> [n, N]``, row i depending on ``a[i]`` and ``w`` only.

    Every matmul call has exactly ``ROW_TILE`` rows (the last tile zero-padded), so the BLAS
    sees one shape and computes every row with one summation order, wherever the row sits
    and however many rows there are (see the module docstring).
    """
    n, k = a.shape
    padded = -(-n // ROW_TILE) * ROW_TILE
    a_pad = torch.zeros((padded, k), dtype=torch.float32, device=a.device)
    a_pad[:n] = a
    out = torch.empty((padded, w.shape[0]), dtype=torch.float32, device=a.device)
    wt = w.t()
    with _ieee_fp32_matmul():
        for start in range(0, padded, ROW_TILE):
            torch.mm(a_pad[start : start + ROW_TILE], wt, out=out[start : start + ROW_TILE])
    return out[:n]


def sigmoid_f32(x: torch.Tensor) -> torch.Tensor:
    """float32 ``1 / (1 + exp(-x))``: evaluated in float64, rounded once to float32.

    Position-independent (see the module docstring); +Inf -> 1, -Inf -> 0, NaN -> NaN.
    """
    x64 = x.to(torch.float64)
    return (1.0 / (1.0 + torch.exp(-x64))).to(torch.float32)


def split_gate_up(h1: torch.Tensor, intermediate_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up) columns of ``h1 [n, 2I]``: the canonical W13 layout has gate rows first."""
    return h1[:, :intermediate_size], h1[:, intermediate_size:]


def swiglu(gate: torch.Tensor, up: torch.Tensor, clamp: float | None) -> torch.Tensor:
    """Steps 2-3 of CONTRACTS.md s5 in float32: optional clamp, ``up * gate * sigmoid(gate)``."""
    if clamp is not None:
        c = torch.tensor(clamp, dtype=torch.float32, device=gate.device)
        gate = torch.minimum(gate, c)
        up = torch.maximum(torch.minimum(up, c), -c)
    return up * gate * sigmoid_f32(gate)


def round_terms(h2: torch.Tensor) -> torch.Tensor:
    """Step 7 of CONTRACTS.md s5: ``term = bf16(h2)``, one rounding per slot."""
    return h2.to(torch.bfloat16)


def expert_block(
    a1: torch.Tensor,
    scores: torch.Tensor,
    expert: int,
    weights: ExpertWeights,
    config: MoEConfig,
) -> torch.Tensor:
    """Terms of ``n`` slots routed to one expert (CONTRACTS.md s5 steps 1-7).

    a1: float32 ``[n, H]``, the dequantized A1 rows of the slots' tokens; scores: float32
    ``[n]``, the slots' staged scores. Returns bf16 ``[n, H]``. Row i depends on ``a1[i]``,
    ``scores[i]`` and the expert's weights only.
    """
    h1 = rows_matmul(a1, weights.dequantize_w13(expert))
    gate, up = split_gate_up(h1, config.intermediate_size)
    act = swiglu(gate, up, config.clamp)
    score = scores.to(torch.float32).unsqueeze(1)
    if not config.late_weighting:
        act = act * score
    try:
        a2 = quantize_a2(act, config)
    except ValueError as err:
        raise ValueError(f"A2 (SwiGLU output) of expert {expert}: {err}") from err
    h2 = rows_matmul(a2.dequantize(), weights.dequantize_w2(expert))
    if config.late_weighting:
        h2 = h2 * score
    return round_terms(h2)


# ----------------------------------------------------------------------------- inputs


def prequantized_a1(
    payload: torch.Tensor, scale: torch.Tensor, config: MoEConfig
) -> ActivationRows:
    """Hidden rows already in the recipe's A1 wire format (CONTRACTS.md s1), as oracle input.

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
    """Metadata check of one rank's hidden rows (CONTRACTS.md s1): bf16 ``[T, H]``, or an
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


def check_route_metadata(
    prefix: str,
    hidden: torch.Tensor | ActivationRows,
    ids: object,
    scores: object,
    config: MoEConfig,
) -> None:
    """Metadata check of one rank's routes against its hidden rows (CONTRACTS.md s1)."""
    t, device = num_hidden_rows(hidden), hidden_device(hidden)
    for name, value, dtypes in (
        ("topk_ids", ids, _ID_DTYPES),
        ("topk_weights", scores, _FLOAT_DTYPES),
    ):
        argument = f"{prefix}{name}"
        if not isinstance(value, torch.Tensor):
            raise _bad(argument, "a torch.Tensor", type(value).__name__)
        if value.dtype not in dtypes:
            raise _bad(argument, f"dtype one of {dtypes}", value.dtype)
        if tuple(value.shape) != (t, config.top_k):
            raise _bad(
                argument, f"shape [{t}, {config.top_k}] ([T, K])", f"shape {list(value.shape)}"
            )
        if value.device != device:
            raise _bad(argument, f"device {device} (that of hidden)", value.device)


def raise_on_route_violations(prefix: str, ids: torch.Tensor, scores: torch.Tensor, e: int) -> None:
    violations = find_route_violations(ids, scores, e)
    if violations:
        v = violations[0]
        raise ValueError(
            f"{prefix}topk_ids/topk_weights: bad route at row {v.row}, slot {v.slot}: "
            f"id={v.expert_id}, score={v.score!r} breaks rule {v.rule!r} "
            f"({len(violations)} violation(s) in total; CONTRACTS.md s2)"
        )


def stage_a1(
    argument: str,
    hidden: torch.Tensor | ActivationRows,
    staged_ids: torch.Tensor,
    config: MoEConfig,
) -> ActivationRows:
    """A1 rows of one rank (CONTRACTS.md s3), row i for token i.

    Prequantized rows are used as given. bf16 rows with no active slot are zeroed before
    quantizing (they never matter); ``staged_ids`` is int32/int64 ``[T', K]`` with
    ``T' >= T`` and the result has ``T'`` rows. Raises ``ValueError`` for a non-finite row
    that has an active slot when the A1 format is safe FP8 (CONTRACTS.md s4).
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


# ----------------------------------------------------------------------------- public forward


def expert_terms(
    hidden: torch.Tensor,
    topk_ids: torch.Tensor,
    scores: torch.Tensor,
    weights: ExpertWeights,
    config: MoEConfig,
) -> torch.Tensor:
    """Every slot's term, bf16 ``[T, K, H]`` (CONTRACTS.md s5); masked slots are ``+0.0``.

    hidden: bf16 ``[T, H]`` (or prequantized A1, ``prequantized_a1``); topk_ids: int32/int64
    ``[T, K]`` (-1 = masked); scores: float32
    ``[T, K]``, used on active slots only (staged scores, ``oracle.routing.stage_routes``).
    The routes must pass CONTRACTS.md s2 (else ``ValueError`` naming the first violation).

    Vectorized per expert: the active slots are sorted by (expert, row, slot), each expert's
    A1 rows are gathered and computed by ``expert_block``, and the terms scattered back.
    """
    if not isinstance(config, MoEConfig):
        raise _bad("config", "a MoEConfig", type(config).__name__)
    hidden = check_hidden("hidden", hidden, config)
    check_route_metadata("", hidden, topk_ids, scores, config)
    if scores.dtype != torch.float32:
        raise _bad("scores", "dtype torch.float32 (staged scores)", scores.dtype)
    device = hidden_device(hidden)
    check_weights(weights, config, device)
    raise_on_route_violations("", topk_ids, scores, config.num_experts)
    t, k = topk_ids.shape
    a1 = stage_a1("hidden", hidden, topk_ids, config).dequantize()
    flat = topk_ids.reshape(-1).to(torch.int64)
    active = (flat != MASKED_ID).nonzero().reshape(-1)  # flat slot index t*K + k, ascending
    experts, perm = torch.sort(flat[active], stable=True)
    slots = active[perm]  # sorted by (expert, row, slot)
    counts = torch.bincount(experts, minlength=config.num_experts).tolist()
    rows = torch.div(slots, k, rounding_mode="floor")
    flat_scores = scores.reshape(-1)
    terms = torch.zeros((t * k, config.hidden_size), dtype=torch.bfloat16, device=device)
    start = 0
    for e, count in enumerate(counts):
        if count:
            sl = slots[start : start + count]
            terms[sl] = expert_block(
                a1[rows[start : start + count]], flat_scores[sl], e, weights, config
            )
        start += count
    return terms.view(t, k, config.hidden_size)


def moe_forward(
    hidden: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    weights: ExpertWeights,
    config: MoEConfig,
) -> torch.Tensor:
    """One rank holding every expert: ``out [T, H]`` bf16 (CONTRACTS.md s1-s6).

    hidden: bf16 ``[T, H]``, or for ``mxfp8``/``nvfp4`` A1 rows already in the wire format
    (``prequantized_a1``); topk_ids: int32/int64 ``[T, K]``; topk_weights: float16/bf16/
    float32/float64 ``[T, K]``, any strides. Masked slots (id -1) may carry any score (NaN,
    +-Inf). Routes are checked (s2, on the caller's dtype) and staged (s3: scores to float32,
    masked scores to +0.0); each slot's term is computed (s5, ``expert_terms``) and the terms
    combined (s6, ``oracle.combine.masked_combine``). A row with no active slot is exactly
    ``+0.0``. Inputs are never written. Bad input raises ``ValueError``.
    """
    if not isinstance(config, MoEConfig):
        raise _bad("config", "a MoEConfig", type(config).__name__)
    hidden = check_hidden("hidden", hidden, config)
    check_route_metadata("", hidden, topk_ids, topk_weights, config)
    check_weights(weights, config, hidden_device(hidden))
    raise_on_route_violations("", topk_ids, topk_weights, config.num_experts)
    t = num_hidden_rows(hidden)
    ids, scores = stage_routes(topk_ids, topk_weights, max(t, 1))
    ids, scores = ids[:t], scores[:t]
    return masked_combine(expert_terms(hidden, ids, scores, weights, config), ids)
