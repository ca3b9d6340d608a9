"""A compiled CuTe DSL launcher casts each argument by its parameter's annotation, and a Python
scalar whose annotation it cannot read becomes what the DSL makes of a bare ``int``, ``float``
or ``bool``: Int32, Float32, Boolean. Under ``from __future__ import annotations`` every
annotation is a string the DSL does not read, so a Python ``int`` passed for an ``Int64``
parameter arrives as 32 bits. That is how the step signal's bound (docs/contract.md s7, 60 or
120 s in nanoseconds) reached the kernel as about 4 s on an H100 (2026-12-05,
``tests/multi/test_ep_timeouts.py``). Rule: a ``@cute.jit`` function with a parameter of any
other DSL scalar type lives in a module whose annotations the DSL can read."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCALAR_ADAPTED = frozenset({"Int32", "Float32", "Boolean"})
"""What the DSL makes of a Python int, float and bool (``_convert_python_scalar``)."""


def dsl_scalar_types() -> frozenset[str]:
    import cutlass
    from cutlass.base_dsl.typing import NumericMeta

    return frozenset(n for n, o in vars(cutlass).items() if isinstance(o, NumericMeta))


def unread_wide_scalars(source: str, scalars: frozenset[str]) -> list[str]:
    """``function(parameter: Type)`` for every ``@cute.jit`` parameter annotated with a DSL
    scalar type other than ``SCALAR_ADAPTED`` in a module with string annotations."""
    tree = ast.parse(source)
    stringly = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                   and any(a.name == "annotations" for a in n.names) for n in tree.body)
    if not stringly:
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        if not any(ast.unparse(d).split("(")[0] == "cute.jit" for d in node.decorator_list):
            continue
        for arg in [*node.args.args, *node.args.kwonlyargs]:
            name = ast.unparse(arg.annotation).split(".")[-1] if arg.annotation else ""
            if name in scalars and name not in SCALAR_ADAPTED:
                out.append(f"{node.name}({arg.arg}: {name})")
    return out


BOUND_NS = 60 * 10**9
"""The multi tier's late-peer bound, 60 s, in nanoseconds: past 2**32."""


def bound_as_launched(annotations_as_strings: bool = False) -> tuple[int, int]:
    """The step signal launcher's ``timeout_ns`` argument as the DSL's executor hands it to the
    compiled code, given the Python int ``BOUND_NS`` (the call in ``megamoe.comm.signal``):
    the word behind its argument pointer read as int64 and as int32. The executor works on
    the launcher's argument spec (``ExecutionArgs``, CuTe DSL 4.3.5); ``annotations_as_strings``
    gives it the spec a module under ``from __future__ import annotations`` has."""
    import ctypes
    import inspect

    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.base_dsl.jit_executor import ExecutionArgs
    from cutlass.cute.runtime import make_ptr

    from megamoe.comm.signal_kernel import signal_launch

    spec = inspect.getfullargspec(signal_launch.__wrapped__)
    if annotations_as_strings:
        spec = spec._replace(annotations={k: getattr(a, "__name__", str(a))
                                          for k, a in spec.annotations.items()})
    gm = cute.AddressSpace.gmem
    p64 = make_ptr(cutlass.Int64, 1 << 20, gm, assumed_align=8)
    p32 = make_ptr(cutlass.Int32, 1 << 20, gm, assumed_align=4)
    args = [p64, 0, 2, p32, p32, 1, BOUND_NS, cuda.CUstream(0)]
    assert spec.args.index("timeout_ns") == 6
    exe, _keep = ExecutionArgs(spec, "signal_launch").generate_execution_args(args, {})
    word = exe[6].value if isinstance(exe[6], ctypes.c_void_p) else exe[6]
    return (ctypes.cast(word, ctypes.POINTER(ctypes.c_int64))[0],
            ctypes.cast(word, ctypes.POINTER(ctypes.c_int32))[0])


def test_the_signal_launcher_gets_a_python_int_bound_whole() -> None:
    assert bound_as_launched()[0] == BOUND_NS


def test_the_planted_string_annotations_cut_the_bound_to_32_bits() -> None:
    """The module as it was: the executor casts the int as a bare int, to Int32 (on an H100 the
    60 s bound expired after about 4 s: 60e9 mod 2**32 ns is 4.17 s)."""
    wide, narrow = bound_as_launched(annotations_as_strings=True)
    assert wide != BOUND_NS
    assert narrow == (BOUND_NS + 2**31) % 2**32 - 2**31


def test_every_launcher_with_a_wide_scalar_has_annotations_the_dsl_reads() -> None:
    scalars = dsl_scalar_types()
    assert {"Int64", "Int32", "Float32"} <= scalars
    bad = {str(p.relative_to(ROOT)): found for p in sorted((ROOT / "megamoe").rglob("*.py"))
           if (found := unread_wide_scalars(p.read_text(), scalars))}
    assert not bad, f"string annotations hide these parameters' types from the DSL: {bad}"


@pytest.mark.parametrize(("source", "found"), [
    ("from __future__ import annotations\n@cute.jit\ndef f(t: Int64, s: Int32): pass\n",
     ["f(t: Int64)"]),
    ("from __future__ import annotations\n@cute.jit\ndef f(t: cutlass.Uint64): pass\n",
     ["f(t: Uint64)"]),
    ("@cute.jit\ndef f(t: Int64): pass\n", []),
    ("from __future__ import annotations\n@cute.jit\ndef f(c: Float32, b: Boolean): pass\n", []),
    ("from __future__ import annotations\ndef f(t: Int64): pass\n", []),
])
def test_the_scan_finds_a_hidden_wide_scalar(source: str, found: list[str]) -> None:
    """The planted bug: the signal kernel's module as it was (string annotations, an ``Int64``
    bound) is found; readable annotations, adapted types and plain functions are not."""
    assert unread_wide_scalars(source, dsl_scalar_types()) == found


def test_the_signal_kernel_module_as_it_was_is_found() -> None:
    path = ROOT / "megamoe" / "comm" / "signal_kernel.py"
    planted = "from __future__ import annotations\n" + path.read_text()
    assert unread_wide_scalars(planted, dsl_scalar_types()) == ["signal_launch(timeout_ns: Int64)"]
