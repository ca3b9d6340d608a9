"""qualify.py is strict: skips (collection or run time), xfails and empty selections fail.

Every run here goes through ``tests.harness.qualify_main.main`` over a
throwaway test tree in a temp dir (never the real suites).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.harness.qualify_main import main
from tests.suites import Suite

TREE = {
    "test_pass.py": "def test_one(): pass\ndef test_two(): pass\n",
    "test_runtime_skip.py": (
        "import pytest\ndef test_ok(): pass\n"
        "def test_skipped(): pytest.skip('needs a feature that is missing')\n"
    ),
    "test_collection_skip.py": (
        "import pytest\npytest.skip('module skipped at collection', allow_module_level=True)\n"
        "def test_never(): pass\n"
    ),
    "test_xfail.py": (
        "import pytest\ndef test_ok(): pass\n"
        "@pytest.mark.xfail(reason='known bug')\ndef test_known(): assert False\n"
    ),
    "test_fail.py": "def test_ok(): pass\ndef test_bad(): assert 1 == 2\n",
}
NO_GPU = {"gpus": []}
LEAN = ("-p", "no:xdist", "-p", "no:hypothesispytest")  # faster throwaway runs


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    (root / "t").mkdir()
    for name, body in TREE.items():
        (root / "t" / name).write_text(body)
    (root / "megamoe").mkdir()
    (root / "megamoe" / "toy_kernel.py").write_text("# kernel\n")
    (root / "oracle").mkdir()
    (root / "oracle" / "ref.py").write_text("# oracle\n")
    return root


def qualify(tree: Path, out: Path, file: str, *extra: str) -> tuple[int, dict]:
    suites = {"host": Suite("host", "throwaway", paths=(f"t/{file}",), extra_args=LEAN)}
    rc = main(["--suite", "host", "--output-dir", str(out), *extra], root=tree, suites=suites,
              python=sys.executable, environment=NO_GPU)
    return rc, json.loads((out / "qualification.json").read_text())


def test_all_passing_suite_passes_and_says_how_many(tree, tmp_path, capsys) -> None:
    rc, rec = qualify(tree, tmp_path, "test_pass.py")
    assert rc == 0 and rec["status"] == "pass"
    (suite,) = rec["suites"]
    assert suite["counts"]["passed"] == 2 and suite["counts"]["skipped"] == 0
    assert "2 passed" in capsys.readouterr().out


def test_a_run_time_skip_fails_the_suite_and_names_the_skipped_test(tree, tmp_path) -> None:
    rc, rec = qualify(tree, tmp_path, "test_runtime_skip.py")
    assert rc == 1 and rec["status"] == "fail"
    msg = rec["suites"][0]["message"]
    assert "1 passed" in msg and "1 skipped" in msg
    assert "test_skipped" in msg and "needs a feature that is missing" in msg


def test_a_collection_time_skip_fails_the_suite(tree, tmp_path) -> None:
    rc, rec = qualify(tree, tmp_path, "test_collection_skip.py")
    assert rc == 1
    msg = rec["suites"][0]["message"]
    assert "0 passed" in msg and "1 skipped" in msg
    assert "module skipped at collection" in msg


def test_an_xfail_counts_as_a_skip_and_fails(tree, tmp_path) -> None:
    rc, rec = qualify(tree, tmp_path, "test_xfail.py")
    assert rc == 1
    assert "xfail" in rec["suites"][0]["message"]


def test_a_filter_that_selects_nothing_fails_with_zero_passed(tree, tmp_path) -> None:
    rc, rec = qualify(tree, tmp_path, "test_pass.py", "--filter", "no_test_has_this_name")
    assert rc == 1
    msg = rec["suites"][0]["message"]
    assert "0 passed" in msg and "zero tests passed" in msg
    assert rec["arguments"]["filter"] == "no_test_has_this_name"


def test_a_filter_is_passed_to_pytest_and_recorded(tree, tmp_path) -> None:
    rc, rec = qualify(tree, tmp_path, "test_pass.py", "--filter", "test_one")
    assert rc == 0
    assert rec["suites"][0]["counts"]["passed"] == 1
    cmd = rec["suites"][0]["commands"][0]
    assert cmd[cmd.index("-k") + 1] == "test_one"


def test_a_failing_test_fails_the_suite_and_is_named(tree, tmp_path) -> None:
    rc, rec = qualify(tree, tmp_path, "test_fail.py")
    assert rc == 1
    assert "test_bad" in rec["suites"][0]["message"]


def test_record_holds_everything_an_auditor_needs(tree, tmp_path) -> None:
    rc, rec = qualify(tree, tmp_path, "test_pass.py")
    assert rc == 0
    assert rec["kind"] == "megamoe-qualification" and rec["schema"] == 1
    for key in ("arguments", "started_at", "finished_at", "preflight", "environment", "git",
                "source_hashes", "suites", "status", "suggested_record_name"):
        assert key in rec, key
    suite = rec["suites"][0]
    for key in ("commands", "counts", "duration_s", "junit", "logs", "returncode"):
        assert key in suite, key
    assert (tmp_path / suite["junit"][0]).is_file()
    assert (tmp_path / suite["logs"][0]).read_text().startswith("$ ")
    hashes = rec["source_hashes"]
    assert set(hashes) == {"kernel", "oracle", "tests"}
    assert list(hashes["kernel"]["files"]) == ["megamoe/toy_kernel.py"]
    assert list(hashes["oracle"]["files"]) == ["oracle/ref.py"]
    summary = (tmp_path / "summary.md").read_text()
    assert "| host | pass | 2 |" in summary


def test_real_environment_record_names_torch_cute_dsl_and_nvshmem_versions() -> None:
    from tests.harness.environment import collect_environment

    env = collect_environment()
    for key in ("gpus", "driver", "torch", "cuda", "cute_dsl", "nvshmem4py"):
        assert key in env
    import torch

    assert env["torch"] == torch.__version__
