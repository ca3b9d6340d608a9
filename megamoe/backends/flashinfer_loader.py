"""Load ``flashinfer.moe_ep`` without ``flashinfer/__init__.py``.

``import flashinfer`` executes the package's ``__init__``, which imports most of FlashInfer
(triton, cutlass, jinja2 and hundreds of modules); the MegaMoE backends need ``moe_ep`` and a
few helpers only (``flashinfer.api_logging``, ``flashinfer.jit.*``, ``flashinfer.comm``'s
memory helpers, ``flashinfer.utils``). So the loader puts empty parent packages into
``sys.modules`` (``flashinfer``, ``flashinfer.jit``, ``flashinfer.comm``, each with its real
folder as ``__path__``), so that Python imports the submodules from the files without running
their ``__init__``, and then imports ``flashinfer.moe_ep``. ``flashinfer.comm``'s one name
that ``moe_ep`` imports from the package itself, ``pack_strided_memory``, is resolved on first
use from ``flashinfer.comm.dlpack_utils``.

Where the files come from (``flashinfer_root``): ``$MEGAMOE_FLASHINFER_ROOT`` (a folder that
holds ``flashinfer/``: an unpacked wheel, or the slim copy ``devtools/flashinfer_slim.py``
makes for the GPU machine), else the installed ``flashinfer-python`` distribution. FlashInfer
needs CuTe DSL 4.6 or newer for some backends and ours pins 4.3.5: run a FlashInfer backend in
a process of its own.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import types
from importlib import metadata
from pathlib import Path

ROOT_ENV = "MEGAMOE_FLASHINFER_ROOT"
STUB_PACKAGES = ("flashinfer", "flashinfer.jit", "flashinfer.comm")
"""Parent packages whose ``__init__`` the loader never runs."""
_LAZY = {"flashinfer.comm": {"pack_strided_memory": "flashinfer.comm.dlpack_utils"}}


class FlashinferNotFound(ImportError):
    """No FlashInfer files where the loader looks (the message says where it looked)."""


def flashinfer_root() -> Path:
    """The folder that holds ``flashinfer/`` (module docstring)."""
    env = os.environ.get(ROOT_ENV)
    if env:
        root = Path(env)
        if not (root / "flashinfer" / "moe_ep" / "__init__.py").is_file():
            raise FlashinferNotFound(f"${ROOT_ENV}={env} holds no flashinfer/moe_ep/__init__.py")
        return root
    try:
        dist = metadata.distribution("flashinfer-python")
    except metadata.PackageNotFoundError as err:
        raise FlashinferNotFound(
            f"flashinfer-python is not installed and ${ROOT_ENV} is not set") from err
    root = Path(str(dist.locate_file("")))
    if not (root / "flashinfer" / "moe_ep" / "__init__.py").is_file():
        raise FlashinferNotFound(f"flashinfer-python at {root} has no flashinfer/moe_ep")
    return root


def flashinfer_version(root: Path) -> str:
    """The version of the FlashInfer files under ``root`` (``flashinfer/_build_meta.py``, else
    ``flashinfer/version.py``), without importing them."""
    for name in ("_build_meta.py", "version.py"):
        path = root / "flashinfer" / name
        if path.is_file():
            found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", path.read_text())
            if found:
                return found.group(1)
    return "unknown"


def _stub(name: str, folder: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(folder)]  # a package: submodules load from the folder
    module.__file__ = None
    lazy = _LAZY.get(name, {})

    def __getattr__(attr: str) -> object:
        if attr in lazy:
            value = getattr(importlib.import_module(lazy[attr]), attr)
            setattr(module, attr, value)
            return value
        raise AttributeError(f"module {name!r} has no attribute {attr!r} (a loader stub)")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def load_moe_ep(root: Path | None = None) -> types.ModuleType:
    """``flashinfer.moe_ep`` from ``root`` (default ``flashinfer_root()``), its parents stubbed.
    Refuses a process that already imported another FlashInfer."""
    root = Path(root) if root is not None else flashinfer_root()
    present = sys.modules.get("flashinfer")
    if present is not None:
        paths = list(getattr(present, "__path__", []))
        if paths != [str(root / "flashinfer")]:
            raise ImportError(f"another flashinfer is already imported in this process "
                              f"({paths or present}); run the FlashInfer backend alone")
    for name in STUB_PACKAGES:
        if name not in sys.modules:
            sys.modules[name] = _stub(name, root.joinpath(*name.split(".")))
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, sys.modules[name])
    return importlib.import_module("flashinfer.moe_ep")
