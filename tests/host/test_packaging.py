"""What a user gets from an install (issue 41 item 3): console scripts that run from any
folder, the scenario library importable outside the tree, one pinned set of versions, help on
every option of every command line, and a summary that says "commit" only for a record the
ledger can count."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.harness import cli as qualify_cli
from tests.harness import multi_cli
from tests.harness.manifest import committable, summary_markdown

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BIN = Path(sys.executable).parent


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from megamoe.bench.cli import _parser as bench_parser

    return {"qualify.py": qualify_cli.build_parser(), "megamoe-bench": bench_parser(),
            "run_tests.sh multi": multi_cli.build_parser()}


@pytest.mark.parametrize("name", ["qualify.py", "megamoe-bench", "run_tests.sh multi"])
def test_every_option_of_every_command_line_has_help(name: str) -> None:
    bare = [a.dest for a in _parsers()[name]._actions
            if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()]
    assert bare == [], f"{name}: options without help: {bare}"


@pytest.mark.parametrize(("script", "args", "expect"), [
    ("megamoe-qualify", ["--help"], "--suite"),
    ("megamoe-bench", ["--list"], "layer"),
])
def test_console_scripts_run_from_any_folder(tmp_path: Path, script: str, args: list[str],
                                             expect: str) -> None:
    assert PYPROJECT["project"]["scripts"][script]
    exe = BIN / script
    assert exe.exists(), f"{script} is not installed next to {sys.executable}"
    proc = subprocess.run([str(exe), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0 and expect in proc.stdout, proc.stdout + proc.stderr


def test_the_scenario_library_imports_outside_the_tree(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import fixtures.scenarios as s; print(len(s.SCENARIO_NAMES))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "10", proc.stderr


def test_one_pinned_set_of_versions() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]

    def pin(reqs: list[str], name: str) -> str:
        found = [r for r in reqs if r.split("=")[0].split(">")[0].strip() == name]
        assert found, f"{name} is not in {reqs}"
        return found[0]

    assert pin(extras["test"], "nvidia-cutlass-dsl") == pin(extras["cuda"], "nvidia-cutlass-dsl")
    assert "==" in pin(extras["cuda"], "nvshmem4py-cu13")
    torch_pin = re.search(r"TORCH_PIN=torch==([\d.]+)", (ROOT / "run_tests.sh").read_text())
    floor = re.search(r"torch>=([\d.]+)", " ".join(PYPROJECT["project"]["dependencies"]))
    assert torch_pin and floor
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    assert as_tuple(torch_pin.group(1)) >= as_tuple(floor.group(1))


@pytest.mark.parametrize(("record", "commit"), [
    ({"status": "pass", "arguments": {}}, True),
    ({"status": "fail", "arguments": {}}, False),
    ({"status": "preflight-failed", "arguments": {}}, False),
    ({"status": "pass", "arguments": {"filter": "layer"}}, False),
])
def test_the_summary_says_commit_only_for_a_countable_record(record: dict, commit: bool) -> None:
    record = {**record, "suggested_record_name": "x.json", "suites": []}
    text = summary_markdown(record)
    assert ("Commit as" in text) == commit
    assert (committable(record) == "") == commit
    if record["arguments"].get("filter"):
        assert "filtered run" in text
