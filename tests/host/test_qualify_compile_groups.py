"""``qualify.py --group-compiles`` (``tests.harness.compile_groups``): the xdist phase runs under
``--dist loadgroup``, so the tests of an opted-in module that share a kernel variant run in one
worker; the record names its tests without xdist's ``@<group>`` suffix, and a shard holds the
same tests with the option or without. On the CPU, with a throwaway suite whose tests write
down the worker they ran in."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.harness.gpu_neighbours import NeighbourReport
from tests.harness.group_names import group_name, plain_nodeid
from tests.harness.qualify_main import main
from tests.host.test_gpu_neighbours import StubWatch
from tests.host.test_qualify_workers import CONFTEST, throwaway_tree
from tests.suites import Suite

VARIANTS = [f"v{i}" for i in range(6)]
H200 = {"index": 0, "name": "NVIDIA H200", "arch": "sm_90", "total_memory_bytes": 1}
GROUPED = '''\
import os, pathlib, pytest
COMPILE_GROUP_PARAMS = ("cfg",)
VARIANTS = VARIANTS_LIST
def _note(name):
    where = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (pathlib.Path(os.environ["WHERE_DIR"]) / name).write_text(where)
@pytest.mark.parametrize("cfg", VARIANTS)
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_rows(cfg, dtype): _note(f"rows-{cfg}-{dtype}")
@pytest.mark.parametrize("cfg", VARIANTS)
def test_decode(cfg): _note(f"decode-{cfg}")
def test_ungrouped(): _note("ungrouped")
'''.replace("VARIANTS_LIST", repr(VARIANTS))


def _qualify(tmp_path: Path, monkeypatch, *extra: str,  # type: ignore[no-untyped-def]
             suite: str = "host") -> tuple[int, dict, dict[str, str]]:
    conftest = CONFTEST + "pytest_plugins = ['tests.harness.compile_groups']\n"
    tree = throwaway_tree(tmp_path, monkeypatch, {"conftest.py": conftest,
                                                  "test_grouped.py": GROUPED})
    where = tmp_path / "where"
    where.mkdir()
    monkeypatch.setenv("WHERE_DIR", str(where))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    suites = {suite: Suite(suite, "throwaway", paths=("t",), exclusive_gpu=True,
                           extra_args=("-p", "no:cacheprovider"))}
    out = tmp_path / "out"
    rc = main(["--suite", suite, "--output-dir", str(out), "--workers", "3", *extra],
              root=tree, suites=suites, python=sys.executable, environment={"gpus": [H200]},
              neighbour_watch=lambda: StubWatch(NeighbourReport(True, 3)))
    rec = json.loads((out / "qualification.json").read_text())
    return rc, rec, {p.name: p.read_text() for p in where.iterdir()}


def _junit_names(out: Path, suite: dict) -> set[str]:
    """The testcase names of the suite's JUnit reports (named relative to ``out``), as pytest
    wrote them."""
    import xml.etree.ElementTree as ET

    return {c.get("name", "") for p in suite["junit"]
            for c in ET.parse(out / p).getroot().iter("testcase")}


def test_a_variants_tests_share_one_worker_and_the_record_names_them_plainly(tmp_path,
                                                                              monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rc, rec, where = _qualify(tmp_path, monkeypatch, "--group-compiles")
    suite = rec["suites"][0]
    assert rc == 0 and suite["status"] == "pass", suite["message"]
    assert rec["arguments"]["group_compiles"] is True
    assert suite["counts"]["passed"] == 3 * len(VARIANTS) + 1
    workers = defaultdict(set)
    for v in VARIANTS:
        for name in (f"rows-{v}-bf16", f"rows-{v}-f32", f"decode-{v}"):
            workers[v].add(where[name])
    assert all(len(w) == 1 and "main" not in w for w in workers.values()), dict(workers)
    assert len({w for ws in workers.values() for w in ws}) > 1  # the groups spread out
    parallel = suite["commands"][0]
    assert parallel[parallel.index("--dist") + 1] == "loadgroup"
    slowest = [t["test"] for t in suite["time_profile"]["slowest"]]
    assert slowest and not any("@" in t for t in slowest), slowest
    raw = _junit_names(tmp_path / "out", suite)  # xdist's names carry the suffix; the record's do not
    assert any("@" in n for n in raw), sorted(raw)[:3]


def test_without_the_option_the_phase_distributes_test_by_test(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rc, rec, _ = _qualify(tmp_path, monkeypatch)
    suite = rec["suites"][0]
    assert rc == 0 and rec["arguments"]["group_compiles"] is False
    assert "--dist" not in suite["commands"][0]


def test_a_shard_holds_the_same_tests_with_grouped_compiles_or_without(tmp_path,
                                                                       monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ran = {}
    for flags in ((), ("--group-compiles",)):
        for shard in ("1/2", "2/2"):
            rc, rec, where = _qualify(tmp_path / f"{shard[0]}{len(flags)}", monkeypatch,
                                      "--shard", shard, *flags, suite="single")
            assert rc == 0 and rec["suites"][0]["status"] == "pass", rec["suites"][0]["message"]
            ran[(shard, bool(flags))] = set(where)
            if flags:  # grouped: each variant's tests of this shard in one worker
                for v in VARIANTS:
                    homes = {w for n, w in where.items() if n.endswith(f"-{v}")
                             or f"-{v}-" in n}
                    assert len(homes) <= 1, (shard, v, homes)
    assert ran[("1/2", True)] == ran[("1/2", False)] and ran[("2/2", True)] == ran[("2/2", False)]
    assert ran[("1/2", True)] and ran[("2/2", True)]
    assert not ran[("1/2", True)] & ran[("2/2", True)]


def test_the_group_suffix_comes_off_node_ids_and_nothing_else() -> None:
    g = group_name("tests.single.test_mxfp4_gemm_kernel", ["m64n64s4", "bf16"])
    base = "tests/single/test_mxfp4_gemm_kernel.py::test_rows[nvfp4-m64n64s4-bf16]"
    assert plain_nodeid(f"{base}@{g}") == base
    assert plain_nodeid(base) == base
    assert plain_nodeid(f"{base}@{g}]") == base  # pytest 9.2's JUnit name after a repair
    assert plain_nodeid("t.py::test_mail[a@b.c]") == "t.py::test_mail[a@b.c]"
    assert plain_nodeid("t.py::test_mail[a@b:c]") == "t.py::test_mail[a@b:c]"


@pytest.mark.parametrize("argv", [["--workers", "1"], []])
def test_grouping_compiles_needs_workers(argv: list[str]) -> None:
    from tests.harness.cli import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--suite", "single", "--output-dir", "o", "--group-compiles", *argv])


def test_the_shard_plugin_places_a_suffixed_test_where_its_plain_id_goes() -> None:
    """Under pytest 9.1 (the GPU machine's) xdist appends the suffix in its own hook, before the
    shard plugin's (``trylast``): the shard must not move the test (here, on 9.2, the
    suffix comes later and the end-to-end shard test above cannot see this)."""
    import types

    from tests.harness import shard_plugin
    from tests.harness.shard import SHARD_OPTION

    def kept(ids: list[str]) -> list[int]:
        items = [types.SimpleNamespace(nodeid=i, n=k) for k, i in enumerate(ids)]
        config = types.SimpleNamespace(
            getoption=lambda name: "1/2" if name == SHARD_OPTION else None,
            hook=types.SimpleNamespace(pytest_deselected=lambda items: None))
        shard_plugin.pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
        return [x.n for x in items]

    plain = [f"t/test_g.py::test_rows[bf16-{v}]" for v in VARIANTS * 4]
    plain = [f"{p[:-1]}-{k}]" for k, p in enumerate(plain)]
    suffixed = [f"{p}@{group_name('t.test_g', [p.split('-')[1]])}" for p in plain]
    assert kept(suffixed) == kept(plain) and 0 < len(kept(plain)) < len(plain)
