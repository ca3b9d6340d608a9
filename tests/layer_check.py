"""The oracle's output for a layer configuration, shared by the host and GPU layer tests
(the judging rule itself is ``oracle.compare.compare_rows``, docs/contract.md s8), and the
one way a contract test builds a layer of the chosen backend (``build_layer``)."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch

from megamoe.backends import LayerSpec, MoEBackend, MoEHandle, feature_refusal, recipe_refusal
from oracle import ffn
from oracle.compare import RowReport, active_rows, compare_rows
from oracle.experts import moe_forward
from oracle.moe_config import MoEConfig
from oracle.weights import prepare_weights

__all__ = ["RowReport", "active_rows", "build_layer", "compare_rows", "layer_routes",
           "layer_weights", "oracle_config", "oracle_output", "oracle_output_gate_clamped_both_ways",
           "poison", "poison_workspaces", "require_features"]

MASKED_JUNK = (float("nan"), float("inf"), float("-inf"))
"""What masked slots carry in the layer tests (docs/contract.md s2: any score, never read)."""


def layer_weights(seed: int, e: int, h: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 ``w13 [E, 2I, H]`` (gate rows, then up rows) and ``w2 [E, H, I]``, N(0, 1/fan_in)."""
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(e, 2 * i, h, generator=g) / math.sqrt(h)).bfloat16()
    w2 = (torch.randn(e, h, i, generator=g) / math.sqrt(i)).bfloat16()
    return w13, w2


