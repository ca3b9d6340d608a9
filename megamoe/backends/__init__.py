"""MegaMoE implementations the contract suites judge, behind one interface
(``megamoe.backends.api``), chosen by name (``megamoe.backends.registry``)."""

from megamoe.backends.api import (
    FEATURES,
    WEIGHTINGS,
    BackendInfo,
    LayerSpec,
    MoEBackend,
    MoEHandle,
    as_kernel,
    device_refusal,
    feature_refusal,
    recipe_refusal,
    weighting_refusal,
)
from megamoe.backends.registry import BackendError, load_backend, selected_name

__all__ = ["FEATURES", "WEIGHTINGS", "BackendError", "BackendInfo", "LayerSpec", "MoEBackend", "MoEHandle",
           "as_kernel", "device_refusal", "feature_refusal", "load_backend", "recipe_refusal",
           "selected_name", "weighting_refusal"]
