"""The project carries its own contract (docs/contract.md) and every rule in it names a test
(``tests.harness.contract_map``): no rule without a test unless it is marked pending with
its reason, no test naming a rule the document lacks, the generated table current, and the
documentation citing docs/contract.md rather than a file outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness import contract_map as cm

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cmap() -> cm.ContractMap:
    return cm.build_map(cm.doc_rules(cm.CONTRACT.read_text()), cm.collect_marks())


def test_every_rule_of_the_contract_names_a_test(cmap: cm.ContractMap) -> None:
    assert len(cmap.rules) >= 50
    assert cm.problems(cmap) == []


def test_the_rule_table_is_generated_from_the_tests_and_current(cmap: cm.ContractMap) -> None:
    text = cm.CONTRACT.read_text()
    assert cm.with_table(text, cm.render(cmap)) == text, (
        "docs/contract.md is stale: python -m tests.harness.contract_map --write")


def test_the_check_fails_on_what_it_must_refuse() -> None:
    doc = "**s1.a**: one. **s1.b**: two. **s2.c**: three.\n" + cm.BEGIN + "\nold\n" + cm.END
    rules = cm.doc_rules(doc)
    assert rules == ("s1.a", "s1.b", "s2.c")
    marks = {"tests/host/test_x.py::test_one[p1]": ["s1.a"],
             "tests/host/test_x.py::test_one[p2]": ["s1.a"],
             "tests/single/test_y.py::test_two": ["s2.c", "s9.nope"]}
    cmap = cm.build_map(rules, marks)
    assert cmap.tests["s1.a"] == ("tests/host/test_x.py::test_one",)  # parameters folded
    found = cm.problems(cmap, pending={"s2.c": "why"}, gaps={})
    assert any(p.startswith("rule s1.b: no test") for p in found)
    assert any("s2.c: marked pending but tested" in p for p in found)
    assert any("unknown rule 's9.nope'" in p for p in found)
    assert cm.problems(cm.build_map(rules, {}), pending={"s1.a": "x", "s1.b": "y",
                                                         "s2.c": "z"}, gaps={}) == []
    table = cm.render(cmap, pending={}, gaps={})
    assert "| `s1.b` | | *pending*: no test |" in table
    assert cm.with_table(doc, table).count(cm.BEGIN) == 1 and "old" not in cm.with_table(doc,
                                                                                         table)


CITING = ("README.md", "docs", "megamoe", "oracle", "tests", "fixtures", "sanitizers", "devtools",
          "qualify.py", "run_tests.sh", "pyproject.toml")
OUTSIDE = re.compile(r"\.\./shared/CONTRACTS|CONTRACTS\.md")


def test_docs_and_docstrings_cite_the_projects_contract() -> None:
    offenders = []
    for top in CITING:
        base = ROOT / top
        paths = [base] if base.is_file() else [
            p for p in base.rglob("*") if p.suffix in (".py", ".md", ".sh", ".toml")
            and not any(part in ("perf", "qualification", "wip", "__pycache__")
                        for part in p.relative_to(ROOT).parts)]
        for p in paths:
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                if OUTSIDE.search(line) and p != Path(__file__):
                    offenders.append(f"{p.relative_to(ROOT)}:{n}")
    assert offenders == [], "cite docs/contract.md: " + ", ".join(offenders[:10])