def layer_routes(seed: int, t: int, *, num_experts: int, top_k: int, hidden: int,
                 mask_p: float, device: torch.device | str = "cpu",
                 id_dtype: torch.dtype = torch.int64, score_dtype: torch.dtype = torch.float32,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(hidden [T, H] bf16, ids [T, K], scores [T, K])``: K distinct experts per row, each
    slot masked with probability ``mask_p`` (id -1, score NaN/+Inf/-Inf), active scores in
    [0.05, 1). Generated on the CPU from ``seed``, then moved to ``device``."""
    g = torch.Generator().manual_seed(seed)
    k = top_k
    ids = (torch.rand(t, num_experts, generator=g).argsort(dim=1)[:, :k] if t
           else torch.zeros(0, k, dtype=torch.int64))
    masked = torch.rand(t, k, generator=g) < mask_p
    ids = torch.where(masked, -1, ids)
    w = torch.rand(t, k, generator=g) * 0.95 + 0.05
    junk = torch.tensor(MASKED_JUNK)
    w = torch.where(masked, junk[torch.randint(0, 3, (t, k), generator=g)], w)
    x = torch.randn(t, hidden, generator=g).bfloat16()
    return x.to(device), ids.to(id_dtype).to(device), w.to(score_dtype).to(device)


def oracle_config(layer_config) -> MoEConfig:  # type: ignore[no-untyped-def]
    """The oracle's ``MoEConfig`` of a ``LayerConfig`` or a ``LayerSpec`` (a ``MoEConfig`` as
    it is)."""
    if isinstance(layer_config, MoEConfig):
        return layer_config
    if isinstance(layer_config, LayerSpec):
        return layer_config.config
    c = layer_config
    return MoEConfig(c.recipe, c.num_experts, c.top_k, c.hidden_size, c.intermediate_size,
                     clamp=c.clamp, late_weighting=c.late_weighting,
                     mxfp8_elem=c.mxfp8_elem, mxfp8_mode=c.mxfp8_mode,
                     nvfp4_input_scale=c.nvfp4_input_scale, nvfp4_a2_scale=c.nvfp4_a2_scale)


def oracle_output(layer_config, w13, w2, hidden, ids, weights) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """The oracle's ``moe_forward`` on the CPU (float32 IEEE GEMMs) for the same inputs.

    ``w13``/``w2``: float tensors (the oracle prepares them for the recipe, as the layer
    does) or prequantized MXFP4 (``codes``, ``scales``) or MXFP8 (``payload``, ``scales``)
    weights."""
    cfg = oracle_config(layer_config)
    if hasattr(w13, "global_scale"):
        ew = prepare_weights(w13.codes.cpu(), w2.codes.cpu(), cfg,
                             w13_scale=w13.scales.cpu(), w2_scale=w2.scales.cpu(),
                             w13_global_scale=w13.global_scale.cpu(),
                             w2_global_scale=w2.global_scale.cpu())
    elif hasattr(w13, "codes"):
        ew = prepare_weights(w13.codes.cpu(), w2.codes.cpu(), cfg,
                             w13_scale=w13.scales.cpu(), w2_scale=w2.scales.cpu())
    elif hasattr(w13, "payload"):
        ew = prepare_weights(w13.payload.cpu(), w2.payload.cpu(), cfg,
                             w13_scale=w13.scales.cpu(), w2_scale=w2.scales.cpu())
    else:
        ew = prepare_weights(w13.cpu(), w2.cpu(), cfg)
    return moe_forward(hidden.cpu(), ids.cpu(), weights.cpu(), ew, cfg)


_ORACLE_SWIGLU = ffn.swiglu


def _swiglu_gate_clamped_both_ways(gate: torch.Tensor, up: torch.Tensor,
                                   clamp: float | None) -> torch.Tensor:
    low = gate if clamp is None else torch.maximum(gate, torch.tensor(-clamp, dtype=gate.dtype))
    return _ORACLE_SWIGLU(low, up, clamp)


def oracle_output_gate_clamped_both_ways(layer_config, w13, w2, hidden, ids,  # type: ignore[no-untyped-def]
                                         weights) -> torch.Tensor:
    """``oracle_output`` under the reading of a clamp that docs/contract.md s5 rules out (and
    FlashInfer's cake FC1 was read to follow): the gate limited to ``[-c, c]``, not only from
    above. A planted reference for the clamp test, and what a backend that reads it so
    computes."""
    with mock.patch.object(ffn, "swiglu", _swiglu_gate_clamped_both_ways):
        return oracle_output(layer_config, w13, w2, hidden, ids, weights)


def build_layer(backend: MoEBackend, spec: LayerSpec, w13: torch.Tensor, w2: torch.Tensor,
                device: torch.device | str, world: object | None = None) -> MoEHandle:
    """The chosen backend's layer for ``spec`` on this rank; a backend that refuses it fails
    the test with its reason (``MoEBackend.refusal``), never skips it."""
    device = torch.device(device)
    no_recipe = recipe_refusal(backend.info, spec.config.recipe)
    if no_recipe is not None:
        pytest.fail(no_recipe, pytrace=False)
    why = backend.refusal(spec, device, 1 if world is None else world.size)  # type: ignore[attr-defined]
    if why is not None:
        pytest.fail(why, pytrace=False)
    return backend.build(spec, w13, w2, device=device, world=world)


def require_features(backend: MoEBackend, *features: str) -> None:
    """Fail (never skip) when the backend lacks a feature the contract rule needs."""
    why = feature_refusal(backend.info, *features)
    if why is not None:
        pytest.fail(why, pytrace=False)


POISON_INT = -7
"""What integer workspaces hold between scenario states (docs/contract.md s10)."""


def poison(t: torch.Tensor) -> None:
    """NaN into a floating tensor (one-byte formats: the byte 0xFF, NaN in E4M3, E5M2 and
    E8M0), ``POISON_INT`` into integers."""
    if t.element_size() == 1:
        t.view(torch.uint8).fill_(0xFF)
    elif t.is_floating_point():
        t.fill_(float("nan"))
    else:
        t.fill_(POISON_INT)


def poison_workspaces(layer: MoEHandle, *buffers: torch.Tensor) -> None:
    """Poison every workspace the layer lists (``MoEHandle.workspaces``) and ``buffers``
    (the caller's outputs) between scenario states (docs/contract.md s10)."""
    for t in (*layer.workspaces(), *buffers):
        if t.numel():
            poison(t)
