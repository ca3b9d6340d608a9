"""``qualify.py --suite single --shard I/N`` (``tests.harness.shard``): shard ``I`` runs the
suite's tests whose node id hashes to it, the ``N`` shards partition the suite, each writes
its own record (named for its shard), and a shard can only be asked of ``single``. On the
CPU, with a throwaway ``single`` suite whose tests write down that they ran; the ledger's
side (every shard needed) is in ``test_qualify_ledger``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.harness.cli import parse_args
from tests.harness.gpu_neighbours import NeighbourReport
from tests.harness.qualify_main import main
from tests.harness.shard import Shard, in_shard, parse_shard
from tests.host.test_gpu_neighbours import StubWatch
from tests.host.test_qualify_workers import throwaway_tree
from tests.suites import Suite

ROOT = Path(__file__).resolve().parents[2]
H200 = {"index": 0, "name": "NVIDIA H200", "arch": "sm_90", "total_memory_bytes": 1}
NAMES = [f"t{i}" for i in range(12)]
TESTS = "import os, pathlib, pytest\n" + "".join(
    f"def test_{n}(): (pathlib.Path(os.environ['RAN_DIR']) / '{n}').write_text('')\n"
    for n in NAMES) + (
    "@pytest.mark.timing\n"
    "def test_timed(): (pathlib.Path(os.environ['RAN_DIR']) / 'timed').write_text('')\n")


@pytest.mark.parametrize(("text", "want"), [("1/2", Shard(1, 2)), ("3/3", Shard(3, 3)),
                                            (" 2/5 ", Shard(2, 5))])
def test_a_shard_reads_as_i_of_n(text: str, want: Shard) -> None:
    assert parse_shard(text) == want and want.text == text.strip()


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/1", "a/b", "1-2", "", "1/2/3", "-1/2"])
def test_anything_else_is_refused_naming_the_form(text: str) -> None:
    with pytest.raises(ValueError, match="I/N"):
        parse_shard(text)


@pytest.mark.parametrize("count", [2, 3, 5])
def test_the_shards_partition_the_node_ids(count: int) -> None:
    ids = [f"tests/single/test_{i % 17}.py::test_case[{i}]" for i in range(600)]
    homes = [[k for k in range(1, count + 1) if in_shard(n, Shard(k, count))] for n in ids]
    assert all(len(h) == 1 for h in homes)  # every test in exactly one shard
    sizes = [sum(h == [k] for h in homes) for k in range(1, count + 1)]
    assert min(sizes) > 600 / count / 2, sizes  # and none of them nearly empty


def test_a_shard_is_only_for_the_single_suite_alone_or_inside_gpu() -> None:
    assert parse_args(["--suite", "single", "--output-dir", "o", "--shard", "2/3"]).shard == "2/3"
    assert parse_args(["--suite", "gpu", "--output-dir", "o", "--shard", "1/3", "--workers", "2",
                       "--sanitizers-beside"]).shard == "1/3"
    for suite in ("sanitize", "host", "multi", "all"):
        with pytest.raises(SystemExit):
            parse_args(["--suite", suite, "--output-dir", "o", "--shard", "1/2",
                        "--sanitizer-tool", "memcheck"])
    with pytest.raises(SystemExit):
        parse_args(["--suite", "single", "--output-dir", "o", "--shard", "1/1"])


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the shard plugin, from this checkout
    return throwaway_tree(tmp_path, monkeypatch, {"test_many.py": TESTS})


def _qualify(tree: Path, shard: str, monkeypatch) -> tuple[int, dict, set[str]]:  # type: ignore[no-untyped-def]
    suites = {"single": Suite("single", "throwaway", paths=("t",), exclusive_gpu=True,
                              extra_args=("-p", "no:cacheprovider"))}
    out, ran = tree.parent / f"out{shard.replace('/', '-')}", tree.parent / f"ran{shard[0]}"
    ran.mkdir()
    monkeypatch.setenv("RAN_DIR", str(ran))
    rc = main(["--suite", "single", "--output-dir", str(out), "--workers", "2", "--shard", shard],
              root=tree, suites=suites, python=sys.executable, environment={"gpus": [H200]},
              neighbour_watch=lambda: StubWatch(NeighbourReport(True, 3)))
    return rc, json.loads((out / "qualification.json").read_text()), {
        p.name for p in ran.iterdir()}


def test_two_shards_run_every_test_once_and_record_their_shard(tree: Path,
                                                               monkeypatch) -> None:  # type: ignore[no-untyped-def]
    runs = [_qualify(tree, s, monkeypatch) for s in ("1/2", "2/2")]
    ran = [r[2] for r in runs]
    assert ran[0] and ran[1] and not ran[0] & ran[1]  # both shards ran tests, none twice
    assert ran[0] | ran[1] == {*NAMES, "timed"}  # and together all of them
    for (rc, rec, got), shard in zip(runs, ("1/2", "2/2"), strict=True):
        suite = rec["suites"][0]
        assert rc == 0 and suite["status"] == "pass", suite["message"]
        assert suite["counts"]["passed"] == len(got)
        assert rec["arguments"]["shard"] == shard
        assert f"_single-shard{shard.replace('/', 'of')}_" in rec["suggested_record_name"]
        assert all(f"--megamoe-shard={shard}" in c for c in suite["commands"])


def test_a_sharded_gpu_records_name_marks_the_single_shard_only() -> None:
    """The sanitizer tools of ``--suite gpu --shard 1/3`` ran whole: their names say so."""
    from tests.harness.manifest import record_name

    record = {"finished_at": "2026-12-05T00:00:00Z", "arguments": {"shard": "1/3"},
              "suites": [{"name": "single"}, {"name": "sanitize", "tool": "memcheck"}],
              "source_hashes": {"kernel": {"digest": "abcdef0123456789"}}}
    assert record_name(record) == (
        "20261205T000000Z_single-shard1of3-sanitize-memcheck_abcdef012345.json")
