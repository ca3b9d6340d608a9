"""``devtools/pending/``: the changes that wait for a GPU record must still apply to the tree,
one on top of the other in the order of their README sections, or the requalification they
wait for cannot be run from them. Checked with ``git apply`` on a scratch copy of the files
they touch, as they are in the working tree."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PENDING = ROOT / "devtools" / "pending"
SECTION = re.compile(r"^### `([^`]+\.patch)`", re.MULTILINE)
SIDE = re.compile(r"^(?:---|\+\+\+) [ab]/(\S+)$", re.MULTILINE)


def pending_in_order() -> list[Path]:
    """The patches in the order of their README sections (each applies on the ones before)."""
    return [PENDING / name for name in SECTION.findall((PENDING / "README.md").read_text())]


def apply_all(patches: list[Path], tree: Path, source: Path = ROOT) -> None:
    """Copy what ``patches`` touch from ``source`` into ``tree`` and apply them there in
    order; an AssertionError names the first that fails."""
    for rel in {m.group(1) for p in patches for m in SIDE.finditer(p.read_text())}:
        if (source / rel).is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, tree / rel)
    for patch in patches:
        res = subprocess.run(["git", "apply", "--whitespace=nowarn", str(patch)], cwd=tree,
                             capture_output=True, text=True, check=False)
        assert res.returncode == 0, f"{patch.name} no longer applies: {res.stderr.strip()}"


def test_every_pending_patch_has_a_section_saying_what_it_waits_for() -> None:
    assert {p.name for p in pending_in_order()} == {p.name for p in PENDING.glob("*.patch")}


def test_the_pending_patches_apply_to_the_tree_in_order(tmp_path: Path) -> None:
    apply_all(pending_in_order(), tmp_path)


def test_a_patch_that_no_longer_applies_is_named(tmp_path: Path) -> None:
    """The check can fail: a patch whose context the tree no longer has."""
    source, tree = tmp_path / "source", tmp_path / "tree"
    source.mkdir()
    tree.mkdir()
    (source / "notes.md").write_text("one\ntwo\nthree\n")
    patch = tmp_path / "stale.patch"
    patch.write_text("--- a/notes.md\n+++ b/notes.md\n@@ -1,3 +1,4 @@\n one\n two\n"
                     " three, as it once was\n+four\n")
    with pytest.raises(AssertionError, match=r"stale\.patch no longer applies"):
        apply_all([patch], tree, source)
    fresh = tmp_path / "fresh.patch"
    fresh.write_text("--- a/notes.md\n+++ b/notes.md\n@@ -1,3 +1,4 @@\n one\n two\n three\n"
                     "+four\n")
    apply_all([fresh], tree, source)
    assert (tree / "notes.md").read_text() == "one\ntwo\nthree\nfour\n"
