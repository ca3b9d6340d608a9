"""Mutation testing as a feature (``tests.harness.mutants``, ``qualify.py --suite mutants``):
each patch of a catalog is applied to a scratch copy and judged by the tests that cover the
files it touches: killed when one fails, survived when all pass (the run fails), an error
when it does not apply, not run when it needs a tier that was not asked for. The covering
tests follow imports; the copy's own sources are the ones tested. On a throwaway tree."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.contract_map import CONTRACT, doc_rules
from tests.harness.mutants import (
    copy_env,
    covering_tests,
    patch_header,
    run_catalog,
    touched_files,
)
from tests.harness.qualify_main import main

SRC = '''\
def add(a, b):
    return a + b


def sub(a, b):
    return a - b
'''
CHECKED = '''\
from megamoe.calc import add


def test_add():
    assert add(2, 3) == 5
'''
ORACLE_USER = '''\
import oracle.helper


def test_nothing_of_calc():
    assert oracle.helper.X == 1
'''


def _patch(tree: Path, path: str, old: str, new: str, header: str = "") -> str:
    """A git diff of one replacement in ``tree`` (the tree is left as it was)."""
    f = tree / path
    before = f.read_text()
    f.write_text(before.replace(old, new))
    diff = subprocess.run(["git", "diff", "--", path], cwd=tree, capture_output=True,
                          text=True, check=True).stdout
    f.write_text(before)
    return header + diff


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for pkg in ("megamoe", "oracle", "tests", "tests/host"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "megamoe" / "calc.py").write_text(SRC)
    (root / "oracle" / "helper.py").write_text("X = 1\n")
    (root / "tests" / "host" / "test_calc.py").write_text(CHECKED)
    (root / "tests" / "host" / "test_other.py").write_text(ORACLE_USER)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n'
                                         'markers = ["gpu", "multirank", "sanitizer"]\n')
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.email=x@y", "-c", "user.name=x", "commit", "-qm", "t"],
                   cwd=root, check=True)
    cat = tmp_path / "catalog"
    cat.mkdir()
    (cat / "a-killed.patch").write_text(
        _patch(root, "megamoe/calc.py", "return a + b", "return a + b + 1",
               "add is off by one.\n"))
    (cat / "b-survived.patch").write_text(
        _patch(root, "megamoe/calc.py", "return a - b", "return b - a"))
    (cat / "c-broken.patch").write_text("diff --git a/megamoe/nope.py b/megamoe/nope.py\n"
                                        "--- a/megamoe/nope.py\n+++ b/megamoe/nope.py\n"
                                        "@@ -1 +1 @@\n-x\n+y\n")
    (cat / "d-gpu.patch").write_text(
        _patch(root, "megamoe/calc.py", "return a + b", "return a * b", "Tiers: single\n"))
    return root


def test_each_mutant_gets_its_verdict_and_a_survivor_fails_the_run(tree: Path) -> None:
    run = run_catalog(tree.parent / "catalog", root=tree, python=sys.executable,
                      tiers=("host",), timeout_s=120, out_dir=tree.parent / "out")
    verdicts = {r.name: r.verdict for r in run.results}
    assert verdicts == {"a-killed": "killed", "b-survived": "survived", "c-broken": "error",
                        "d-gpu": "not run"}
    killed = next(r for r in run.results if r.name == "a-killed")
    assert killed.tests == ("tests/host/test_calc.py",)  # test_other does not import calc
    assert run.status == "fail" and "1/3 killed" in run.message


def test_the_suite_writes_a_record_with_every_verdict(tree: Path) -> None:
    out = tree.parent / "qual"
    rc = main(["--suite", "mutants", "--mutants", str(tree.parent / "catalog"),
               "--output-dir", str(out), "--timeout", "120"], root=tree,
              python=sys.executable, environment={"gpus": []})
    rec = json.loads((out / "qualification.json").read_text())
    suite = rec["suites"][0]
    assert rc == 1 and suite["name"] == "mutants" and suite["status"] == "fail"
    assert suite["verdicts"] == {"killed": 1, "survived": 1, "timeout": 0, "error": 1,
                                 "not run": 1}
    assert rec["arguments"]["mutant_tiers"] == ["host"]


SITE_USER = '''\
import sitepkg_zz
from megamoe.calc import sub


def test_sub():
    assert sub(5, sitepkg_zz.Y) == 3
'''


def test_the_callers_pythonpath_reaches_the_tests_and_an_import_error_is_no_kill(
        tree: Path, tmp_path: Path, monkeypatch) -> None:
    """Found on an H100 (2026-12-05): the GPU tier's tests import the CuTe DSL from a
    ``PYTHONPATH`` entry, which the mutant's run replaced by the copy alone, and the
    resulting ``ImportError`` at collection read as *killed*. The caller's entries now follow
    the copy (the original tree's never: it must not stand in for the copy), and a run whose
    covering tests do not collect is an *error*."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitepkg_zz.py").write_text("Y = 2\n")
    (tree / "tests" / "host" / "test_site.py").write_text(SITE_USER)
    cat = tmp_path / "site-catalog"
    cat.mkdir()
    (cat / "sub-swapped.patch").write_text(
        _patch(tree, "megamoe/calc.py", "return a - b", "return b - a",
               "Tests: tests/host/test_site.py\n"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(tree)]))
    run = run_catalog(cat, root=tree, python=sys.executable, tiers=("host",), timeout_s=120,
                      out_dir=tmp_path / "with-site")
    assert [(r.name, r.verdict) for r in run.results] == [("sub-swapped", "killed")]
    monkeypatch.setenv("PYTHONPATH", str(tree))
    run = run_catalog(cat, root=tree, python=sys.executable, tiers=("host",), timeout_s=120,
                      out_dir=tmp_path / "without-site")
    (result,) = run.results
    assert result.verdict == "error" and "did not collect" in result.detail, result
    assert "sitepkg_zz" in result.detail
    env = copy_env(tmp_path / "copy", tree)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "copy")]


