"""The single-rank forward: every slot's term and the combined output (docs/contract.md s1-s6).

``moe_forward`` checks the inputs (s1) and the routes (s2, on the caller's dtype), stages the
routes (s3), computes each active slot's term with the expert FFN of the recipe
(``oracle.ffn``, s5; ``expert_terms``) and combines them: the output of a token is the masked
combine of its terms (``oracle.combine``, s6).

The oracle is split into modules with one job each; this module re-exports their public
names, so ``from oracle.experts import X`` works for every name below:

- ``oracle.moe_config``: the layer settings (``MoEConfig``, s0, s5);
- ``oracle.activations``: the A1/A2 operands and the hidden rows (s1, s3-s5);
- ``oracle.weights``: the experts' weights (``prepare_weights``, s4, s5);
- ``oracle.ffn``: the expert FFN and what makes it row-independent (s5, s7, s8).
"""

from __future__ import annotations

import torch

from oracle.activations import (
    ActivationRows,
    check_hidden,
    hidden_device,
    num_hidden_rows,
    prequantized_a1,
    quantize_a1,
    quantize_a2,
    stage_a1,
)
from oracle.combine import masked_combine
from oracle.ffn import (
    ROW_TILE,
    expert_block,
    round_terms,
    rows_matmul,
    sigmoid_f32,
    split_gate_up,
    swiglu,
)
from oracle.moe_config import MX_SCALE_MODES, MXFP8_ELEMS, MoEConfig, _bad
from oracle.routing import (
    ID_DTYPES,
    MASKED_ID,
    SCORE_DTYPES,
    raise_on_route_violations,
    stage_routes,
)
from oracle.weights import ExpertWeights, check_weights, prepare_weights

__all__ = [
    "MXFP8_ELEMS",
    "MX_SCALE_MODES",
    "ROW_TILE",
    "ActivationRows",
    "ExpertWeights",
    "MoEConfig",
    "check_hidden",
    "check_route_metadata",
    "check_weights",
    "expert_block",
    "expert_terms",
    "hidden_device",
    "moe_forward",
    "num_hidden_rows",
    "prepare_weights",
    "prequantized_a1",
    "quantize_a1",
    "quantize_a2",
    "round_terms",
    "rows_matmul",
    "sigmoid_f32",
    "split_gate_up",
    "stage_a1",
    "swiglu",
]


def check_route_metadata(
    prefix: str,
    hidden: torch.Tensor | ActivationRows,
    ids: object,
    scores: object,
    config: MoEConfig,
) -> None:
    """Metadata check of one rank's routes against its hidden rows (docs/contract.md s1)."""
    t, device = num_hidden_rows(hidden), hidden_device(hidden)
    for name, value, dtypes in (
        ("topk_ids", ids, ID_DTYPES),
        ("topk_weights", scores, SCORE_DTYPES),
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


def expert_terms(
    hidden: torch.Tensor,
    topk_ids: torch.Tensor,
    scores: torch.Tensor,
    weights: ExpertWeights,
    config: MoEConfig,
) -> torch.Tensor:
    """Every slot's term, bf16 ``[T, K, H]`` (docs/contract.md s5); masked slots are ``+0.0``.

    hidden: bf16 ``[T, H]`` (or prequantized A1, ``prequantized_a1``); topk_ids: int32/int64
    ``[T, K]`` (-1 = masked); scores: float32
    ``[T, K]``, used on active slots only (staged scores, ``oracle.routing.stage_routes``).
    The routes must pass docs/contract.md s2 (else ``ValueError`` naming the first violation).

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
    raise_on_route_violations(topk_ids, scores, config.num_experts)
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
    """One rank holding every expert: ``out [T, H]`` bf16 (docs/contract.md s1-s6).

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
    raise_on_route_violations(topk_ids, topk_weights, config.num_experts)
    t = num_hidden_rows(hidden)
    ids, scores = stage_routes(topk_ids, topk_weights, max(t, 1))
    ids, scores = ids[:t], scores[:t]
    weighted = scores if config.combine_weighting else None
    return masked_combine(expert_terms(hidden, ids, scores, weights, config), ids, weighted)
