"""docs/perf.md's "Where the layer stands" tables are what ``devtools.standing`` prints for
the records that section names: the command in the section's
code block, run here on the committed records, must give the three tables the section
shows, cell for cell. A table edited by hand, a record left out of the command, or a
record changed under the tables fails this test."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from devtools import standing

ROOT = Path(__file__).resolve().parents[2]
PERF = ROOT / "docs" / "perf.md"
SECTION = "## Where the layer stands"
COMMAND = "python -m devtools.standing"


def _section(text: str) -> str:
    """The standing section: from its heading to the next ``##`` heading."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:] if end < 0 else text[start:end]


def _command_paths(section: str) -> list[Path]:
    """The record paths of the section's ``python -m devtools.standing`` code block, globs
    expanded in sorted order as a shell would."""
    block = section.split("```\n" + COMMAND, 1)[1].split("```", 1)[0]
    paths: list[Path] = []
    for arg in shlex.split(block.replace("\\\n", " ")):
        hits = sorted(ROOT.glob(arg)) if any(c in arg for c in "*?[") else [ROOT / arg]
        assert hits, f"the command's {arg!r} names no record"
        paths.extend(hits)
    return paths


def _tables(text: str) -> list[list[str]]:
    """Every markdown table in ``text``: its rows, in order."""
    tables: list[list[str]] = []
    rows: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append(line.rstrip())
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _goal_tables(tables: list[list[str]]) -> list[list[str]]:
    """The goal tables: those whose header names the recipe columns."""
    return [t for t in tables if t[0].startswith("| case | bf16 DeepSeek")]


@pytest.fixture(scope="module")
def section() -> str:
    return _section(PERF.read_text())


@pytest.fixture(scope="module")
def paths(section: str) -> list[Path]:
    return _command_paths(section)


@pytest.fixture(scope="module")
def records(paths: list[Path]) -> list[dict]:
    return [standing.load(p) for p in paths]


@pytest.fixture(scope="module")
def printed(records: list[dict]) -> list[list[str]]:
    return _tables(standing.render(records))


def test_the_section_names_committed_records(paths: list[Path]) -> None:
    assert len(paths) >= 4 and all(p.is_file() for p in paths)


def test_the_goal_tables_are_the_tools_output(section: str, printed: list[list[str]]) -> None:
    shown = _goal_tables(_tables(section))
    assert len(printed) == 3
    assert shown == printed


def test_a_hand_edited_cell_is_caught(section: str, printed: list[list[str]]) -> None:
    """The check can fail: one cell of the first table changed in the text no longer
    matches the tool's output."""
    row = printed[0][2]  # the first data row (after the header and the rule)
    cells = row.split(" | ")
    cells[3] = "9.99x"
    edited = section.replace(row, " | ".join(cells), 1)
    assert edited != section
    assert _goal_tables(_tables(edited)) != printed


def test_a_record_left_out_is_caught(records: list[dict], printed: list[list[str]]) -> None:
    """The check can fail: the tables of the records without the first one differ."""
    assert _tables(standing.render(records[1:])) != printed
