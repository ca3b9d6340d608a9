"""A frozen dataclass's fields as the JSON records of the harness hold them.

The records (``qualification.json``, the sanitizer reports) write a result's fields by name, in
declaration order, with tuples as lists and nested results as dicts: ``json_fields`` is that
one conversion, which the results' ``as_dict`` methods share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


def json_fields(record: object, *, renamed: Mapping[str, str] | None = None,
                omit: tuple[str, ...] = ()) -> dict[str, object]:
    """``record``'s dataclass fields by name, in declaration order, as JSON values: tuples and
    lists as lists, dicts as dicts, nested dataclasses as their own ``json_fields``, at any
    depth. ``renamed`` maps a field to the key it is written under; ``omit`` leaves fields
    out."""
    names = renamed or {}
    return {names.get(f.name, f.name): _json_value(getattr(record, f.name))
            for f in dataclasses.fields(record)  # type: ignore[arg-type]
            if f.name not in omit}


def _json_value(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_fields(value)
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    return value
