"""``tests.harness.dsl_locations``: the DSL's op locations looked up once per call site give
the same answers as ``inspect.getframeinfo`` and the same kernels, location by location and
byte by byte; a memo with a wrong key is caught by the same comparisons."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.harness import dsl_locations
from tests.harness.dsl_locations import FrameInfoMemo, frame_key, install, uninstall

ROOT = Path(__file__).resolve().parents[2]


def _two_sites_on_one_line(look) -> list[inspect.Traceback]:  # type: ignore[no-untyped-def]
    seen = []
    for _ in range(3):  # each site passed three times
        seen.append(look(inspect.currentframe())); seen.append(look(inspect.currentframe()))  # noqa: E702
    return seen


def _answers(infos: list[inspect.Traceback]) -> list[tuple]:
    """Every field, ``positions`` included (a ``Traceback``'s tuple equality leaves it out)."""
    return [(*i, i.positions) for i in infos]


def test_the_memo_answers_as_getframeinfo_at_every_site_and_looks_each_up_once() -> None:
    memo = FrameInfoMemo()
    want = _answers(_two_sites_on_one_line(inspect.getframeinfo))
    assert _answers(_two_sites_on_one_line(memo.getframeinfo)) == want
    assert want[0][-1] != want[1][-1]  # two columns of one line: told apart
    assert memo.calls == 6 and memo.kept == 2


def test_a_memo_keyed_without_the_instruction_offset_gives_a_wrong_column() -> None:
    wrong = FrameInfoMemo(lambda frame, context: (frame.f_code.co_filename, frame.f_code))
    want = _answers(_two_sites_on_one_line(inspect.getframeinfo))
    assert _answers(_two_sites_on_one_line(wrong.getframeinfo)) != want


def test_the_key_names_the_file_since_code_objects_compare_by_content() -> None:
    source = "def f():\n    import inspect\n    return inspect.currentframe()\n"
    frames = []
    for name in ("a.py", "b.py"):
        scope: dict = {}
        exec(compile(source, name, "exec"), scope)
        frames.append(scope["f"]())
    assert frames[0].f_code == frames[1].f_code
    assert frame_key(frames[0], 1) != frame_key(frames[1], 1)


def test_install_only_where_the_dsl_module_is_as_checked(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    op = types.SimpleNamespace(inspect=inspect)
    monkeypatch.setitem(sys.modules, dsl_locations.OP_MODULE, op)
    known = dsl_locations.KNOWN_DSL_VERSIONS[0]
    assert install({dsl_locations.MEMO_ENV: "0"}, dsl_version=lambda: known) is None
    assert op.inspect is inspect
    assert install({}, dsl_version=lambda: "9.9.9") is None and op.inspect is inspect
    memo = install({}, dsl_version=lambda: known)
    assert isinstance(memo, FrameInfoMemo) and op.inspect is memo
    assert install({}, dsl_version=lambda: known) is memo  # idempotent
    uninstall()
    assert op.inspect is inspect
    op.inspect = types.SimpleNamespace()  # a DSL whose global is no longer the module
    assert install({}, dsl_version=lambda: known) is None


def _fingerprint(locations: str) -> tuple[str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.compile_split", "--match", "route_stage",
         "--fingerprint", "--locations", locations],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("fingerprint "))
    located, outputs = line.split()[1:]
    return located, outputs


@pytest.mark.timeout(900)
def test_kernels_traced_with_the_memo_have_the_same_locations_and_bytes() -> None:
    """Two staging kernels of the compile gate (thousands of op locations) traced as the DSL
    does, with the memo, and with the memo keyed on the code object alone: the memo's
    locations, MLIR, PTX and cubins equal the DSL's own; the wrong key's locations do not."""
    dsl = _fingerprint("dsl")
    assert _fingerprint("memo") == dsl
    wrong = _fingerprint("memo-without-offset")
    assert wrong[0] != dsl[0]
