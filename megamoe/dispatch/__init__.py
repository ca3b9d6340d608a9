"""Dispatch layout: histogram, offsets, stable order and active extents of staged routes
(docs/contract.md s3, s8). ``layout_kernel`` holds the CuTe DSL kernels; ``api`` the launcher."""

from megamoe.dispatch.api import (
    PATH_KERNEL,
    PATH_TORCH,
    PLAN_FOUR_LAUNCHES,
    PLAN_ONE_LAUNCH,
    DispatchLayoutResult,
    LayoutShape,
    LayoutWorkspace,
    dispatch_layout,
    kernel_plan,
    warmup,
)
from megamoe.errors import CompileDuringCaptureError

__all__ = [
    "PATH_KERNEL",
    "PATH_TORCH",
    "PLAN_FOUR_LAUNCHES",
    "PLAN_ONE_LAUNCH",
    "CompileDuringCaptureError",
    "DispatchLayoutResult",
    "LayoutShape",
    "LayoutWorkspace",
    "dispatch_layout",
    "kernel_plan",
    "warmup",
]
