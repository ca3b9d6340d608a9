"""``tests.harness.json_fields``: a result's fields as the JSON records hold them."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.harness.json_fields import json_fields


@dataclass(frozen=True)
class _Inner:
    name: str
    ids: tuple[str, ...]


@dataclass(frozen=True)
class _Outer:
    status: str
    inner: _Inner
    items: tuple[_Inner, ...] = ()
    nested: tuple[tuple[str, ...], ...] = ()
    extra: dict = field(default_factory=dict)


def test_fields_in_order_with_tuples_as_lists_and_nested_results_as_dicts() -> None:
    got = json_fields(_Outer("pass", _Inner("a", ("x",)), (_Inner("b", ()),), (("c", "d"),),
                             {"k": ("v",)}))
    assert list(got) == ["status", "inner", "items", "nested", "extra"]
    assert got == {"status": "pass", "inner": {"name": "a", "ids": ["x"]},
                   "items": [{"name": "b", "ids": []}], "nested": [["c", "d"]],
                   "extra": {"k": ["v"]}}


def test_renamed_fields_keep_their_place_and_omitted_ones_are_left_out() -> None:
    got = json_fields(_Outer("fail", _Inner("a", ())), renamed={"inner": "first"},
                      omit=("nested", "extra"))
    assert list(got) == ["status", "first", "items"]
