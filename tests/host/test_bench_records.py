"""The JSON record (schema, every sample retained, strict JSON), its writer and the Markdown report."""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path

import pytest

from megamoe.bench.ceilings import CeilingSizes
from megamoe.bench.fake import FakeDevice
from megamoe.bench.output import write_outputs
from megamoe.bench.protocol import Protocol
from megamoe.bench.ranks import EmulatedRanks
from megamoe.bench.records import dumps, validate_record
from megamoe.bench.registry import Benchmark, BuildContext, Case, Workload
from megamoe.bench.report import fmt_us, render_markdown
from megamoe.bench.runner import SCHEMA, run_benchmark

PROTO = Protocol(rounds=2, pairs=3, warmup=1, calls_per_sample=1)


def _record(seed: int = 0) -> dict:
    dev = FakeDevice(seed=seed)

    def copy_ceiling(sizes: CeilingSizes, ctx: BuildContext) -> Workload:
        return Workload(lambda: dev.clock.advance(1e-3), bytes_moved=4_000_000, ceiling="copy_bw")

    def no_fp8(sizes: CeilingSizes, ctx: BuildContext) -> Workload:
        raise RuntimeError("no fp8 here")

    bench = Benchmark(
        name="fake",
        description="fake benchmark",
        cases=(Case("small", {"t": 16, "h": 4096}, scenario="uniform", seed=7),),
        candidate=dev.arm("new", 1e-3, jitter=0.02, bytes_moved=1_000_000, ceiling="copy_bw"),
        baselines=(dev.arm("old", 2e-3, jitter=0.02, bytes_moved=1_000_000, ceiling="copy_bw"),),
        ceilings=("copy_bw", "fp8_mm"),
    )
    return run_benchmark(
        bench, dev.backend, EmulatedRanks(2), PROTO, argv=["fake"],
        ceiling_builders={"copy_bw": copy_ceiling, "fp8_mm": no_fp8},
    )


@pytest.fixture(scope="module")
def record() -> dict:
    return _record()


def test_record_passes_the_schema_and_is_strict_json(record: dict) -> None:
    validate_record(record)
    assert record["schema"] == SCHEMA
    assert json.loads(dumps(record)) == json.loads(json.dumps(record))


def test_record_keeps_every_sample_of_every_round(record: dict) -> None:
    assert [c["cache"] for c in record["cases"]] == ["warm", "cold"]
    for case in record["cases"]:
        assert [c["kind"] for c in case["comparisons"]] == ["aa", "ab"]
        for comp in case["comparisons"]:
            assert len(comp["rounds"]) == 2
            for r in comp["rounds"]:
                assert [len(s) for s in r["samples_s"]] == [3, 3]
                assert all(len(v) == 2 for side in r["rank_samples_s"] for v in side)


def test_record_carries_shape_scenario_seed_environment_and_protocol(record: dict) -> None:
    case = record["cases"][0]
    assert (case["shape"], case["scenario"], case["seed"]) == ({"t": 16, "h": 4096}, "uniform", 7)
    env = record["environment"]
    assert env["packages"]["torch"] and len(env["source_sha256"]) == 64
    assert env["device_before"]["kind"] == "host"
    assert record["protocol"]["rounds"] == 2 and record["protocol"]["flush_bytes"] == 512 * 2**20
    assert record["argv"] == ["fake"]


def test_summary_medians_are_the_medians_of_all_retained_samples(record: dict) -> None:
    for case in record["cases"]:
        for comp in case["comparisons"]:
            for side in (0, 1):
                pooled = [s for r in comp["rounds"] for s in r["samples_s"][side]]
                assert comp["summary"]["median_s"][side] == statistics.median(pooled)
                assert comp["summary"]["min_s"][side] == min(pooled)


def test_ceilings_record_value_and_unavailability(record: dict) -> None:
    copy_bw, fp8 = record["ceilings"]
    assert copy_bw["available"] and copy_bw["value"] == pytest.approx(4e9)
    assert len(copy_bw["samples_s"]) == PROTO.samples_per_arm
    assert fp8 == {
        "name": "fp8_mm", "unit": "FLOP/s", "shape": fp8["shape"], "available": False,
        "reason": "RuntimeError: no fp8 here",
    }


def test_achieved_is_work_over_median_and_ratio_is_against_the_ceiling(record: dict) -> None:
    warm = record["cases"][0]
    by_arm = {a["arm"]: a for a in warm["achieved"]}
    # new: 1e6 bytes in ~1 ms -> ~1e9 B/s; ceiling 4e9 B/s -> ~25 %
    assert by_arm["new"]["value"] == pytest.approx(1e9, rel=0.05)
    assert by_arm["new"]["ratio"] == pytest.approx(by_arm["new"]["value"] / 4e9)
    assert by_arm["old"]["ratio"] == pytest.approx(0.125, rel=0.05)


