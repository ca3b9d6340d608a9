"""The bounded all-to-all signal of an EP forward step, one CuTe DSL launch (docs/contract.md
s7: cross-rank waits are bounded and a peer that never arrives becomes a timeout error
naming the rank and the step).

One CTA of ``THREADS`` threads; ``table[d]`` is the address of rank d's flag words (int32
``[P]``, one per source rank) and ``epoch`` this rank's count of signals so far.

1. ``e = epoch + 1``; a ``fence.acq_rel.sys``: the writes of the kernels before this one
   (complete: ``await_inputs``), the rows this rank pushed to its peers included, are
   ordered before the flags;
2. unless the status word already records a failure, thread ``t`` stores ``e`` with
   ``st.release.sys`` into flag ``rank`` of every rank ``d = t, t + THREADS, ...`` (its own
   included). A failed rank signals no more: a late peer then times out at the next step
   instead of reading rows that the failed forward pushed from a layout it never agreed to;
3. unless the status word already records a failure (a failed world waits no more, so a dead
   peer costs one timeout, not one per step), thread ``t`` waits on its own flags of ranks
   ``t, t + THREADS, ...`` with ``ld.acquire.sys`` until each holds at least ``e`` (a peer
   may already be one step ahead), sleeping ``SLEEP_NS`` between polls, at most
   ``timeout_ns`` by ``%globaltimer`` (``elapsed_ns``: the time between two close readings,
   across a wrap of the low word, and none when the timer reads earlier than before). A wait
   that expires sets the status word from 0 to
   ``STATUS_TIMEOUT`` (compare-and-swap: the first failure is kept) and writes the step,
   the missing peer and ``e`` beside it;
4. after a CTA barrier thread 0 stores ``e`` into ``epoch``.

Flags only ever grow, so nothing is reset between forwards or graph replays: the epoch
lives on the device and advances on every replay, in the same order on every rank (every
rank takes part in every forward). The kernels after this one read what the peers pushed
(their ``await_inputs`` holds them until this kernel completes).
"""

# No "from __future__ import annotations": the DSL casts a launcher's arguments by their
# annotations, and reads a string annotation as none (tests/host/test_dsl_annotations.py).
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64
from cutlass.cute.runtime import make_ptr

from megamoe.comm.sys_ops import (
    cas_gpu,
    fence_sys,
    globaltimer_lo,
    load_acquire_sys,
    nanosleep,
    store_release_sys,
)
from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs

THREADS = 32
SLEEP_NS = 200
STATUS_WORDS = 4
"""The status word and what it names: ``[code, step, peer, epoch]``."""
STATUS_OK = 0
STATUS_TIMEOUT = 1
_FAKE_ADDR = 1 << 20


def elapsed_ns(now: Int32, last: Int32) -> Int64:
    """Nanoseconds between two readings of ``%globaltimer_lo``: their difference modulo
    2**32 read as signed (a wrap of the low word between them counts as the time it was),
    and 0 when ``now`` reads earlier than ``last`` (read unsigned, such a reading would
    count as 4.3 s). A gap over 2.1 s between two polls would also count 0 and lengthen the
    wait: the bound only grows, never shrinks."""
    return Int64(cutlass.max(now - last, Int32(0)))


@cute.kernel
def _signal_kernel(table_ptr: cute.Pointer, rank: Int32, size: Int32, epoch_ptr: cute.Pointer,
                   status_ptr: cute.Pointer, step: Int32, timeout_ns: Int64):
    await_inputs()
    tidx, _, _ = cute.arch.thread_idx()
    m_tab = cute.make_tensor(table_ptr, cute.make_layout(size))
    m_ep = cute.make_tensor(epoch_ptr, cute.make_layout(1))
    m_st = cute.make_tensor(status_ptr, cute.make_layout(STATUS_WORDS))
    e = m_ep[0] + Int32(1)
    healthy = m_st[0] == Int32(STATUS_OK)
    fence_sys()
    mine = m_tab[rank]
    if healthy:
        for d in range(tidx, size, THREADS):
            store_release_sys(m_tab[d] + Int64(4) * Int64(rank), e)
        for src in range(tidx, size, THREADS):
            addr = mine + Int64(4) * Int64(src)
            v = load_acquire_sys(addr)
            last = globaltimer_lo()
            waited = Int64(0)
            while (v - e < Int32(0)) & (waited < timeout_ns):
                nanosleep(Int32(SLEEP_NS))
                now = globaltimer_lo()
                waited = waited + elapsed_ns(now, last)
                last = now
                v = load_acquire_sys(addr)
            # the CAS address is the status pointer's own: the same CAS through an address
            # passed as a separate Int64 argument faulted on an H200 (illegal address)
            if v - e < Int32(0):  # noqa: SIM102 - the CAS runs for a failed wait only
                if cas_gpu(status_ptr.toint(), Int32(STATUS_OK),
                           Int32(STATUS_TIMEOUT)) == Int32(0):
                    m_st[1] = step
                    m_st[2] = src
                    m_st[3] = e
    cute.arch.sync_threads()
    if tidx == Int32(0):
        m_ep[0] = e


@cute.jit
def signal_launch(table_ptr: cute.Pointer, rank: Int32, size: Int32, epoch_ptr: cute.Pointer,
                  status_ptr: cute.Pointer, step: Int32, timeout_ns: Int64,
                  stream: cuda.CUstream):
    _signal_kernel(table_ptr, rank, size, epoch_ptr, status_ptr, step, timeout_ns).launch(
        grid=[1, 1, 1], block=[THREADS, 1, 1], stream=stream, use_pdl=PDL)


def compile_signal():
    """Every size, address and the timeout are runtime arguments."""
    gm = cute.AddressSpace.gmem
    i0 = Int32(0)
    return cute.compile(
        signal_launch, make_ptr(Int64, _FAKE_ADDR, gm, assumed_align=8), i0, i0,
        make_ptr(Int32, _FAKE_ADDR, gm, assumed_align=4),
        make_ptr(Int32, _FAKE_ADDR, gm, assumed_align=4), i0, Int64(0),
        cuda.CUstream(0),
    )


@register_kernel("ep_signal")
def build_signal():
    return compile_signal()


__all__ = [
    "STATUS_OK",
    "STATUS_TIMEOUT",
    "STATUS_WORDS",
    "THREADS",
    "compile_signal",
    "cutlass",
    "signal_launch",
]
