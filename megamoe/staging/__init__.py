"""Staging: route checks, route staging and activation quantization into the workspace
(docs/contract.md s2-s4, s9). Fused CuTe DSL kernels (``*_kernel.py``) with a bitwise-equal
Torch path (``torch_path``); ``stage`` picks one and reports which."""

from megamoe.staging.api import (
    KERNEL_FORMATS,
    PATH_KERNEL,
    PATH_TORCH,
    StageResult,
    check_errors,
    kernel_plan,
    stage,
    warmup,
)
from megamoe.staging.compile_cache import CompileDuringCaptureError
from megamoe.workspace import StageFormat, StagingWorkspace

__all__ = [
    "KERNEL_FORMATS",
    "PATH_KERNEL",
    "PATH_TORCH",
    "CompileDuringCaptureError",
    "StageFormat",
    "StageResult",
    "StagingWorkspace",
    "check_errors",
    "kernel_plan",
    "stage",
    "warmup",
]
