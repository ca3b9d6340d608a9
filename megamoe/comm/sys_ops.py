"""System-scope memory operations for cross-rank signalling (inline PTX: the CuTe DSL 4.3.5
has no acquire/release loads and stores, no global compare-and-swap and no global timer).

Every wrapper is one PTX statement through ``megamoe.ptx.asm_i32`` with a memory clobber and
side effects, so the compiler neither drops it nor moves memory accesses across it. The
``.sys`` scope makes a release store and an acquire load order memory for every agent that
can reach it: the other GPUs of a real world over NVLink, the other processes of an
emulated world on the same GPU (docs/contract.md s7, s11).
"""

from __future__ import annotations

from cutlass import Int32, Int64
from cutlass.cutlass_dsl import dsl_user_op

from megamoe.ptx import asm_i32


@dsl_user_op
def store_release_sys(addr: Int64, value: Int32, *, loc=None, ip=None) -> Int32:
    """``st.release.sys.global.b32 [addr], value`` (returns 0)."""
    return asm_i32("st.release.sys.global.b32 [$1], $2;\n\tmov.u32 $0, 0;", "=r,l,r,~{memory}",
                   [Int64(addr), Int32(value)], side_effects=True, loc=loc, ip=ip)


@dsl_user_op
def load_acquire_sys(addr: Int64, *, loc=None, ip=None) -> Int32:
    """``ld.acquire.sys.global.b32`` of the word at global address ``addr``."""
    return asm_i32("ld.acquire.sys.global.b32 $0, [$1];", "=r,l,~{memory}", [Int64(addr)],
                   side_effects=True, loc=loc, ip=ip)


@dsl_user_op
def cas_gpu(addr: Int64, compare: Int32, value: Int32, *, loc=None, ip=None) -> Int32:
    """``atom.acq_rel.gpu.global.cas.b32``: ``value`` into the word at ``addr`` when it
    holds ``compare``; returns the word before."""
    return asm_i32("atom.acq_rel.gpu.global.cas.b32 $0, [$1], $2, $3;", "=r,l,r,r,~{memory}",
                   [Int64(addr), Int32(compare), Int32(value)], side_effects=True, loc=loc,
                   ip=ip)


@dsl_user_op
def fence_sys(*, loc=None, ip=None) -> Int32:
    """``fence.acq_rel.sys`` (returns 0): the writes this thread has seen, the completed
    kernels before it in the stream included, are ordered before its next store."""
    return asm_i32("fence.acq_rel.sys;\n\tmov.u32 $0, 0;", "=r,~{memory}", [],
                   side_effects=True, loc=loc, ip=ip)


@dsl_user_op
def globaltimer_lo(*, loc=None, ip=None) -> Int32:
    """The low 32 bits of ``%globaltimer`` (nanoseconds; wraps every 4.3 s, so callers add
    up differences between close readings)."""
    return asm_i32("mov.u32 $0, %globaltimer_lo;", "=r", [], side_effects=True, loc=loc, ip=ip)


@dsl_user_op
def nanosleep(ns: Int32, *, loc=None, ip=None) -> Int32:
    """``nanosleep.u32 ns`` (returns 0): back off between polls, so a spinning rank leaves
    the SM (and, in the emulated world, the time slice) to others."""
    return asm_i32("nanosleep.u32 $1;\n\tmov.u32 $0, 0;", "=r,r", [Int32(ns)],
                   side_effects=True, loc=loc, ip=ip)
