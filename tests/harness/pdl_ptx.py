"""The PDL rule (``megamoe.pdl``) checked on a kernel's lowered PTX.

Every ``.entry`` of a megamoe kernel must execute ``griddepcontrol.wait`` on every path
before it touches global memory: the wait sits in the entry block (no branch, no predicated
instruction, no ``ret`` / ``exit`` before it, so it dominates the whole kernel) and no load,
store, atomic, reduction or asynchronous copy that may reach global memory comes before it
(kernel parameters, shared memory, registers and ``prefetch.tensormap`` of a parameter
descriptor are not the predecessor's memory). ``griddepcontrol.launch_dependents``, where a
kernel issues it (the expert GEMMs do not), must follow the wait: earlier, a dependent
kernel could launch before this one has waited, and the next kernel's CTAs would then be
waiting on a kernel that itself still waits.

The source rule (``await_inputs(...)`` first in every ``@cute.kernel`` body) is checked in
``tests/host/test_pdl_host.py``; this checks what the compiler made of it, kernel by kernel,
in the compile gate (``tests.harness.compile_gate``).
"""

from __future__ import annotations

import re

_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z0-9_$]+)", re.M)
_WAIT = "griddepcontrol.wait"
_LAUNCH = "griddepcontrol.launch_dependents"
_LOCAL_SPACES = (".param", ".shared", ".local", ".const", ".reg")
"""State spaces that are not another kernel's memory."""
_MEMORY_OP = re.compile(
    r"^(?:ld|ldu|st|atom|red|cp\.async|cp\.reduce\.async|multimem|prefetch|prefetchu|"
    r"cvta\.to\.global)\b")
"""Instructions that may read or write global memory (generic addresses included: a
``ld`` without a state space may reach global memory)."""
_CONTROL = re.compile(r"^(?:@!?%p\w*\s|bra\b|bra\.|ret\b|exit\b|brx\.|call\b)")
"""A branch, a return, an exit, a call or a predicated instruction: past one of these the
code is no longer the entry block."""


def _instructions(body: str) -> list[str]:
    """The body's instructions (comments, labels and directives dropped), one per entry."""
    out = []
    for raw in body.split(";"):
        # braces open and close scopes (an inline asm block's own registers), on a line of
        # their own or in front of an instruction: drop them, never the instruction
        lines = [ln.split("//", 1)[0].strip(" \t{}") for ln in raw.splitlines()]
        text = " ".join(ln for ln in lines if ln and not ln.endswith(":")
                        and not ln.startswith("."))  # a directive (.reg, .loc, .pragma, ...)
        # a label may share the line with the instruction after it
        text = re.sub(r"^\$?[A-Za-z_][\w$]*:\s*", "", text.strip(" \t{}"))
        if text:
            out.append(text)
    return out


def _entries(ptx: str) -> list[tuple[str, str]]:
    """``(name, body)`` of every ``.entry``: the text from its opening brace to the brace
    that closes it."""
    out = []
    for m in _ENTRY.finditer(ptx):
        start = ptx.index("{", ptx.index(")", m.end()))
        depth, i = 0, start
        while True:
            c = ptx[i]
            depth += c == "{"
            depth -= c == "}"
            i += 1
            if depth == 0:
                break
        out.append((m.group(1), ptx[start + 1:i - 1]))
    return out


def _reaches_global(op: str) -> bool:
    if not _MEMORY_OP.match(op):
        return False
    head = op.split()[0]
    if head.startswith(("prefetch.tensormap", "prefetch.param")):
        return False
    if ".global" in head:  # a copy between shared and global names both spaces
        return True
    return not any(space in head for space in _LOCAL_SPACES)


def pdl_violations(ptx: str) -> list[str]:
    """The rule's violations in ``ptx`` (empty: every entry keeps it; module docstring).
    PTX without any ``.entry`` is a violation too (nothing was checked)."""
    entries = _entries(ptx.replace("\0", ""))
    if not entries:
        return ["no .entry in the PTX"]
    problems = []
    for name, body in entries:
        ops = _instructions(body)
        wait = next((i for i, op in enumerate(ops) if op.startswith(_WAIT)), None)
        if wait is None:
            problems.append(f"{name}: no {_WAIT}")
            continue
        for op in ops[:wait]:
            if _CONTROL.match(op):
                problems.append(f"{name}: {_WAIT} is not in the entry block (after '{op}')")
                break
            if _reaches_global(op):
                problems.append(f"{name}: '{op}' before {_WAIT}")
                break
        launch = next((i for i, op in enumerate(ops) if op.startswith(_LAUNCH)), None)
        if launch is not None and launch < wait:
            problems.append(f"{name}: {_LAUNCH} before {_WAIT}")
    return problems
