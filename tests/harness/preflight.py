"""Checks made before any suite runs; each failure is recorded with its reason.

- ``--require-arch X``: every visible GPU must be X (``sm_90a`` counts as
  ``sm_90``); no GPU at all is a refusal too.
- GPU suites (``single``, ``multi``, ``sanitize``): at least one GPU (real
  multi: ``--world-size`` GPUs), of an architecture the chosen MegaMoE backend
  serves (``megamoe``: ``KERNEL_ARCH``, its kernels are built for sm_90a and can
  run nowhere else; ``check_moe_backend``).
- The MegaMoE backend (``--moe-backend``) loads; its name and version go into
  the record.
- The CuTe DSL imports (``import cutlass.cute`` in a fresh interpreter) for
  every suite: the host tier holds the offline compile gate.
- Real multi mode: ``torch.distributed.run`` is importable and
  ``torch.distributed`` is available.
- ``sanitize``: compute-sanitizer is found.
"""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

KERNEL_ARCH = "sm_90"
GPU_SUITES = ("single", "multi", "sanitize")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def normalize_arch(arch: str) -> str:
    """``sm_90a`` -> ``sm_90``; arch-specific suffixes do not change the chip."""
    return arch[:-1] if arch.startswith("sm_") and arch.endswith("a") else arch


def check_require_arch(require_arch: str, gpus: Sequence[dict]) -> Check:
    want = normalize_arch(require_arch)
    if not gpus:
        return Check("require-arch", False,
                     f"--require-arch {require_arch}: this machine has no CUDA GPU "
                     "(torch.cuda.is_available() is False); refusing to run")
    others = sorted({str(g["arch"]) for g in gpus if g["arch"] != want})
    if others:
        return Check("require-arch", False,
                     f"--require-arch {require_arch}: found {', '.join(others)} "
                     f"({gpus[0]['name']}); refusing to run elsewhere")
    return Check("require-arch", True, f"{len(gpus)} GPU(s) of {want}")


def check_gpus(suite: str, gpus: Sequence[dict], needed: int,
               archs: Sequence[str] = (KERNEL_ARCH,), who: str = "megamoe") -> Check:
    """``needed`` GPUs, each of one of ``archs`` (the architectures backend ``who`` serves)."""
    name = f"{suite}: gpus"
    if len(gpus) < needed:
        return Check(name, False, f"suite {suite} needs {needed} CUDA GPU(s), found {len(gpus)}")
    wrong = [g for g in gpus[:needed] if normalize_arch(str(g["arch"])) not in archs]
    if wrong:
        return Check(name, False, f"suite {suite} needs {' or '.join(archs)} GPUs (backend {who}'s "
                                  f"kernels run there only); found {wrong[0]['arch']} "
                                  f"({wrong[0]['name']})")
    return Check(name, True, f"{needed} of {len(gpus)} GPU(s), {' or '.join(archs)}")


def check_moe_backend(name: str) -> tuple[Check, dict[str, object]]:
    """Does ``--moe-backend`` name a usable backend? The check and the record's
    ``moe_backend`` entry (``BackendInfo.as_record``, or the name and the error)."""
    from megamoe.backends import BackendError, load_backend

    try:
        info = load_backend(name).info
    except BackendError as err:
        return Check("moe-backend", False, str(err)), {"name": name, "error": str(err)}
    return (Check("moe-backend", True, f"{info.name} {info.version} ({', '.join(info.archs)}; "
                  f"recipes {', '.join(info.recipes)})"), info.as_record())


@cache
def check_cute_dsl(python: str) -> Check:
    proc = subprocess.run([python, "-c", "import cutlass.cute"], capture_output=True, text=True,
                          timeout=300, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return Check("cute-dsl", False, f"import cutlass.cute failed: {tail[0]}")
    return Check("cute-dsl", True, "import cutlass.cute ok")


def check_torchrun() -> Check:
    import torch.distributed

    if not torch.distributed.is_available():
        return Check("torchrun", False, "torch.distributed is not available in this torch build")
    if importlib.util.find_spec("torch.distributed.run") is None:
        return Check("torchrun", False, "torch.distributed.run (torchrun) is not importable")
    return Check("torchrun", True, "torch.distributed.run importable")


def check_sanitizer(exe: str | None) -> Check:
    if exe is None:
        return Check("compute-sanitizer", False,
                     "compute-sanitizer not found on PATH, in CUDA_HOME or /usr/local/cuda")
    return Check("compute-sanitizer", True, exe)
