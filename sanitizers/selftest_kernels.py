"""Planted-bug kernels (and their clean twins) that prove each sanitizer tool is wired right.

Each tool gets one CuTe DSL kernel with a ``planted`` compile-time switch:

============  ==============================================  ==========================
tool          planted bug                                     clean twin
============  ==============================================  ==========================
memcheck      64 threads store into a 48-element buffer       stores guarded by ``< 48``
initcheck     reads the never-written upper half of a buffer  reads the written half
racecheck     shared-memory exchange without a barrier        barrier between the phases
synccheck     ``bar.sync`` reached by 16 of 64 threads        reached by all 64 threads
============  ==============================================  ==========================

All kernels run one CTA of ``SELFTEST_THREADS`` threads. ``build(tool,
variant)`` compiles for ``SELFTEST_ARCH`` with fake tensors (no GPU needed:
the offline compile gate uses it); ``run_case(tool, variant)`` allocates real
tensors and launches (GPU). CuTe DSL is imported lazily so this module can be
imported on any machine.
"""

# No "from __future__ import annotations": CuTe DSL reads the kernels' annotations at runtime.

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

SELFTEST_ARCH = "sm_90a"
SELFTEST_COMPILE_OPTIONS = f"--gpu-arch {SELFTEST_ARCH}"
SELFTEST_THREADS = 64
OOB_BUFFER_LEN = 48  # 192 bytes: stores past it land in the allocation's padding, in no allocation
INIT_BUFFER_LEN = 2 * SELFTEST_THREADS  # only the first SELFTEST_THREADS elements get written
VARIANTS = ("planted", "clean")
# The report line each tool must print for its planted bug (seen on the H200, CUDA 13.0
# compute-sanitizer 2025.3.1): a catch must be for the planted reason, not for noise.
PLANTED_REPORTS: dict[str, str] = {
    "memcheck": "Invalid __global__ write",
    "initcheck": "Uninitialized __global__ memory read",
    "racecheck": "Race reported between",
    "synccheck": "Barrier error detected",
}


@dataclass(frozen=True)
class SelftestKernel:
    """A planted/clean kernel pair for one tool and the buffer shapes it takes."""

    tool: str
    src_len: int | None  # None: the kernel takes only ``dst``
    dst_len: int


SELFTEST_KERNELS: dict[str, SelftestKernel] = {
    "memcheck": SelftestKernel("memcheck", None, OOB_BUFFER_LEN),
    "initcheck": SelftestKernel("initcheck", INIT_BUFFER_LEN, SELFTEST_THREADS),
    "racecheck": SelftestKernel("racecheck", None, SELFTEST_THREADS),
    "synccheck": SelftestKernel("synccheck", None, SELFTEST_THREADS),
}


def _check(tool: str, variant: str) -> SelftestKernel:
    if tool not in SELFTEST_KERNELS:
        raise ValueError(f"tool: expected one of {tuple(SELFTEST_KERNELS)}, got {tool!r}")
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
    return SELFTEST_KERNELS[tool]