def _corrupt(record: dict, edit) -> dict:  # type: ignore[no-untyped-def]
    bad = copy.deepcopy(record)
    edit(bad)
    return bad


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r["cases"][0]["comparisons"][0]["rounds"][0]["samples_s"][0].pop(), "retained"),
        (lambda r: r["cases"][0]["comparisons"][1]["rounds"].pop(), "rounds"),
        (lambda r: r["cases"][0]["comparisons"][0]["rounds"][1]["order"].__setitem__(0, [0, 1]), "AB/BA"),
        (lambda r: r["cases"][0]["comparisons"][0]["rounds"][0]["samples_s"][1].__setitem__(0, float("nan")), "finite"),
        (lambda r: r["cases"][0]["comparisons"][0]["rounds"][0]["rank_samples_s"][0][0].pop(), "rank values"),
        (lambda r: r["cases"][0]["comparisons"][0]["summary"].__setitem__("verdict", "maybe"), "verdict"),
        (lambda r: r["cases"][0]["comparisons"][0].__setitem__("b", "other"), "itself"),
        (lambda r: r["environment"].pop("git_commit"), "git_commit"),
        (lambda r: r.__setitem__("schema", "v0"), "schema"),
        (lambda r: r["ceilings"][1].pop("reason"), "reason"),
        (lambda r: r["cases"][0]["arms"]["new"].__setitem__("bytes_moved", float("inf")), "strict JSON"),
    ],
)
def test_planted_record_defects_are_caught(record: dict, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        validate_record(_corrupt(record, edit))


def test_write_outputs_writes_json_and_markdown_in_one_folder(record: dict, tmp_path: Path) -> None:
    paths = write_outputs(record, tmp_path / "out", plots=False)
    assert [p.name for p in paths] == ["fake.json", "fake.md"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fake.json", "fake.md"]
    assert json.loads(paths[0].read_text()) == json.loads(json.dumps(record))


def test_writer_refuses_an_invalid_record(record: dict, tmp_path: Path) -> None:
    bad = _corrupt(record, lambda r: r["cases"][0]["comparisons"][0]["rounds"].pop())
    with pytest.raises(ValueError):
        write_outputs(bad, tmp_path, plots=False)
    assert not (tmp_path / "fake.json").exists()


def test_markdown_has_a_row_per_comparison_with_its_medians_and_verdict(record: dict) -> None:
    md = render_markdown(record)
    assert md.startswith("# Benchmark `fake`")
    for case in record["cases"]:
        for comp in case["comparisons"]:
            a = statistics.median(s for r in comp["rounds"] for s in r["samples_s"][0])
            b = statistics.median(s for r in comp["rounds"] for s in r["samples_s"][1])
            row = [
                line for line in md.splitlines()
                if line.startswith(f"| small | t=16 h=4096 | {case['cache']} | {comp['kind'].upper()} |")
            ]
            assert len(row) == 1
            assert f"| {fmt_us(a)} | {fmt_us(b)} |" in row[0]
            assert f"**{comp['summary']['verdict']}**" in row[0]
    assert "| fp8_mm | m=" in md and "unavailable" in md
    assert "## Achieved vs ceiling" in md


def test_fmt_us_shows_microseconds() -> None:
    assert fmt_us(163.757e-6) == "163.757"


def test_a_case_can_override_calls_per_sample() -> None:
    dev = FakeDevice()
    log: list[str] = []
    bench = Benchmark(
        name="fake", description="fake", ceilings=(),
        cases=(Case("short", calls_per_sample=7), Case("long")),
        candidate=dev.arm("new", 1e-6, log=log),
    )
    proto = Protocol(rounds=1, pairs=2, warmup=0, calls_per_sample=3, caches=("warm",))
    rec = run_benchmark(bench, dev.backend, EmulatedRanks(1), proto)
    validate_record(rec)
    assert [c["calls_per_sample"] for c in rec["cases"]] == [7, 3]
    # per case: 2 builds x (capture run of the unit) + 2 pairs x 2 arms samples
    assert len(log) == 2 * 7 + 4 * 7 + 2 * 3 + 4 * 3
    assert "| short | warm | AA | 7 |" in render_markdown(rec)
    with pytest.raises(ValueError, match="calls_per_sample"):
        Case("bad", calls_per_sample=0)
