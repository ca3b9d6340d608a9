"""Programmatic dependent launch (PDL) between megamoe's kernels (sm_90; docs/contract.md s9).

A forward is a chain of small kernels (staging, layout, route tables, gathers, the two
expert GEMMs, the A2 quantizer, the scatter, the combine). In plain stream order each one
is launched only after the one before it has finished and flushed its writes, so every
boundary costs a launch and a ramp-up with the GPU idle; at a few tokens that is a large
share of the forward. With PDL the next kernel is launched while the current one runs and
its CTAs wait on the GPU instead.

The rule every megamoe kernel keeps, so that PDL changes timing and never a bit:

- every kernel body starts with ``await_inputs(...)``, before any global memory access (a
  docstring may precede it): ``griddepcontrol.wait`` holds the CTA until the kernel before
  it in the stream has completed and its writes are visible, so a kernel never reads what
  its predecessor has not finished writing, nor overwrites what its predecessor still
  reads. Every CTA waits, dead ones included, so a kernel never completes before its
  predecessor and the order is transitive down the chain. The small kernels then issue
  ``griddepcontrol.launch_dependents`` at once (the next kernel may launch now, its CTAs
  waiting in their own ``await_inputs``); the expert GEMMs do not
  (``launch_dependents=False``: their dependents launch as their CTAs exit). Measured on
  the H200 (docs/perf.md "Session 30"): with the GEMMs also releasing their dependents at
  once, DeepSeek ``fp8_mxfp4`` one expert T = 16 took 96.8 us against 85.9 us, and no case
  was more than 2 % faster;
- every launch carries the PDL attribute when ``PDL`` is on (``launch(..., use_pdl=PDL)``).

Without the attribute (``MEGAMOE_PDL=0``, or a kernel after a memcpy or a host-side
operation) the wait returns at once and the kernels run in plain stream order: the setting
is for A/B timing and for ruling PDL out while debugging. Outputs are the same bits either
way (tests/single/test_pdl.py); host tests check the rule on the source
(tests/host/test_pdl_host.py) and on the lowered PTX of every registered kernel (the
compile gate, tests/host/test_compile_gate.py).

The setting is read once, at import (the compiled kernels carry the attribute).
"""

from __future__ import annotations

from collections.abc import Mapping

import cutlass.cute as cute
from cutlass.cutlass_dsl import dsl_user_op

from megamoe.env_flag import read_on_off

ENV_VAR = "MEGAMOE_PDL"


def read_pdl(environ: Mapping[str, str] | None = None) -> bool:
    """Parse ``MEGAMOE_PDL`` (``megamoe.env_flag.read_on_off``): unset or empty -> True;
    ``0/false/off/no`` -> False; ``1/true/on/yes`` -> True; anything else raises
    ``ConfigError``."""
    return read_on_off(ENV_VAR, environ)


PDL: bool = read_pdl()
"""Whether megamoe's launches carry the PDL attribute (``MEGAMOE_PDL``, read at import)."""


@dsl_user_op
def await_inputs(launch_dependents: bool = True, *, loc=None, ip=None) -> None:
    """The first statement of every megamoe kernel (module docstring): wait until the kernel
    before this one in the stream has completed and its writes are visible, then let the
    next kernel launch (``launch_dependents``; without it the next kernel launches as this
    one's CTAs exit)."""
    cute.arch.griddepcontrol_wait(loc=loc, ip=ip)
    if launch_dependents:
        cute.arch.griddepcontrol_launch_dependents(loc=loc, ip=ip)
