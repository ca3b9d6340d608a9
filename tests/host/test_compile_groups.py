"""``tests.harness.compile_groups``: the tests of an opted-in module that share the values of
its ``COMPILE_GROUP_PARAMS`` share one xdist group; other tests get none."""

from __future__ import annotations

import types

from tests.harness.compile_groups import group_of, pytest_collection_modifyitems


def _item(module: types.ModuleType, **params: object) -> types.SimpleNamespace:
    item = types.SimpleNamespace(module=module, callspec=types.SimpleNamespace(params=params),
                                 marks=[])
    item.add_marker = item.marks.append
    return item


def _module(name: str, params: tuple[str, ...] | None) -> types.ModuleType:
    m = types.ModuleType(name)
    if params is not None:
        m.COMPILE_GROUP_PARAMS = params  # type: ignore[attr-defined]
    return m


def test_tests_of_one_variant_share_a_group_and_other_variants_do_not() -> None:
    gemm = _module("tests.single.gemm", ("cfg",))
    cfg_a, cfg_b = types.SimpleNamespace(name="m64n64s4"), types.SimpleNamespace(name="m64n128")
    a1, a2 = _item(gemm, cfg=cfg_a, out_dtype="bf16"), _item(gemm, cfg=cfg_a, out_dtype="f32")
    b = _item(gemm, cfg=cfg_b, out_dtype="bf16")
    assert group_of(a1) == group_of(a2) == "tests.single.gemm:m64n64s4"  # type: ignore[arg-type]
    assert group_of(b) == "tests.single.gemm:m64n128"  # type: ignore[arg-type]
    assert group_of(_item(gemm, kind="nvfp4")) is None  # type: ignore[arg-type]
    assert group_of(_item(_module("tests.single.layer", None), cfg=cfg_a)) is None  # type: ignore[arg-type]
    two = _module("tests.single.two", ("kind", "cfg"))
    assert group_of(_item(two, kind="mxfp4", cfg=cfg_a)) == "tests.single.two:mxfp4,m64n64s4"  # type: ignore[arg-type]


def test_the_hook_marks_grouped_tests_for_loadgroup_only() -> None:
    gemm = _module("tests.single.gemm", ("cfg",))
    grouped, plain = _item(gemm, cfg="c1"), _item(_module("tests.single.other", None), cfg="c1")
    pytest_collection_modifyitems([grouped, plain])  # type: ignore[list-item]
    assert [m.name for m in grouped.marks] == ["xdist_group"]
    assert grouped.marks[0].args == ("tests.single.gemm:c1",)
    assert plain.marks == []

