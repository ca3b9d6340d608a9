"""What a record says of the commit it ran on (``tests.harness.environment.git_info``): the
checkout's git facts, unless the caller names the commit (``MEGAMOE_GIT_COMMIT``), as the
device scripts do for a copy whose ``.git`` is an older base with the tree's changes on top."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.harness.environment import git_info


def _repo(path: Path) -> str:
    """A git repository at ``path`` with one commit; its hash."""
    def run(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=path, check=True, capture_output=True,
                              text=True).stdout.strip()

    path.mkdir()
    run("init", "-q")
    (path / "f.txt").write_text("a\n")
    run("add", "f.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return run("rev-parse", "HEAD")


def test_the_checkout_speaks_when_no_commit_is_named(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("MEGAMOE_GIT_COMMIT", raising=False)
    base = _repo(tmp_path / "r")
    assert git_info(tmp_path / "r") == {"commit": base, "dirty": False, "source": "git"}
    (tmp_path / "r" / "f.txt").write_text("b\n")
    assert git_info(tmp_path / "r")["dirty"] is True


def test_a_named_commit_wins_over_an_older_base_checkout(tmp_path, monkeypatch) -> None:
    base = _repo(tmp_path / "r")
    (tmp_path / "r" / "f.txt").write_text("the tree of a later commit\n")
    monkeypatch.setenv("MEGAMOE_GIT_COMMIT", "c" * 40)
    monkeypatch.setenv("MEGAMOE_GIT_DIRTY", "false")
    got = git_info(tmp_path / "r")
    assert got["commit"] == "c" * 40 and got["source"] == "env" and got["dirty"] == "false"
    assert got["checkout"] == {"commit": base, "dirty": True, "source": "git"}


@pytest.mark.parametrize("named", [None, "d" * 40])
def test_a_copy_without_git(tmp_path, monkeypatch, named) -> None:
    if named is None:
        monkeypatch.delenv("MEGAMOE_GIT_COMMIT", raising=False)
    else:
        monkeypatch.setenv("MEGAMOE_GIT_COMMIT", named)
    (tmp_path / "copy").mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # never the repo above
    got = git_info(tmp_path / "copy")
    assert got["commit"] == named
    assert got["source"] == ("env" if named else "unavailable (no .git; set MEGAMOE_GIT_COMMIT)")
