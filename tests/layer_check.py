"""The oracle's output for a layer configuration, shared by the host and GPU layer tests
(the judging rule itself is ``oracle.compare.compare_rows``, CONTRACTS.md s8)."""

from __future__ import annotations

import torch

from oracle.compare import RowReport, active_rows, compare_rows
from oracle.experts import moe_forward
from oracle.moe_config import MoEConfig
from oracle.weights import prepare_weights

__all__ = ["RowReport", "active_rows", "compare_rows", "oracle_config", "oracle_output"]


def oracle_config(layer_config) -> MoEConfig:  # type: ignore[no-untyped-def]
    c = layer_config
    return MoEConfig(c.recipe, c.num_experts, c.top_k, c.hidden_size, c.intermediate_size,
                     clamp=c.clamp, late_weighting=c.late_weighting)


def oracle_output(layer_config, w13, w2, hidden, ids, weights) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """The oracle's ``moe_forward`` on the CPU (float32 IEEE GEMMs) for the same inputs."""
    cfg = oracle_config(layer_config)
    ew = prepare_weights(w13.cpu(), w2.cpu(), cfg)
    return moe_forward(hidden.cpu(), ids.cpu(), weights.cpu(), ew, cfg)
