"""The documentation a clone carries is for users (issue 41 item 2): it says what is true now
and how to reproduce it, with no numbered work-log sections (the history is git's), every
document the README or the docs point to exists, and the work-in-progress folder is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
USER_DOCS = [p for p in DOCS if "records" not in p.relative_to(ROOT).parts]
WORK_LOG = re.compile(r"\b[Ss]ession \d+|\b[Ss]essions \d+")
LINK = re.compile(r"`?((?:docs|devtools|tests|fixtures)/[\w./-]+\.md)`?")


def test_no_document_carries_work_log_numbering() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
             for p in USER_DOCS for n, line in enumerate(p.read_text().splitlines(), 1)
             if WORK_LOG.search(line)]
    assert found == [], "\n".join(found)


def test_every_document_a_document_names_exists() -> None:
    missing = sorted({f"{p.relative_to(ROOT)} -> {m}" for p in USER_DOCS
                      for m in LINK.findall(p.read_text()) if not (ROOT / m).exists()})
    assert missing == [], "\n".join(missing)


def test_the_work_in_progress_folder_is_gone() -> None:
    assert not (ROOT / "docs" / "wip").exists()
    records = ROOT / "docs" / "perf"
    assert {p.name for p in records.iterdir()} <= {"records"}, "raw records go in docs/perf/records"
