"""The PDL rule (megamoe.pdl; docs/contract.md s9): every megamoe kernel waits for the kernel
before it before touching global memory, and every launch carries the PDL attribute.

Checked here on the source (every ``@cute.kernel`` body starts with ``await_inputs(...)``,
every ``.launch(...)`` passes ``use_pdl=PDL``) and, with synthetic PTX, the checker the
compile gate runs on every kernel's lowered PTX (``tests.harness.pdl_ptx``; the gate's own
test applies it to the real PTX). Each check is shown to catch a planted break.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from megamoe import pdl
from megamoe.errors import ConfigError
from tests.harness.pdl_ptx import pdl_violations

ROOT = Path(__file__).resolve().parents[2]
KERNEL_SOURCES = sorted(p for p in (ROOT / "megamoe").rglob("*.py")
                        if "@cute.kernel" in p.read_text())


def source_violations(source: str) -> list[str]:
    """The source rule's violations in one module: each ``@cute.kernel`` function whose
    first statement (after a docstring) is not a call of ``await_inputs``, and each
    ``.launch(...)`` call without ``use_pdl=PDL``."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d) == "cute.kernel" for d in node.decorator_list):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                body = body[1:]
            first = body[0] if body else None
            if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
                    and ast.unparse(first.value.func) == "await_inputs"):
                problems.append(f"kernel {node.name}: first statement is not await_inputs()")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "launch"
                and not any(k.arg == "use_pdl" and ast.unparse(k.value) == "PDL"
                            for k in node.keywords)):
            problems.append(f"line {node.lineno}: launch(...) without use_pdl=PDL")
    return problems


def test_the_kernel_modules_are_found() -> None:
    names = {p.name for p in KERNEL_SOURCES}
    assert {"mxfp4_gemm_kernel.py", "grouped_gemm_kernel.py", "combine_kernel.py",
            "layout_kernel.py", "route_kernel.py", "permute_kernel.py"} <= names


@pytest.mark.parametrize("path", KERNEL_SOURCES, ids=lambda p: p.name)
def test_every_kernel_waits_first_and_every_launch_allows_pdl(path: Path) -> None:
    source = path.read_text()
    assert "@cute.kernel" in source and ".launch(" in source
    assert source_violations(source) == []


PLANTED_SOURCE = '''
@cute.kernel
def reads_first(p: cute.Pointer):
    """A docstring may come first."""
    x = p[0]
    await_inputs()

@cute.kernel
def waits(p: cute.Pointer):
    """Fine."""
    await_inputs()
    x = p[0]

@cute.kernel
def never_waits(p: cute.Pointer):
    x = p[0]

def launch(p):
    waits(p).launch(grid=[1, 1, 1], block=[32, 1, 1], stream=stream, use_pdl=PDL)
    never_waits(p).launch(grid=[1, 1, 1], block=[32, 1, 1], stream=stream)
    reads_first(p).launch(grid=[1, 1, 1], block=[32, 1, 1], stream=stream, use_pdl=True)
'''


def test_the_source_check_catches_planted_breaks() -> None:
    assert sorted(source_violations(PLANTED_SOURCE)) == [
        "kernel never_waits: first statement is not await_inputs()",
        "kernel reads_first: first statement is not await_inputs()",
        "line 20: launch(...) without use_pdl=PDL",
        "line 21: launch(...) without use_pdl=PDL",
    ]


def _ptx(*body: str) -> str:
    lines = "\n".join(f"\t{b}" for b in body)
    return (".version 8.8\n.target sm_90a\n.address_size 64\n\n"
            ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\t.reg .b64 %rd<4>;\n"
            f"{lines}\n}}\n")


WAIT, LAUNCH = "griddepcontrol.wait;", "griddepcontrol.launch_dependents;"
PARAM = "ld.param.u64 %rd1, [k_param_0];"


