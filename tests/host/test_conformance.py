"""The conformance table (``tests.harness.conformance``): a rule passes when its test cases ran
and none failed, fails with each failing case's first line and a rerun command, and is *not
run* when none of its cases is in the reports; skipped cases never count as run. End to end on
a real pytest run of one host file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness.conformance import (
    BACKEND_TEST_DIRS,
    FAIL,
    NOT_RUN,
    PASS,
    CaseResult,
    junit_results,
    nodeid_key,
    render,
    verdicts,
)
from tests.harness.contract_map import CONTRACT, collect_marks, doc_rules

ROOT = Path(__file__).resolve().parents[2]
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.single.test_a" name="test_rows[bf16]" time="1"/>
<testcase classname="tests.single.test_a" name="test_rows[mxfp8]" time="1">
  <failure message="backend x implements recipes bf16, not mxfp8&#10;more">trace</failure>
</testcase>
<testcase classname="tests.single.test_a.TestGraphs" name="test_replay" time="1">
  <skipped message="never" type="pytest.skip"/>
</testcase>
<testcase classname="tests.single.test_b" name="test_bits" time="1"/>
</testsuite></testsuites>
"""
MARKS = {
    "tests/single/test_a.py::test_rows[bf16]": ["s8.row-tolerance"],
    "tests/single/test_a.py::test_rows[mxfp8]": ["s8.row-tolerance"],
    "tests/single/test_a.py::TestGraphs::test_replay": ["s9.replay-equals-eager"],
    "tests/single/test_b.py::test_bits": ["s8.invariance"],
    "tests/single/test_c.py::test_never_ran": ["s6.inactive-rows-zero"],
}
RULES = ("s6.inactive-rows-zero", "s8.row-tolerance", "s8.invariance", "s9.replay-equals-eager")


def test_node_ids_map_to_junit_keys() -> None:
    assert nodeid_key("tests/single/test_a.py::test_rows[bf16]") == "tests.single.test_a::test_rows[bf16]"
    assert nodeid_key("tests/single/test_a.py::TestGraphs::test_replay") == (
        "tests.single.test_a.TestGraphs::test_replay")