def test_a_gpu_tier_is_refused_before_any_mutant_without_a_gpu(tree: Path) -> None:
    out = tree.parent / "qual2"
    rc = main(["--suite", "mutants", "--mutants", str(tree.parent / "catalog"),
               "--mutant-tiers", "host,single", "--output-dir", str(out)], root=tree,
              python=sys.executable, environment={"gpus": []})
    assert rc == 2


def test_headers_touched_files_and_import_coverage(tree: Path) -> None:
    text = "Tests: tests/host/test_x.py tests/host/test_y.py\nTiers: single\ndiff --git a"
    assert patch_header(text) == {"tests": ["tests/host/test_x.py", "tests/host/test_y.py"],
                                  "tiers": ["single"]}
    assert touched_files("+++ b/megamoe/a.py\n+++ b/oracle/b.py\n") == ["megamoe/a.py",
                                                                         "oracle/b.py"]
    assert covering_tests(tree, ["megamoe/calc.py"], ("host",)) == ["tests/host/test_calc.py"]
    assert covering_tests(tree, ["oracle/helper.py"], ("host",)) == ["tests/host/test_other.py"]


def test_our_catalog_names_a_rule_per_mutant_and_applies_to_this_tree() -> None:
    root = Path(__file__).resolve().parents[2]
    patches = sorted((root / "tests" / "mutants").glob("*.patch"))
    assert len(patches) >= 6
    rules = set(doc_rules(CONTRACT.read_text()))
    for p in patches:
        text = p.read_text()
        named = set(re.findall(r"\bs\d+\.[a-z0-9-]+", text.split("\ndiff ", 1)[0]))
        assert named and named <= rules, f"{p.name}: name the contract rule(s) it breaks"
        applies = subprocess.run(["git", "apply", "--check", str(p)], cwd=root,
                                 capture_output=True, text=True, check=False)
        assert applies.returncode == 0, (p.name, applies.stderr)
    # the catalog's README lists every patch once, and no patch that is gone
    listed = re.findall(r"^\| `([a-z0-9-]+)` \|", (root / "tests" / "mutants" / "README.md")
                        .read_text(), flags=re.M)
    assert sorted(listed) == [p.stem for p in patches]