def test_ptx_that_waits_first_passes() -> None:
    ok = _ptx(PARAM, "ld.shared.u32 %r1, [%rd2];", "prefetch.tensormap [%rd1];", WAIT,
              LAUNCH, "ld.global.u32 %r2, [%rd1];", "st.global.u32 [%rd1], %r2;", "ret;")
    assert pdl_violations(ok) == []


@pytest.mark.parametrize("body, expected", [
    ((PARAM, "ld.global.u32 %r2, [%rd1];", WAIT, LAUNCH), "before griddepcontrol.wait"),
    ((PARAM, "ld.u32 %r2, [%rd1];", WAIT, LAUNCH), "before griddepcontrol.wait"),
    ((PARAM, "{ld.global.u32 %r2, [%rd1];", "}", WAIT, LAUNCH), "before griddepcontrol.wait"),
    ((PARAM, "{", ".reg .b32 %t;", "st.global.u32 [%rd1], %t;", "}", WAIT, LAUNCH),
     "before griddepcontrol.wait"),
    ((PARAM, "atom.global.add.u32 %r2, [%rd1], 1;", WAIT, LAUNCH), "before griddepcontrol.wait"),
    ((PARAM, "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%r1], [%rd1, {%r2, %r3}], [%r4];", WAIT, LAUNCH), "before griddepcontrol.wait"),
    ((PARAM, "setp.eq.s32 %p1, %r1, 0;", "@%p1 bra $L__BB0_2;", WAIT, LAUNCH),
     "not in the entry block"),
    ((PARAM, "ret;", WAIT, LAUNCH), "not in the entry block"),
    ((PARAM, LAUNCH, WAIT), "launch_dependents before griddepcontrol.wait"),
    ((PARAM, "ld.global.u32 %r2, [%rd1];"), "no griddepcontrol.wait"),
])
def test_ptx_check_catches_planted_breaks(body: tuple[str, ...], expected: str) -> None:
    found = pdl_violations(_ptx(*body))
    assert len(found) == 1 and expected in found[0], found


def test_ptx_that_waits_without_releasing_its_dependents_passes() -> None:
    """The expert GEMMs' form: their dependents launch as their CTAs exit."""
    assert pdl_violations(_ptx(PARAM, WAIT, "ld.global.u32 %r2, [%rd1];", "ret;")) == []


def test_the_gemms_let_their_dependents_launch_only_as_they_exit() -> None:
    """The measured choice (megamoe.pdl): the GEMM kernels wait without releasing their
    dependents, every other kernel releases them at once."""
    for path in KERNEL_SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "await_inputs":
                gemm = path.name in ("grouped_gemm_kernel.py", "mxfp4_gemm_kernel.py",
                                     "mx_gemv_kernel.py")
                assert ast.unparse(node) == ("await_inputs(launch_dependents=False)" if gemm
                                             else "await_inputs()"), path.name


def test_ptx_check_refuses_text_without_an_entry() -> None:
    assert pdl_violations("// nothing here\n") == ["no .entry in the PTX"]


def test_ptx_check_looks_at_every_entry() -> None:
    good = _ptx(PARAM, WAIT, LAUNCH, "ld.global.u32 %r2, [%rd1];")
    bad = _ptx(PARAM, "st.global.u32 [%rd1], %r2;", WAIT, LAUNCH).replace("entry k(", "entry j(")
    found = pdl_violations(good + bad)
    assert len(found) == 1 and found[0].startswith("j: ")


@pytest.mark.parametrize("raw, expected", [
    (None, True), ("", True), ("1", True), ("on", True), (" TRUE ", True), ("yes", True),
    ("0", False), ("off", False), ("False", False), ("no", False),
])
def test_the_pdl_setting_parses(raw: str | None, expected: bool) -> None:
    env = {} if raw is None else {pdl.ENV_VAR: raw}
    assert pdl.read_pdl(env) is expected


def test_a_bad_pdl_setting_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as err:
        pdl.read_pdl({pdl.ENV_VAR: "maybe"})
    assert pdl.ENV_VAR in str(err.value) and "'maybe'" in str(err.value)