def test_each_rule_gets_pass_fail_or_not_run(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(JUNIT)
    results = junit_results([report])
    assert CaseResult("tests.single.test_a::test_rows[mxfp8]", "fail",
                      "backend x implements recipes bf16, not mxfp8") in results
    table = {v.rule: v for v in verdicts(RULES, MARKS, results)}
    assert table["s8.invariance"].status == PASS and table["s8.invariance"].ran == 1
    assert table["s8.row-tolerance"].status == FAIL and table["s8.row-tolerance"].ran == 2
    assert table["s8.row-tolerance"].failures == (
        ("tests/single/test_a.py::test_rows[mxfp8]", "backend x implements recipes bf16, not mxfp8"),)
    assert table["s9.replay-equals-eager"].status == NOT_RUN  # skipped: never counts as run
    assert table["s6.inactive-rows-zero"].status == NOT_RUN
    text = render("x", list(table.values()))
    assert "python -m pytest 'tests/single/test_a.py::test_rows[mxfp8]' --moe-backend x" in text
    assert "| `s8.row-tolerance` | fail (not offered) | 2 |" in text
    assert "1 rules pass, 1 fail (1 of them only on capabilities the backend does not offer), " \
        "2 not run." in text


def test_a_wrong_output_beside_a_missing_capability_is_a_plain_failure() -> None:
    """A rule reads *fail (not offered)* only when every failure is a capability the backend
    does not declare; one wrong row among them makes it a plain failure."""
    gap = CaseResult("tests.single.test_a::test_rows[mxfp8]", "fail",
                     "backend x implements recipes bf16, not mxfp8")
    wrong = CaseResult("tests.single.test_a::test_rows[bf16]", "fail",
                       "AssertionError: live rows above relative L2 0.01 (worst 0.517): 3 row(s)")
    both = {v.rule: v for v in verdicts(RULES, MARKS, [gap, wrong])}["s8.row-tolerance"]
    assert both.status == FAIL and not both.not_offered and both.label == "fail"
    only_gap = {v.rule: v for v in verdicts(RULES, MARKS, [gap])}["s8.row-tolerance"]
    assert only_gap.not_offered and only_gap.label == "fail (not offered)"


def test_every_sentence_of_a_missing_capability_is_recognised() -> None:
    """The sentences ``megamoe.backends.api`` makes for a feature, a recipe and a place of the
    score that a backend does not declare, as a JUnit report's first line carries them."""
    from megamoe.backends import BackendInfo, feature_refusal, recipe_refusal, weighting_refusal
    from megamoe.backends.api import NOT_OFFERED

    info = BackendInfo("flashinfer-sm90-cake", "0.7.2.post1", ("sm_90",), ("bf16",),
                       weightings=("combine", "late"))
    sentences = [feature_refusal(info, "out_buffer", "route_errors"),
                 recipe_refusal(info, "mxfp8"),
                 f"AssertionError: {weighting_refusal(info, 'early', 'late')}"]
    assert None not in sentences
    assert all(NOT_OFFERED.search(str(m)) for m in sentences), sentences
    assert (recipe_refusal(info, "bf16"), weighting_refusal(info, "late")) == (None, None)
    for output in ("AssertionError: live rows above relative L2 0.01 (worst 0.517)",
                   "AssertionError: rows differ bitwise", "Failed: DID NOT RAISE RouteError"):
        assert not NOT_OFFERED.search(output)


def test_a_real_run_of_one_file_passes_its_rules(tmp_path: Path) -> None:
    report = tmp_path / "run.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/host/test_combine_weighting.py", f"--junitxml={report}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    rules = doc_rules(CONTRACT.read_text())
    table = {v.rule: v for v in verdicts(rules, collect_marks(), junit_results([report]))}
    assert table["s12.combine-weighting"].status == PASS
    assert table["s12.combine-weighting"].ran == 6  # its six marked cases
    assert table["s4.nvfp4"].status == NOT_RUN


def test_the_table_collects_only_the_tiers_that_run_against_a_backend(tmp_path: Path,
                                                                       monkeypatch, capsys) -> None:
    """Found on the H100: the device image has no torchao, so collecting tests/host (its
    torchao cross-check) failed and no table came back for a run that had finished."""
    import tests.harness.conformance as conformance

    seen: list[tuple[tuple[str, ...], str | None]] = []

    def fake_collect(dirs: tuple[str, ...] = (),
                     moe_backend: str | None = None) -> dict[str, list[str]]:
        seen.append((dirs, moe_backend))
        return {"tests/single/test_a.py::test_rows[bf16]": ["s8.row-tolerance"]}

    monkeypatch.setattr(conformance, "collect_marks", fake_collect)
    report = tmp_path / "run.xml"
    report.write_text('<testsuites><testsuite><testcase classname="tests.single.test_a" '
                      'name="test_rows[bf16]"/></testsuite></testsuites>')
    assert conformance.main(["--backend", "x", str(report)]) == 0
    assert seen == [(conformance.BACKEND_TEST_DIRS, "x")] and "tests/host" not in seen[0][0]
    assert "| `s8.row-tolerance` | pass | 1 |" in capsys.readouterr().out


def test_the_documented_tables_are_generated_from_their_committed_reports() -> None:
    """docs/conformance.md holds, for each report under docs/conformance/ (named for its
    backend), exactly the table the tool makes of it with the current tests' marks."""
    doc = (ROOT / "docs" / "conformance.md").read_text()
    reports = sorted((ROOT / "docs" / "conformance").glob("*.xml"))
    assert reports, "no report under docs/conformance/"
    rules = doc_rules(CONTRACT.read_text())
    for report in reports:
        marks = collect_marks(dirs=BACKEND_TEST_DIRS, moe_backend=report.stem)
        table = render(report.stem, verdicts(rules, marks, junit_results([report])))
        assert table.replace("### ", "### Table: ", 1) in doc, (
            f"docs/conformance.md: the table of {report.name} is stale or edited: "
            f"python -m tests.harness.conformance --backend {report.stem} {report}")


def test_cases_parametrized_by_the_backend_are_judged_under_their_rules() -> None:
    """Found on the FP8 pull's first run (H100, 2026-12-05): its cases are parametrized by its
    recipe (``[fp8_block]``), which our backend does not declare, so marks collected without
    the backend had no such ids and its wrong rows read *not run*. Collected against the
    backend, the same report's row failure lands under ``s8.row-tolerance``; collected
    without it, the planted mistake, it does not."""
    report = ROOT / "docs" / "conformance" / "flashinfer-sm90-fp8-pull.xml"
    rules = doc_rules(CONTRACT.read_text())
    results = junit_results([report])
    key = "tests.single.test_layer_contract::test_every_live_row_meets_the_oracle[fp8_block]"
    assert any(r.key == key and r.status == FAIL for r in results)
    judged = {v.rule: v for v in verdicts(
        rules, collect_marks(dirs=BACKEND_TEST_DIRS, moe_backend=report.stem), results)}
    assert judged["s8.row-tolerance"].status == FAIL
    assert any("test_every_live_row_meets_the_oracle[fp8_block]" in n
               for n, _ in judged["s8.row-tolerance"].failures)
    blind = {v.rule: v for v in verdicts(rules, collect_marks(dirs=BACKEND_TEST_DIRS), results)}
    assert blind["s8.row-tolerance"].status == NOT_RUN
