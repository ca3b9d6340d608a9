"""The plotting code (fake-timer records) and the lazy matplotlib import."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from megamoe.bench.fake import FakeDevice
from megamoe.bench.output import write_outputs
from megamoe.bench.plots import plot_ceilings, plot_samples
from megamoe.bench.protocol import Protocol
from megamoe.bench.ranks import SingleRank
from megamoe.bench.registry import Benchmark, Case
from megamoe.bench.runner import run_benchmark

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def record() -> dict:
    dev = FakeDevice(seed=9)
    bench = Benchmark(
        name="fake", description="fake", ceilings=(),
        cases=(Case("a", {"n": 1}), Case("b", {"n": 2}), Case("c", {"n": 3})),
        candidate=dev.arm("new", 1e-3, jitter=0.02, bytes_moved=10**6, ceiling="copy_bw"),
        baselines=(dev.arm("old", 1.5e-3, jitter=0.02, bytes_moved=10**6, ceiling="copy_bw"),),
    )
    rec = run_benchmark(bench, dev.backend, SingleRank(), Protocol(rounds=2, pairs=4, warmup=0))
    # a ceiling as a run would have measured it, so the bars have ratios
    for case in rec["cases"]:
        for a in case["achieved"]:
            a["ceiling_value"] = 2e9
            a["ratio"] = a["value"] / 2e9
    return rec


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return struct.unpack(">II", data[16:24])


def test_sample_plot_is_a_png_with_a_panel_grid(record: dict, tmp_path: Path) -> None:
    w, h = _png_size(plot_samples(record, tmp_path / "s.png"))
    # six panels (3 cases x warm/cold) in rows of four: two rows
    assert w > h > 300


def test_ceiling_plot_is_a_png(record: dict, tmp_path: Path) -> None:
    w, h = _png_size(plot_ceilings(record, tmp_path / "c.png"))
    assert w > 300 and h > 200


def test_ceiling_plot_handles_a_record_without_ratios(record: dict, tmp_path: Path) -> None:
    bare = {**record, "cases": [{**c, "achieved": []} for c in record["cases"]]}
    assert _png_size(plot_ceilings(bare, tmp_path / "c.png"))[0] > 0


def test_a_run_writes_at_most_four_files_in_one_folder(record: dict, tmp_path: Path) -> None:
    paths = write_outputs(record, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths) == [
        "fake.json", "fake.md", "fake_ceilings.png", "fake_samples.png",
    ]


def test_importing_the_harness_and_its_benchmarks_does_not_import_matplotlib() -> None:
    code = (
        "import sys, megamoe.bench as b; b.load_benchmarks(); import megamoe.bench.cli;"
        "sys.exit('matplotlib' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