@cache
def _launchers() -> dict[str, Callable[..., Any]]:
    """The ``@cute.jit`` launch functions, defined on first use (imports CuTe DSL)."""
    import cutlass
    import cutlass.cute as cute

    threads = SELFTEST_THREADS

    @cute.kernel
    def oob_store_kernel(dst: cute.Tensor, planted: cutlass.Constexpr[bool]):
        tidx, _, _ = cute.arch.thread_idx()
        if cutlass.const_expr(planted):
            dst[tidx] = cutlass.Float32(tidx)  # bug: tidx runs past len(dst)
        else:
            if tidx < OOB_BUFFER_LEN:
                dst[tidx] = cutlass.Float32(tidx)

    @cute.kernel
    def uninit_read_kernel(
        src: cute.Tensor, dst: cute.Tensor, planted: cutlass.Constexpr[bool]
    ):
        tidx, _, _ = cute.arch.thread_idx()
        if cutlass.const_expr(planted):
            dst[tidx] = src[tidx + threads]  # bug: the upper half was never written
        else:
            dst[tidx] = src[tidx]

    @cute.kernel
    def smem_exchange_kernel(dst: cute.Tensor, planted: cutlass.Constexpr[bool]):
        tidx, _, _ = cute.arch.thread_idx()
        buf = cute.make_tensor(
            cute.arch.alloc_smem(cutlass.Float32, threads), cute.make_layout(threads)
        )
        buf[tidx] = cutlass.Float32(tidx)
        if cutlass.const_expr(not planted):
            cute.arch.sync_threads()  # the bug is this barrier's absence
        dst[tidx] = buf[(tidx + threads // 2) % threads]

    @cute.kernel
    def partial_barrier_kernel(dst: cute.Tensor, planted: cutlass.Constexpr[bool]):
        tidx, _, _ = cute.arch.thread_idx()
        if cutlass.const_expr(planted):
            if tidx < 16:
                cute.arch.sync_threads()  # bug: only 16 of the block's threads arrive
        else:
            cute.arch.sync_threads()
        dst[tidx] = cutlass.Float32(tidx)

    def one_cta(kernel, *args):
        kernel(*args).launch(grid=[1, 1, 1], block=[threads, 1, 1])

    @cute.jit
    def memcheck_planted(dst: cute.Tensor):
        one_cta(oob_store_kernel, dst, True)

    @cute.jit
    def memcheck_clean(dst: cute.Tensor):
        one_cta(oob_store_kernel, dst, False)

    @cute.jit
    def initcheck_planted(src: cute.Tensor, dst: cute.Tensor):
        one_cta(uninit_read_kernel, src, dst, True)

    @cute.jit
    def initcheck_clean(src: cute.Tensor, dst: cute.Tensor):
        one_cta(uninit_read_kernel, src, dst, False)

    @cute.jit
    def racecheck_planted(dst: cute.Tensor):
        one_cta(smem_exchange_kernel, dst, True)

    @cute.jit
    def racecheck_clean(dst: cute.Tensor):
        one_cta(smem_exchange_kernel, dst, False)

    @cute.jit
    def synccheck_planted(dst: cute.Tensor):
        one_cta(partial_barrier_kernel, dst, True)

    @cute.jit
    def synccheck_clean(dst: cute.Tensor):
        one_cta(partial_barrier_kernel, dst, False)

    return {
        "memcheck-planted": memcheck_planted,
        "memcheck-clean": memcheck_clean,
        "initcheck-planted": initcheck_planted,
        "initcheck-clean": initcheck_clean,
        "racecheck-planted": racecheck_planted,
        "racecheck-clean": racecheck_clean,
        "synccheck-planted": synccheck_planted,
        "synccheck-clean": synccheck_clean,
    }


def build(tool: str, variant: str) -> Any:
    """Compile the ``variant`` kernel of ``tool`` for ``SELFTEST_ARCH`` (fake tensors, no GPU)."""
    spec = _check(tool, variant)
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    args = [make_fake_compact_tensor(cutlass.Float32, (spec.dst_len,))]
    if spec.src_len is not None:
        args.insert(0, make_fake_compact_tensor(cutlass.Float32, (spec.src_len,)))
    return cute.compile(_launchers()[f"{tool}-{variant}"], *args,
                        options=SELFTEST_COMPILE_OPTIONS)


def builders() -> dict[str, Callable[[], Any]]:
    """Name -> no-argument offline builder, for the compile gate."""
    return {
        f"sanitizer_selftest.{tool}-{variant}": (lambda t=tool, v=variant: build(t, v))
        for tool in SELFTEST_KERNELS
        for variant in VARIANTS
    }


def run_case(tool: str, variant: str) -> Any:
    """Launch the ``variant`` kernel of ``tool`` on the current CUDA device and synchronize.

    Returns the destination tensor (on the device). For initcheck the source
    buffer is ``torch.empty`` with only its first half written (a device-side
    fill), so the planted read touches memory nothing ever wrote.
    """
    spec = _check(tool, variant)
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    device = torch.device("cuda", torch.cuda.current_device())
    dst = torch.zeros(spec.dst_len, dtype=torch.float32, device=device)
    tensors = [dst]
    if spec.src_len is not None:
        src = torch.empty(spec.src_len, dtype=torch.float32, device=device)
        src[:SELFTEST_THREADS].fill_(1.0)
        tensors.insert(0, src)
    cute_args = [from_dlpack(t) for t in tensors]
    compiled = cute.compile(_launchers()[f"{tool}-{variant}"], *cute_args,
                            options=SELFTEST_COMPILE_OPTIONS)
    compiled(*cute_args)
    torch.cuda.synchronize(device)
    return dst
