"""Masked BF16 combine of per-slot expert terms (docs/contract.md s6). ``combine_kernel`` holds
the CuTe DSL kernel; ``api`` the launcher and the Torch path."""

from megamoe.combine.api import (
    PLAN_SCALAR,
    PLAN_TORCH,
    PLAN_WIDE,
    combine_plan,
    masked_combine,
    warmup,
)
from megamoe.errors import CompileDuringCaptureError

__all__ = [
    "PLAN_SCALAR",
    "PLAN_TORCH",
    "PLAN_WIDE",
    "CompileDuringCaptureError",
    "combine_plan",
    "masked_combine",
    "warmup",
]
