"""Which MegaMoE the contract suites judge: the registered backends and how one is chosen.

A backend is named by ``--moe-backend NAME`` (pytest, ``qualify.py``), else by the
environment variable ``MEGAMOE_MOE_BACKEND``, else ``megamoe`` (our layer). ``NAME`` is a
key of ``REGISTERED`` or ``package.module:attribute`` for a user's own backend (an object
with ``MoEBackend``'s members, ``megamoe.backends.api``). A name that resolves to nothing
usable raises ``BackendError`` saying what was wrong; nothing falls back to another backend.
"""

from __future__ import annotations

import importlib
import os

from megamoe.backends.api import BackendInfo, MoEBackend

ENV = "MEGAMOE_MOE_BACKEND"
DEFAULT = "megamoe"
REGISTERED: dict[str, str] = {
    "megamoe": "megamoe.backends.megamoe_layer:BACKEND",
    "flashinfer-sm90-cake": "megamoe.backends.flashinfer_sm90:CAKE",
    "flashinfer-sm90-fp8-pull": "megamoe.backends.flashinfer_sm90:FP8_PULL",
}
"""Backend name -> ``module:attribute`` of its ``MoEBackend`` object (imported on use)."""


class BackendError(ValueError):
    """A backend name that names no usable backend."""


def selected_name(option: str | None = None) -> str:
    """The backend name in force: ``option``, else ``$MEGAMOE_MOE_BACKEND``, else
    ``megamoe``."""
    return option or os.environ.get(ENV) or DEFAULT


def load_backend(name: str) -> MoEBackend:
    """The backend called ``name`` (module docstring); ``BackendError`` otherwise."""
    target = REGISTERED.get(name, name)
    if ":" not in target:
        raise BackendError(f"moe backend {name!r}: expected one of {sorted(REGISTERED)} or "
                           "'package.module:attribute'")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise BackendError(f"moe backend {name!r}: cannot import {module_name}: {err}") from err
    if not hasattr(module, attr):
        raise BackendError(f"moe backend {name!r}: module {module_name} has no {attr!r}")
    backend = getattr(module, attr)
    if not isinstance(backend, MoEBackend) or not isinstance(
            getattr(backend, "info", None), BackendInfo):
        raise BackendError(f"moe backend {name!r}: {target} is not a MoEBackend (it needs "
                           "info: BackendInfo, refusal(...) and build(...))")
    return backend
