"""The MegaMoE layer on one GPU (docs/contract.md s1-s10): staging, dispatch layout, expert
GEMMs and masked combine behind one object (``MoELayer``, built from a ``LayerConfig``)."""

from megamoe.layer.config import LAYER_RECIPES, LayerConfig
from megamoe.layer.moe_layer import MoELayer

__all__ = ["LAYER_RECIPES", "LayerConfig", "MoELayer"]
