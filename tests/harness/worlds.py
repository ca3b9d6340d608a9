"""The EP worlds the multi tier runs in, as the runner knows them (docs/contract.md s11).

- ``real``: one process per rank, one GPU per rank (``--world-size`` GPUs of one
  architecture);
- ``emulated``: P processes sharing one GPU, started by the same launcher (torchrun) as the
  real world; it proves indexing, ownership, masking, layout and replay behaviour, and no
  cross-GPU memory ordering (its records say so);
- ``cpu``: P processes on the CPU running the layer's PyTorch paths, same launcher; it proves
  the exchange protocol, the launcher and this runner on any machine, and runs no kernel:
  its records never vouch for a kernel. The tests that capture CUDA graphs are not selected
  there (``CPU_DESELECTED``), and the record says so.

Without ``--mode`` the runner takes ``real`` when there are ``--world-size`` GPUs of one
architecture, ``emulated`` when there is at least one GPU, and refuses otherwise (a CPU
world must be asked for). A world the machine cannot serve is refused before any test
runs, never skipped. ``MODES`` and ``BACKENDS`` mirror ``megamoe.comm.world`` (the names the
launcher reads; a host test checks that they agree).
"""

from __future__ import annotations

from collections.abc import Sequence

from tests.harness.preflight import KERNEL_ARCH, Check

MODES = ("real", "emulated", "cpu")
BACKENDS = {"real": ("torch_symm", "nvshmem"), "emulated": ("torch_symm", "nvshmem"),
            "cpu": ("host",)}
WORLD_SIZES = (2, 4, 8)
"""``--world-size`` choices. One rank is no world to exchange in: the tier runs worlds of one
rank (and of every size that divides P) as sub-worlds inside every run."""
KERNEL_MODES = ("real", "emulated")
"""Modes whose records can vouch for kernels (the ledger's ``multi`` requirement)."""
CPU_DESELECTED = "cuda_graphs"
"""The marker of tests a CPU world does not select (CUDA graphs need a GPU)."""
WORLD_NOTES = {
    "real": "real world: one process and one GPU per rank",
    "emulated": "emulated world: P processes time-slice one GPU; proves indexing, ownership, "
                "masking, layout and replay behaviour; proves no cross-GPU memory ordering",
    "cpu": "CPU world: P processes run the layer's PyTorch paths; proves the exchange "
           "protocol, the launcher and the runner; runs no kernel and vouches for none",
}
MODE_ENV = "MEGAMOE_EP_MODE"
BACKEND_ENV = "MEGAMOE_EP_BACKEND"
WORLD_SIZE_ENV = "MEGAMOE_WORLD_SIZE"
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                    "NVSHMEM_DISABLE_NVLS": "1"}
"""Set for every rank's process (NVLink multicast stays off on shared hosts)."""


def _kernel_gpus(gpus: Sequence[dict]) -> list[dict]:
    return [g for g in gpus if g.get("arch") == KERNEL_ARCH]


def resolve_mode(requested: str | None, world_size: int, gpus: Sequence[dict]) -> str | None:
    """The mode to run (module docstring); None when none was asked for and the machine has
    no GPU."""
    if requested is not None:
        return requested
    usable = _kernel_gpus(gpus)
    if len(usable) >= world_size and len(usable) == len(gpus):
        return "real"
    return "emulated" if gpus else None


def resolve_backend(requested: str | None, mode: str) -> str:
    return requested if requested is not None else BACKENDS[mode][0]


def check_world(mode: str | None, backend: str | None, world_size: int,
                gpus: Sequence[dict]) -> Check:
    """Can this machine serve the world? (refused before any test runs)"""
    name = "multi: world"
    if mode is None:
        return Check(name, False, f"no CUDA GPU for a world of {world_size} rank(s); ask for "
                     "--mode cpu (the CPU world: the exchange protocol without kernels)")
    if backend is not None and backend not in BACKENDS[mode]:
        return Check(name, False, f"backend {backend} cannot serve mode {mode} (it takes "
                     f"{', '.join(BACKENDS[mode])})")
    usable = _kernel_gpus(gpus)
    if mode == "real" and len(usable) < world_size:
        return Check(name, False, f"a real world of {world_size} ranks needs {world_size} "
                     f"{KERNEL_ARCH} GPU(s), found {len(usable)} (of {len(gpus)}); use --mode "
                     "emulated for P ranks on one GPU")
    if mode == "emulated" and not usable:
        return Check(name, False, f"an emulated world needs one {KERNEL_ARCH} GPU, found "
                     f"{len(usable)} (of {len(gpus)})")
    return Check(name, True, f"{mode} world of {world_size} rank(s), backend "
                 f"{resolve_backend(backend, mode)}: {WORLD_NOTES[mode]}")
