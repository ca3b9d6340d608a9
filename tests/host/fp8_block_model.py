"""Pieces of the independent numpy models of the FP8 block recipes (docs/contract.md s12),
shared by ``test_fp8_block_recipe.py`` and ``test_fp8_block_fi_recipe.py``: float32
operations one at a time, E4M3 casts by ml_dtypes, and one expert's case in which every GEMM
has one non-zero product per output element."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

F32 = np.float32


def block_d(amax: np.ndarray) -> np.ndarray:
    """s12: d = max(float32(amax / 448), 1e-30)."""
    return np.maximum(np.asarray(amax, F32) / F32(448.0), F32(1e-30))


def e4m3(q: np.ndarray) -> np.ndarray:
    """float32 values of the E4M3 cast (RNE). Quotients stay below 464, the midpoint past 448,
    where rounding to nearest and the contract's saturating cast agree."""
    assert np.all(np.abs(q) < 464)
    return q.astype(ml_dtypes.float8_e4m3fn).astype(F32)


def rows_roundtrip(x: np.ndarray, block: int = 128, reciprocal: bool = False) -> np.ndarray:
    """FP8 rows in blocks of ``block`` columns, quantized and dequantized:
    ``f32(e4m3(x / d)) * d``, or ``f32(e4m3(x * f32(1 / d))) * d`` with ``reciprocal``."""
    b = x.reshape(x.shape[0], -1, block).astype(F32)
    d = block_d(np.abs(b).max(axis=2))[..., None]
    q = b * (F32(1.0) / d) if reciprocal else b / d
    return (e4m3(q) * d).reshape(x.shape)


def tile_roundtrip(w: np.ndarray) -> np.ndarray:
    """One weight tile (any rows of one 128 x 128 scale), quantized and dequantized with its
    single scale."""
    d = block_d(np.abs(w).max())
    return e4m3(w.astype(F32) / d) * d


def sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(F32)


def one_expert_case(seed: int, h: int, inter: int, up_scale: float):  # type: ignore[no-untyped-def]
    """One expert: gate row j reads hidden column 0 (values about 4), up row j hidden column 1
    (about ``up_scale``), W2 diagonal; values spread over several binades so that every
    quantizer rounds. Returns ``(w13 [2I, H], w2 [H, I], x [3, H] bf16-exact, scores [3])``."""
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal(inter) * 4).astype(F32)
    u = (rng.standard_normal(inter) * up_scale).astype(F32)
    v = (rng.standard_normal(h) * 2).astype(F32)
    w13 = np.zeros((2 * inter, h), F32)
    w13[np.arange(inter), 0] = g
    w13[inter + np.arange(inter), 1] = u
    w2 = np.zeros((h, inter), F32)
    w2[np.arange(h), np.arange(h)] = v
    x = np.zeros((3, h), F32)
    x[:, 0] = [1.5, -0.75, 3.0]
    x[:, 1] = [2.0, 0.6, -1.25]
    x[:, 2:] = rng.standard_normal((3, h - 2)).astype(F32) * 0.01  # only moves A1's scales
    x = torch.from_numpy(x).bfloat16().float().numpy()  # bf16-exact hidden rows
    return w13, w2, x, np.array([0.7, 0.35, 1.9], F32)
