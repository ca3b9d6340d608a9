"""The conformance table of one MegaMoE backend: each rule of docs/contract.md, pass, fail or
not run, from the JUnit reports of a run of the contract suites against that backend, with
the first line of every failure and the command that reruns that one test.

    ./run_tests.sh single --moe-backend flashinfer-sm90-cake --junitxml=out/cake.xml
    python -m tests.harness.conformance --backend flashinfer-sm90-cake out/cake.xml

A rule's tests are the ones that name it (``@pytest.mark.contract``, collected as
``tests.harness.contract_map`` collects them, against the same backend: its recipes and
weightings parametrize the tests, so a report's case ids are found only among the ids of a
collection against the backend that ran them). A rule passes when at least one of its test
cases ran and none failed; it fails when any case failed or errored (a refusal or a missing
feature fails its test, so it shows here with its sentence); it is *not run* when no case of
its tests is in the reports (another tier's rule, or a test the run did not select). A
failing rule whose every failure is a capability the backend does not declare (a feature, a
recipe or a place of the score: ``megamoe.backends.api.NOT_OFFERED``) reads *fail (not
offered)*: nothing it ran gave a wrong output.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from megamoe.backends.api import NOT_OFFERED
from tests.harness.contract_map import CONTRACT, collect_marks, doc_rules
from tests.harness.junit import case_id

PASS, FAIL, NOT_RUN = "pass", "fail", "not run"
BACKEND_TEST_DIRS = ("tests/property", "tests/single", "tests/multi")
"""The tiers whose contract tests run against a backend (``--moe-backend``): the rules the
table judges come from their marks alone. The host tier never judges a backend, and the GPU
machine that ran the reports need not have its imports (torchao, on 2026-12-05)."""


@dataclass(frozen=True)
class CaseResult:
    """One test case of a JUnit report: its key (``module.path[.Class]::name[params]``), its
    status (``pass``, ``fail``, ``error`` or ``skipped``) and its message's first line."""

    key: str
    status: str
    message: str = ""


def nodeid_key(nodeid: str) -> str:
    """``tests/single/f.py::Cls::test[p]`` -> ``tests.single.f.Cls::test[p]`` (JUnit's form)."""
    path, *rest = nodeid.split("::")
    dotted = path[:-3].replace("/", ".") if path.endswith(".py") else path.replace("/", ".")
    *classes, name = rest or [""]
    return "".join([dotted, *(f".{c}" for c in classes)]) + f"::{name}"


def junit_results(paths: Iterable[Path]) -> list[CaseResult]:
    out = []
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            key = case_id(case)
            for tag, status in (("error", "error"), ("failure", "fail"), ("skipped", "skipped")):
                el = case.find(tag)
                if el is not None:
                    first = (el.get("message") or el.text or "").strip().splitlines()
                    out.append(CaseResult(key, status, first[0][:300] if first else ""))
                    break
            else:
                out.append(CaseResult(key, PASS))
    return out


@dataclass(frozen=True)
class RuleVerdict:
    rule: str
    status: str
    ran: int
    failures: tuple[tuple[str, str], ...]
    """(node id, first line of the failure) of each failing case."""

    @property
    def not_offered(self) -> bool:
        """Did the rule fail only on capabilities the backend does not declare?"""
        return bool(self.failures) and all(NOT_OFFERED.search(m) for _, m in self.failures)

    @property
    def label(self) -> str:
        return f"{FAIL} (not offered)" if self.not_offered else self.status


def verdicts(rules: Sequence[str], marks: Mapping[str, list[str]],
             results: Sequence[CaseResult]) -> list[RuleVerdict]:
    """One verdict per rule (module docstring). ``marks``: node id -> rule ids."""
    by_key = {r.key: r for r in results}
    out = []
    for rule in rules:
        nodes = [n for n, names in marks.items() if rule in names]
        ran = [(n, by_key[nodeid_key(n)]) for n in nodes if nodeid_key(n) in by_key]
        ran = [(n, r) for n, r in ran if r.status != "skipped"]
        bad = tuple((n, r.message) for n, r in ran if r.status in ("fail", "error"))
        status = NOT_RUN if not ran else FAIL if bad else PASS
        out.append(RuleVerdict(rule, status, len(ran), bad))
    return out


def render(backend: str, table: Sequence[RuleVerdict], python: str = "python") -> str:
    lines = [f"### `{backend}`", "",
             "| rule | verdict | cases run | failing cases (first line; rerun one with the command) |",
             "|---|---|---|---|"]
    for v in table:
        shown = "<br>".join(
            f"`{n}`: {msg.replace('|', '/')} — `{python} -m pytest '{n}' --moe-backend {backend}`"
            for n, msg in v.failures[:3])
        more = f"<br>... and {len(v.failures) - 3} more" if len(v.failures) > 3 else ""
        lines.append(f"| `{v.rule}` | {v.label} | {v.ran} | {shown}{more} |")
    counts = {s: sum(v.status == s for v in table) for s in (PASS, FAIL, NOT_RUN)}
    offered = sum(v.not_offered for v in table)
    lines += ["", f"{counts[PASS]} rules pass, {counts[FAIL]} fail ({offered} of them only on "
              f"capabilities the backend does not offer), {counts[NOT_RUN]} not run."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness.conformance",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", required=True, help="the backend the reports judged")
    ap.add_argument("junit", nargs="+", type=Path, help="JUnit XML reports of the run")
    args = ap.parse_args(list(argv))
    rules = doc_rules(CONTRACT.read_text())
    marks = collect_marks(dirs=BACKEND_TEST_DIRS, moe_backend=args.backend)
    table = verdicts(rules, marks, junit_results(args.junit))
    sys.stdout.write(render(args.backend, table))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
