"""``tests.harness.dsl_memos``: each memo gives the answers of the DSL's own lookup, and the
kernels traced with them are the same, location by location and byte by byte; a memo with a
wrong key is caught by the same comparisons."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.harness import dsl_memos
from tests.harness.dsl_memos import (
    FrameInfoMemo,
    frame_key,
    install,
    memo_module_imports,
    memo_type_kind,
    module_key,
    uninstall,
)

ROOT = Path(__file__).resolve().parents[2]


def _two_sites_on_one_line(look) -> list[inspect.Traceback]:  # type: ignore[no-untyped-def]
    seen = []
    for _ in range(3):  # each site passed three times
        seen.append(look(inspect.currentframe())); seen.append(look(inspect.currentframe()))  # noqa: E702
    return seen


def _answers(infos: list[inspect.Traceback]) -> list[tuple]:
    """Every field, ``positions`` included (a ``Traceback``'s tuple equality leaves it out)."""
    return [(*i, i.positions) for i in infos]


def test_the_location_memo_answers_as_getframeinfo_and_looks_each_site_up_once() -> None:
    memo = FrameInfoMemo()
    want = _answers(_two_sites_on_one_line(inspect.getframeinfo))
    assert _answers(_two_sites_on_one_line(memo.getframeinfo)) == want
    assert want[0][-1] != want[1][-1]  # two columns of one line: told apart
    assert memo.calls == 6 and memo.kept == 2


def test_a_location_memo_keyed_without_the_instruction_offset_gives_a_wrong_column() -> None:
    wrong = FrameInfoMemo(lambda frame, context: (frame.f_code.co_filename, frame.f_code))
    want = _answers(_two_sites_on_one_line(inspect.getframeinfo))
    assert _answers(_two_sites_on_one_line(wrong.getframeinfo)) != want


def test_the_frame_key_names_the_file_since_code_objects_compare_by_content() -> None:
    source = "def f():\n    import inspect\n    return inspect.currentframe()\n"
    frames = []
    for name in ("a.py", "b.py"):
        scope: dict = {}
        exec(compile(source, name, "exec"), scope)
        frames.append(scope["f"]())
    assert frames[0].f_code == frames[1].f_code
    assert frame_key(frames[0], 1) != frame_key(frames[1], 1)


def _imports_of(self, func) -> list[str]:  # type: ignore[no-untyped-def]
    """A stand-in for the DSL's import lister: a module's import lines, read from its source."""
    self.calls += 1
    source = inspect.getsource(inspect.getmodule(func))
    return [line for line in source.splitlines() if line.startswith(("import ", "from "))]


def test_the_imports_memo_asks_once_per_module_and_answers_as_the_dsl() -> None:
    """Functions of two modules (this one and ``tests.harness.dsl_memos``): the memo asks the
    lister once per module and gives each call a fresh list equal to the lister's; a memo
    with one key for every module answers the second module with the first one's list."""
    funcs = (test_the_imports_memo_asks_once_per_module_and_answers_as_the_dsl, install,
             _answers, memo_type_kind)
    lister = types.SimpleNamespace(calls=0)
    want = [_imports_of(lister, f) for f in funcs]
    assert want[0] != want[1]
    memo = memo_module_imports(_imports_of)
    lister.calls = 0
    got = [memo(lister, f) for f in funcs]
    assert got == want and lister.calls == 2
    got[0].append("a caller's change")
    assert memo(lister, funcs[0]) == want[0]  # kept answers are not the caller's lists
    wrong = memo_module_imports(_imports_of, lambda module: "every module")
    assert [wrong(lister, f) for f in funcs] != want
    assert module_key(types.ModuleType("no_source")) is None  # asked every time, as the DSL


def test_the_type_kind_memo_answers_as_the_dsl_for_every_kind() -> None:
    """The DSL's own predicates on integer, index, float, vector and other types, against
    their memos (printed form as key) and a memo with one key for every type."""
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import arith

    with ir.Context(), ir.Location.unknown():
        kinds = [ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(1),
                 ir.IntegerType.get_signed(8), ir.IndexType.get(), ir.F32Type.get(),
                 ir.BF16Type.get(), ir.F16Type.get(), ir.F64Type.get(),
                 ir.Float8E4M3FNType.get(), ir.VectorType.get([4], ir.F32Type.get()),
                 ir.IntegerType.get_signless(32)]
        for name in dsl_memos.TYPE_KIND_FUNCTIONS:
            real = getattr(arith, name)
            real = getattr(real, "__wrapped__", real)  # the DSL's own, memo or not
            want = [real(t) for t in kinds]
            assert True in want and False in want, name
            assert [memo_type_kind(real)(t) for t in kinds] == want, name
            wrong = memo_type_kind(real, lambda t: "every type")
            assert [wrong(t) for t in kinds] != want, name


def test_install_only_where_the_dsl_internals_are_as_checked(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    class Preprocessor:
        def _get_module_imports(self, func):  # type: ignore[no-untyped-def]
            return []

    def is_float(t):  # type: ignore[no-untyped-def]
        return False

    op = types.SimpleNamespace(inspect=inspect)
    pre = types.SimpleNamespace(DSLPreprocessor=Preprocessor)
    arith = types.SimpleNamespace(_is_integer_like_type=is_float, _is_float_type=is_float)
    for name, module in ((dsl_memos.OP_MODULE, op), (dsl_memos.PREPROCESSOR_MODULE, pre),
                         (dsl_memos.ARITH_MODULE, arith)):
        monkeypatch.setitem(sys.modules, name, module)
    known = dsl_memos.KNOWN_DSL_VERSIONS[0]
    every = ("locations", "imports", *dsl_memos.TYPE_KIND_FUNCTIONS)
    assert install({dsl_memos.MEMOS_ENV: "0"}, dsl_version=lambda: known) == ()
    assert install({}, dsl_version=lambda: "9.9.9") == ()
    assert op.inspect is inspect and arith._is_float_type is is_float
    assert install({}, dsl_version=lambda: known) == every
    memo = op.inspect
    assert isinstance(memo, FrameInfoMemo) and arith._is_float_type.__wrapped__ is is_float
    assert install({}, dsl_version=lambda: known) == every and op.inspect is memo  # idempotent
    assert Preprocessor._get_module_imports.__wrapped__.__name__ == "_get_module_imports"
    uninstall()
    assert op.inspect is inspect and arith._is_float_type is is_float
    assert not hasattr(Preprocessor._get_module_imports, "__wrapped__")
    op.inspect = types.SimpleNamespace()  # a DSL whose global is no longer the module
    assert "locations" not in install({}, dsl_version=lambda: known)
    uninstall()


def test_the_record_says_whether_the_memos_were_in_effect(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tests.harness.environment import collect_environment

    monkeypatch.setattr(dsl_memos, "_dsl_version", lambda: dsl_memos.KNOWN_DSL_VERSIONS[0])
    monkeypatch.delenv(dsl_memos.MEMOS_ENV, raising=False)
    assert collect_environment()["dsl_memos"] is True
    monkeypatch.setenv(dsl_memos.MEMOS_ENV, "0")
    assert collect_environment()["dsl_memos"] is False
    monkeypatch.delenv(dsl_memos.MEMOS_ENV)
    monkeypatch.setattr(dsl_memos, "_dsl_version", lambda: "9.9.9")
    assert collect_environment()["dsl_memos"] is False


def _fingerprint(memos: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.compile_split", "--match", "route_stage",
         "--fingerprint", "--memos", memos],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("fingerprint ")), "")
    return proc.returncode, line


@pytest.mark.timeout(900)
def test_kernels_traced_with_the_memos_have_the_same_locations_and_bytes() -> None:
    """Two staging kernels of the compile gate (thousands of op locations) traced as the DSL
    does and with the memos: the same fingerprint (every location, every MLIR, PTX and cubin
    byte). With the location memo keyed without the instruction offset the locations differ;
    with one key for every type the compile fails."""
    rc, dsl = _fingerprint("dsl")
    assert rc == 0 and dsl
    assert _fingerprint("memo") == (0, dsl)
    rc, frames = _fingerprint("planted-frames")
    assert rc == 0 and frames.split()[1] != dsl.split()[1]
    assert _fingerprint("planted-types")[0] != 0
