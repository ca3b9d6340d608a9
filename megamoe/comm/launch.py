"""Start this process's rank of an EP world, the way every world starts (docs/contract.md s11).

Every world is launched by torchrun (``python -m torch.distributed.run``), one process per
rank; ``init_world`` reads what torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``), picks the device of this rank for
the mode, refuses a world this machine cannot serve before anything starts, turns NVLink
multicast off, creates the gloo process group and the backend's world:

- ``real``: rank r computes on ``cuda:LOCAL_RANK``; needs ``LOCAL_WORLD_SIZE`` GPUs;
- ``emulated``: every rank on one GPU (``cuda:0``, or ``MEGAMOE_EMULATED_DEVICE``), the
  processes time-slicing it; torch symmetric memory with overlapping devices allowed;
- ``cpu``: every rank on the CPU, ``host`` symmetric memory.

The mode and backend come from the arguments, else ``MEGAMOE_EP_MODE`` /
``MEGAMOE_EP_BACKEND`` (``qualify.py --suite multi`` sets both), else: ``cpu`` without a
CUDA GPU, ``real`` when there are enough GPUs for the ranks of this node, ``emulated``
otherwise; ``host`` for ``cpu`` and ``torch_symm`` for the others.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch

from megamoe.comm.world import (
    DEFAULT_TIMEOUT_S,
    MODE_BACKENDS,
    MODES,
    World,
    WorldInfo,
    apply_no_multicast_env,
)
from megamoe.errors import ConfigError

MODE_ENV = "MEGAMOE_EP_MODE"
BACKEND_ENV = "MEGAMOE_EP_BACKEND"
TIMEOUT_ENV = "MEGAMOE_EP_TIMEOUT_S"
EMULATED_DEVICE_ENV = "MEGAMOE_EMULATED_DEVICE"
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT")


def _env_int(name: str) -> int:
    raw = os.environ.get(name)
    if raw is None:
        raise ConfigError(name, "set by torchrun (every EP world is started by torchrun, one "
                          "process per rank)", "unset")
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(name, "an integer", repr(raw)) from None


def default_mode(local_world_size: int, gpus: int) -> str:
    """The mode when none is asked for (module docstring)."""
    if gpus == 0:
        return "cpu"
    return "real" if gpus >= local_world_size else "emulated"


def choose_device(mode: str, local_rank: int, local_world_size: int, gpus: int) -> torch.device:
    """This rank's device; ``ConfigError`` when the machine cannot serve the world."""
    if mode == "cpu":
        return torch.device("cpu")
    if gpus == 0:
        raise ConfigError("mode", f"'cpu' on a machine without a CUDA GPU (mode {mode!r} needs "
                          "one)", mode)
    if mode == "real":
        if gpus < local_world_size:
            raise ConfigError("LOCAL_WORLD_SIZE", f"at most the {gpus} visible GPU(s) for a "
                              "real world (one GPU per rank); use mode 'emulated' on fewer",
                              local_world_size)
        return torch.device("cuda", local_rank)
    index = int(os.environ.get(EMULATED_DEVICE_ENV, "0"))
    if not 0 <= index < gpus:
        raise ConfigError(EMULATED_DEVICE_ENV, f"a GPU index in [0, {gpus})", index)
    return torch.device("cuda", index)


def resolve(mode: str | None, backend: str | None, local_world_size: int,
            gpus: int) -> tuple[str, str]:
    """``(mode, backend)`` from the arguments, the environment and the defaults, checked."""
    mode = mode or os.environ.get(MODE_ENV) or default_mode(local_world_size, gpus)
    if mode not in MODES:
        raise ConfigError("mode", f"one of {MODES}", repr(mode))
    backend = backend or os.environ.get(BACKEND_ENV) or MODE_BACKENDS[mode][0]
    if backend not in MODE_BACKENDS[mode]:
        raise ConfigError("backend", f"one of {MODE_BACKENDS[mode]} for mode {mode!r}",
                          repr(backend))
    return mode, backend


def resolve_timeout(timeout_s: float | None) -> float:
    if timeout_s is not None:
        return timeout_s
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(TIMEOUT_ENV, "seconds as a number", repr(raw)) from None


def init_world(mode: str | None = None, backend: str | None = None, *,
               timeout_s: float | None = None) -> World:
    """This process's rank of the world torchrun started (module docstring). Collective:
    every rank calls it. Raises ``ConfigError`` (before any process group exists) for a
    world this machine cannot serve or a launch without torchrun."""
    for name in TORCHRUN_VARS[:4]:
        _env_int(name)
    for name in TORCHRUN_VARS[4:]:
        if not os.environ.get(name):
            raise ConfigError(name, "set by torchrun", "unset")
    rank, size = _env_int("RANK"), _env_int("WORLD_SIZE")
    local_rank, local_size = _env_int("LOCAL_RANK"), _env_int("LOCAL_WORLD_SIZE")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mode, backend = resolve(mode, backend, local_size, gpus)
    device = choose_device(mode, local_rank, local_size, gpus)
    info = WorldInfo(rank, size, mode, backend, device, resolve_timeout(timeout_s))
    apply_no_multicast_env()
    if mode == "emulated":
        from megamoe.comm.torch_symm_world import OVERLAPPING_DEVICES_ENV

        os.environ[OVERLAPPING_DEVICES_ENV] = "1"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(seconds=info.timeout_s))
    elif dist.get_backend() != "gloo":
        raise ConfigError("process group", "gloo (NCCL refuses two ranks on one GPU)",
                          dist.get_backend())
    return make_world(info)


def make_world(info: WorldInfo, group=None) -> World:  # type: ignore[no-untyped-def]
    """The backend's world for ``info`` over ``group`` (default: the default group)."""
    if info.backend == "host":
        from megamoe.comm.host_world import HostWorld

        return HostWorld(info, group)
    if info.backend == "torch_symm":
        from megamoe.comm.torch_symm_world import TorchSymmWorld

        return TorchSymmWorld(info, group)
    from megamoe.comm.nvshmem_world import NvshmemWorld

    return NvshmemWorld(info, group)
