"""Metadata checks for staging (docs/contract.md s1-s2).

Run on the host before any launch; they read only shapes, dtypes, devices and
Python scalars, never tensor values, and never synchronize. Failure raises
``megamoe.ConfigError`` naming the argument, the expected and the actual value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from megamoe.errors import ConfigError
from megamoe.workspace import StagingWorkspace

I32_LIMIT = 2**31 - 1
"""The largest element (or word) offset the kernels index with an Int32: every launcher checks
its tensors' spans against it before launching (a larger one would wrap silently)."""

ID_DTYPES = (torch.int32, torch.int64)
SCORE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
MX_PAYLOAD_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
MX_SCALE_DTYPES = (torch.uint8, torch.float8_e8m0fnu)
NVFP4_PAYLOAD_DTYPES = (torch.uint8, torch.float4_e2m1fn_x2)


@dataclass(frozen=True)
class StageMeta:
    """What the metadata checks established about one staging call."""

    num_tokens: int
    top_k: int
    num_experts: int
    id_dtype: torch.dtype
    score_dtype: torch.dtype
    graph_live: bool  # the live count comes from a device tensor (graph replay)


def _tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ConfigError(name, "a torch.Tensor", type(x).__name__)
    return x


def _shape(name: str, x: torch.Tensor, expected: tuple) -> None:
    if tuple(x.shape) != tuple(expected):
        raise ConfigError(name, f"shape {tuple(expected)}", f"shape {tuple(x.shape)}")


def _device(name: str, x: torch.Tensor, device: torch.device) -> None:
    if x.device != device:
        raise ConfigError(name, f"device {device} (the workspace's)", f"device {x.device}")


def validate_stage_inputs(
    ws: StagingWorkspace,
    hidden: object,
    topk_ids: object,
    topk_weights: object,
    *,
    num_experts: object,
    hidden_scales: object = None,
    global_scale: object = 1.0,
    live_tokens: object = None,
) -> StageMeta:
    """Check one staging call's metadata against the workspace (no value reads, no syncs)."""
    fmt = ws.fmt
    ids = _tensor("topk_ids", topk_ids)
    w = _tensor("topk_weights", topk_weights)
    h = _tensor("hidden", hidden)
    if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 1:
        raise ConfigError("num_experts", "an int >= 1", repr(num_experts))
    if num_experts > I32_LIMIT:
        raise ConfigError("num_experts", "at most 2**31 - 1", num_experts)
    if ids.dim() != 2:
        raise ConfigError("topk_ids", "a 2-D tensor [T, K]", f"shape {tuple(ids.shape)}")
    if ids.dtype not in ID_DTYPES:
        raise ConfigError("topk_ids", "dtype int32 or int64", ids.dtype)
    if w.dtype not in SCORE_DTYPES:
        raise ConfigError("topk_weights", "dtype float16, bfloat16, float32 or float64", w.dtype)
    t, k = ids.shape
    if k != ws.top_k:
        raise ConfigError("topk_ids", f"K = {ws.top_k} (the workspace's top_k)", f"K = {k}")
    if t > ws.capacity:
        raise ConfigError("topk_ids", f"T <= capacity C = {ws.capacity}", f"T = {t}")
    _shape("topk_weights", w, (t, k))
    dev = ws.device
    _device("topk_ids", ids, dev)
    _device("topk_weights", w, dev)
    _device("hidden", h, dev)
    hid = ws.hidden_size
    if fmt.kind in ("bf16", "mxfp8", "nvfp4", "safe_fp8"):
        if h.dtype != torch.bfloat16:
            raise ConfigError("hidden", "dtype bfloat16", h.dtype)
        _shape("hidden", h, (t, hid))
        if hidden_scales is not None:
            raise ConfigError("hidden_scales", f"None for format {fmt.kind}", "a tensor")
    elif fmt.kind == "mxfp8_prequant":
        if h.dtype != MX_PAYLOAD_DTYPES[fmt.elem]:
            raise ConfigError("hidden", f"dtype {MX_PAYLOAD_DTYPES[fmt.elem]}", h.dtype)
        _shape("hidden", h, (t, hid))
        s = _tensor("hidden_scales", hidden_scales)
        if s.dtype not in MX_SCALE_DTYPES:
            raise ConfigError("hidden_scales", "dtype uint8 or float8_e8m0fnu", s.dtype)
        n = hid // 32
        if s.dim() != 2 or s.shape[0] != t or s.shape[1] not in (n, (n + 3) // 4 * 4):
            raise ConfigError(
                "hidden_scales", f"shape ({t}, {n}) or ({t}, {(n + 3) // 4 * 4})",
                f"shape {tuple(s.shape)}",
            )
        _device("hidden_scales", s, dev)
    else:  # nvfp4_prequant
        if h.dtype not in NVFP4_PAYLOAD_DTYPES:
            raise ConfigError("hidden", "dtype uint8 or float4_e2m1fn_x2", h.dtype)
        _shape("hidden", h, (t, hid // 2))
        s = _tensor("hidden_scales", hidden_scales)
        if s.dtype != torch.float8_e4m3fn:
            raise ConfigError("hidden_scales", "dtype float8_e4m3fn", s.dtype)
        _shape("hidden_scales", s, (t, hid // 16))
        _device("hidden_scales", s, dev)
    if fmt.kind == "nvfp4":
        if isinstance(global_scale, bool) or not isinstance(global_scale, (int, float)):
            raise ConfigError("global_scale", "a Python float", type(global_scale).__name__)
        g = float(global_scale)
        if not math.isfinite(g) or g <= 0.0:
            raise ConfigError("global_scale", "a finite float > 0", g)
    graph_live = live_tokens is not None
    if graph_live:
        lt = _tensor("live_tokens", live_tokens)
        if lt.dtype != torch.int32 or tuple(lt.shape) != (1,):
            raise ConfigError(
                "live_tokens", "an int32 tensor of shape (1,)", f"{lt.dtype} {tuple(lt.shape)}"
            )
        _device("live_tokens", lt, dev)
    return StageMeta(t, k, num_experts, ids.dtype, w.dtype, graph_live)
