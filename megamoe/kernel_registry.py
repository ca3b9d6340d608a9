"""The one registry of CuTe DSL kernels (used by the compile gate and the sanitize suite).

Convention: every module under ``megamoe/`` whose name ends in ``_kernel``
defines its kernels and registers a builder for each with
``@register_kernel("name")``. A builder compiles the kernel for representative
shapes with ``cute.compile`` (for ``sm_90a``) and returns the compiled object.
``load_all()`` imports every such module, so a new kernel is covered by the
compile gate without editing any test.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import megamoe

KERNEL_MODULE_SUFFIX = "_kernel"


@dataclass(frozen=True)
class KernelEntry:
    """A registered kernel: its name, defining module and offline builder."""

    name: str
    module: str
    build: Callable[[], object]


_REGISTRY: dict[str, KernelEntry] = {}


def register_kernel(name: str) -> Callable[[Callable[[], object]], Callable[[], object]]:
    """Register ``build`` (no arguments; compiles the kernel) under ``name``."""

    def deco(build: Callable[[], object]) -> Callable[[], object]:
        existing = _REGISTRY.get(name)
        if existing is not None and existing.module != build.__module__:
            raise ValueError(
                f"kernel name {name!r} registered twice: {existing.module} and {build.__module__}"
            )
        _REGISTRY[name] = KernelEntry(name, build.__module__, build)
        return build

    return deco


def kernel_module_names() -> list[str]:
    """Every module under ``megamoe`` named ``*_kernel`` (found without importing them)."""
    return sorted(
        info.name
        for info in pkgutil.walk_packages(megamoe.__path__, prefix="megamoe.")
        if info.name.rsplit(".", 1)[-1].endswith(KERNEL_MODULE_SUFFIX)
    )


def load_all() -> dict[str, KernelEntry]:
    """Import every kernel module and return the registry (name -> entry)."""
    for name in kernel_module_names():
        importlib.import_module(name)
    return dict(_REGISTRY)
