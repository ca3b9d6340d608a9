"""The bounded signal between the steps of an EP forward (``megamoe.comm.signal_kernel``;
docs/contract.md s7, s9).

``StepSignal`` owns what the signal needs: the flag region of a symmetric workspace (int32
``[P]`` per rank, one flag per source rank), this rank's epoch (int32 ``[1]``) and its
status word (int32 ``[4]``: code, step, peer, epoch; ``signal_kernel.STATUS_WORDS``).
``signal(step)`` launches the kernel on the current stream: every rank tells every rank it
has finished the step's writes, then waits (at most the world's timeout) until every rank
has told it the same. A wait that expires leaves ``STATUS_TIMEOUT`` in the status word;
``error()`` reads it (a sync) and returns the ``CommTimeoutError`` naming this rank, the
step and the peer that never arrived. A rank whose status records a failure neither waits
nor signals any more, so a peer that arrives late times out too (at its next step) rather
than computing with rows the failed forward pushed.

On the CPU world the same protocol runs in PyTorch and Python (stores to the peers' flag
words, then a polling loop on this rank's flags with the same bound and the same status
word); nothing there is capturable.
"""

from __future__ import annotations

import time

import torch

from megamoe.comm.symmetric_workspace import SymmetricWorkspace
from megamoe.compile_once import compile_once
from megamoe.errors import CommTimeoutError, ConfigError
from megamoe.experts import api as _gemm

STATUS_WORDS = 4  # = signal_kernel.STATUS_WORDS
STATUS_OK = 0  # = signal_kernel.STATUS_OK
STATUS_TIMEOUT = 1  # = signal_kernel.STATUS_TIMEOUT
POLL_S = 50e-6
PATH_KERNEL = "kernel"
PATH_TORCH = "torch"
_CACHE: dict[str, object] = {}


def _compiled(device: torch.device):
    def build():  # type: ignore[no-untyped-def]
        from megamoe.comm.signal_kernel import compile_signal

        return compile_signal()

    return compile_once(_CACHE, str(device), build, what=f"step signal on {device}",
                        warmup="megamoe.comm.signal.warmup(device)", device=device)


def warmup(device: torch.device | str) -> None:
    device = torch.device(device)
    if _gemm.kernel_supported(device):
        _compiled(device)


class StepSignal:
    """The signal of one workspace's steps (module docstring). ``steps`` names the steps in
    forward order (the status word records a step by its index)."""

    def __init__(self, ws: SymmetricWorkspace, region: str, steps: tuple[str, ...]) -> None:
        world = ws.world
        flags = ws.local(region)
        if flags.dtype != torch.int32 or tuple(flags.shape) != (world.size,):
            raise ConfigError(f"region {region!r}", f"int32 [{world.size}]",
                              f"{flags.dtype} {tuple(flags.shape)}")
        device = flags.device
        if device.type == "cuda" and not _gemm.kernel_supported(device):
            raise ConfigError("device", "a Hopper GPU (the step signal is a CuTe DSL kernel) "
                              "or the CPU", torch.cuda.get_device_name(device))
        self.ws, self.region, self.steps = ws, region, steps
        self.epoch = torch.zeros(1, dtype=torch.int32, device=device)
        self.status = torch.zeros(STATUS_WORDS, dtype=torch.int32, device=device)
        self.timeout_ns = int(world.timeout_s * 1e9)

    def signal(self, step: str) -> str:
        """Launch the signal of ``step`` (module docstring); returns the path taken."""
        index = self.steps.index(step)
        world = self.ws.world
        if self.epoch.device.type != "cuda":
            self._signal_torch(index)
            return PATH_TORCH
        import cuda.bindings.driver as cuda
        import cutlass
        import cutlass.cute as cute
        from cutlass.cute.runtime import make_ptr

        compiled = _compiled(self.epoch.device)
        gm = cute.AddressSpace.gmem

        def p(t: torch.Tensor, ty, align: int):
            return make_ptr(ty, t.data_ptr(), gm, assumed_align=align)

        stream = cuda.CUstream(torch.cuda.current_stream(self.epoch.device).cuda_stream)
        compiled(p(self.ws.table(self.region), cutlass.Int64, 8), world.rank, world.size,
                 p(self.epoch, cutlass.Int32, 4), p(self.status, cutlass.Int32, 4),
                 index, self.timeout_ns, stream)
        return PATH_KERNEL

    def _signal_torch(self, index: int) -> None:
        world = self.ws.world
        e = int(self.epoch[0]) + 1
        flags = self.ws.local(self.region)
        if int(self.status[0]) == STATUS_OK:  # a failed rank signals no more (signal_kernel)
            for d in range(world.size):
                self.ws.peer(self.region, d)[world.rank] = e
            deadline = time.monotonic() + world.timeout_s
            for src in range(world.size):
                while int(flags[src]) - e < 0:
                    if time.monotonic() > deadline:
                        self.status.copy_(torch.tensor([STATUS_TIMEOUT, index, src, e],
                                                       dtype=torch.int32))
                        break
                    time.sleep(POLL_S)
                if int(self.status[0]) != STATUS_OK:
                    break
        self.epoch[0] = e

    def error(self) -> CommTimeoutError | None:
        """The recorded timeout as an exception (host read: syncs), or None."""
        code, step, peer, epoch = (int(v) for v in self.status.cpu())
        if code == STATUS_OK:
            return None
        name = self.steps[step] if 0 <= step < len(self.steps) else f"#{step}"
        return CommTimeoutError(self.ws.world.rank, name, peer,
                                f"signal {epoch} of this world (device wait bounded by "
                                f"{self.ws.world.timeout_s} s)")
