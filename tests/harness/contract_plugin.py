"""pytest plugin of ``tests.harness.contract_map``: at collection, write every test's
``contract`` marks (the rule ids of docs/contract.md it checks) as JSON to the path in
``MEGAMOE_CONTRACT_MAP_OUT``."""

from __future__ import annotations

import json
import os

import pytest

OUT_ENV = "MEGAMOE_CONTRACT_MAP_OUT"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    out = os.environ.get(OUT_ENV)
    if not out:
        return
    marks: dict[str, list[str]] = {}
    for item in items:
        rules = [r for m in item.iter_markers("contract") for r in m.args]
        if rules:
            marks[item.nodeid] = rules
    with open(out, "w", encoding="utf-8") as f:
        json.dump(marks, f)
