"""The expert FFN of every recipe: one expert's terms from its A1 rows (docs/contract.md s5).

Per active slot (token t, slot k, expert e), exactly as docs/contract.md s5:

1. ``h1 = deq(A1[t]) @ deq(W13[e]).T`` in float32; W13 ``[2I, H]`` has the gate rows first,
   then the up rows (the canonical layout);
2. optional clamp ``c``: ``gate = min(gate, c)``, ``up = clamp(up, -c, c)``;
3. ``act = up * gate * sigmoid(gate)`` in float32 (two float32 multiplies, left to right);
4. early weighting (default): ``act *= score`` (one float32 multiply);
5. ``A2 = quantize(act)`` in the recipe's A2 format, ``h2 = deq(A2) @ deq(W2[e]).T``;
6. late weighting: ``h2 *= score``;
7. ``term[t, k] = bf16(h2)``: one rounding per slot (combine weighting, s12: no score yet;
   the combine multiplies it).

How the oracle makes every slot's term depend on that slot alone (docs/contract.md s7, s8: the
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
from collections.abc import Iterator

import torch

from oracle.activations import quantize_a2
from oracle.moe_config import MoEConfig
from oracle.weights import ExpertWeights

ROW_TILE = 64
"""Rows per GEMM call: every oracle matmul has exactly this many rows (zero-padded)."""


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
    """Steps 2-3 of docs/contract.md s5 in float32: optional clamp, ``up * gate * sigmoid(gate)``."""
    if clamp is not None:
        c = torch.tensor(clamp, dtype=torch.float32, device=gate.device)
        gate = torch.minimum(gate, c)
        up = torch.maximum(torch.minimum(up, c), -c)
    return up * gate * sigmoid_f32(gate)


def round_terms(h2: torch.Tensor) -> torch.Tensor:
    """Step 7 of docs/contract.md s5: ``term = bf16(h2)``, one rounding per slot."""
    return h2.to(torch.bfloat16)


def expert_block(
    a1: torch.Tensor,
    scores: torch.Tensor,
    expert: int,
    weights: ExpertWeights,
    config: MoEConfig,
) -> torch.Tensor:
    """Terms of ``n`` slots routed to one expert (docs/contract.md s5 steps 1-7).

    a1: float32 ``[n, H]``, the dequantized A1 rows of the slots' tokens; scores: float32
    ``[n]``, the slots' staged scores. Returns bf16 ``[n, H]``. Row i depends on ``a1[i]``,
    ``scores[i]`` and the expert's weights only.
    """
    h1 = rows_matmul(a1, weights.dequantize_w13(expert))
    gate, up = split_gate_up(h1, config.intermediate_size)
    act = swiglu(gate, up, config.clamp)
    score = scores.to(torch.float32).unsqueeze(1)
    if not (config.late_weighting or config.combine_weighting):
        act = act * score
    try:
        a2 = quantize_a2(act, config)
    except ValueError as err:
        raise ValueError(f"A2 (SwiGLU output) of expert {expert}: {err}") from err
    h2 = rows_matmul(a2.dequantize(), weights.dequantize_w2(expert))
    if config.late_weighting:
        h2 = h2 * score
    return round_terms(h2)
