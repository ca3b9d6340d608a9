"""``python -m megamoe.bench``: listing, argument handling, a real CPU run, the control exit status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

import megamoe.bench.cli as cli
from megamoe.bench.fake import FakeDevice
from megamoe.bench.records import validate_record
from megamoe.bench.registry import (
    Arm,
    Benchmark,
    BuildContext,
    Case,
    Workload,
    get_benchmark,
    register_benchmark,
    unregister_benchmark,
)


def _tiny_copy(case: Case, ctx: BuildContext) -> Workload:
    src = torch.randn(case.shape["n"], generator=ctx.generator(), device=ctx.device)
    dst = torch.empty_like(src)
    return Workload(lambda: dst.copy_(src), bytes_moved=2 * src.nbytes, ceiling="copy_bw")


@contextmanager
def _fake_benchmark(monkeypatch, name: str, seed: int, description: str = "fair",  # type: ignore[no-untyped-def]
                    **arm: float) -> Iterator[None]:
    """Benchmark ``name`` (one case, no ceilings; its candidate a ``FakeDevice`` arm of 1 ms,
    1 % jitter and ``arm``'s other settings) registered for the block, the fake device the
    CLI's backend."""
    dev = FakeDevice(seed=seed)
    monkeypatch.setattr(cli, "default_backend", lambda kind, index=None: dev.backend)
    register_benchmark(
        Benchmark(name=name, description=description, ceilings=(), cases=(Case("c"),),
                  candidate=dev.arm("x", 1e-3, jitter=0.01, **arm))
    )
    try:
        yield
    finally:
        unregister_benchmark(name)


@pytest.fixture
def tiny() -> object:
    bench = register_benchmark(
        Benchmark(
            name="test-tiny-copy", description="tiny CPU copy", ceilings=("copy_bw",),
            cases=(Case("4k", {"n": 4096}, quick=True), Case("big", {"n": 10**7})),
            candidate=Arm("copy", _tiny_copy),
        )
    )
    yield bench
    unregister_benchmark("test-tiny-copy")


def test_list_names_the_copy_benchmark(capsys) -> None:  # type: ignore[no-untyped-def]
    assert cli.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("copy ") for line in out.splitlines())


def test_copy_benchmark_declares_a_self_control_and_a_baseline() -> None:
    copy = get_benchmark("copy")
    assert copy.candidate.name == "copy" and len(copy.baselines) == 1
    assert {c.name for c in copy.cases_for(quick=True)} < {c.name for c in copy.cases}


def test_unknown_name_is_a_usage_error(capsys) -> None:  # type: ignore[no-untyped-def]
    assert cli.main(["no-such-bench"]) == 2
    assert "no-such-bench" in capsys.readouterr().err
    assert cli.main([]) == 2


def test_quick_cpu_run_writes_a_valid_record(tiny, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    rc = cli.main([
        "test-tiny-copy", "--quick", "--device", "cpu", "--cache", "warm", "--pairs", "4",
        "--calls", "2", "--no-plots", "--output-dir", str(tmp_path),
    ])
    record = json.loads((tmp_path / "test-tiny-copy.json").read_text())
    validate_record(record)
    assert rc in (0, cli.EXIT_CONTROL_NOT_NOISE)  # a shared CPU may be too noisy; the status says so
    assert (rc == 0) == record["control_is_noise"]
    assert [c["case"] for c in record["cases"]] == ["4k"]  # quick keeps the quick case
    assert record["protocol"]["pairs"] == 4 and record["protocol"]["graph"] is False
    assert record["ceilings"][0]["available"]
    assert "wrote" in capsys.readouterr().out


def test_cli_exits_3_when_the_aa_control_is_not_noise(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with _fake_benchmark(monkeypatch, "test-biased", 1, "second build slower",
                         build_penalty=0.1):
        rc = cli.main(["test-biased", "--device", "cpu", "--cache", "warm", "--no-plots",
                       "--output-dir", str(tmp_path)])
    assert rc == cli.EXIT_CONTROL_NOT_NOISE
    assert json.loads((tmp_path / "test-biased.json").read_text())["control_is_noise"] is False


def test_cli_exits_0_when_the_aa_control_is_noise(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with _fake_benchmark(monkeypatch, "test-fair", 1):
        rc = cli.main(["test-fair", "--device", "cpu", "--no-plots", "--emulated-ranks", "2",
                       "--output-dir", str(tmp_path)])
    assert rc == 0
    rec = json.loads((tmp_path / "test-fair.json").read_text())
    assert rec["ranks"] == {"mode": "emulated", "world_size": 2}
    assert [c["cache"] for c in rec["cases"]] == ["warm", "cold"]


def test_registering_a_different_benchmark_under_a_taken_name_fails() -> None:
    copy = get_benchmark("copy")
    other = Benchmark(name="copy", description="x", cases=(Case("c"),), candidate=Arm("y", _tiny_copy))
    with pytest.raises(ValueError, match="registered twice"):
        register_benchmark(other)
    assert get_benchmark("copy") is copy


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"cases": ()}, "cases"),
        ({"cases": (Case("a"), Case("a"))}, "cases"),
        ({"ceilings": ("tflops",)}, "ceilings"),
        ({"baselines": (Arm("x", _tiny_copy),)}, "baselines"),
        ({"name": "has space"}, "name"),
    ],
)
def test_bad_benchmark_declarations_name_the_argument(kwargs: dict, argument: str) -> None:
    base = {"name": "b", "description": "d", "cases": (Case("a"),), "candidate": Arm("x", _tiny_copy)}
    with pytest.raises(ValueError, match=argument):
        Benchmark(**(base | kwargs))


def test_workload_compared_with_a_ceiling_must_declare_its_work() -> None:
    with pytest.raises(ValueError, match="bytes_moved"):
        Workload(lambda: None, ceiling="copy_bw")
    with pytest.raises(ValueError, match="flops"):
        Workload(lambda: None, ceiling="fp8_mm")
    with pytest.raises(ValueError, match="bytes_sent"):
        Workload(lambda: None, bytes_moved=1, ceiling="peer_copy_bw")
    with pytest.raises(ValueError, match="ceiling"):
        Workload(lambda: None, bytes_moved=1, ceiling="hbm")


def _fair_run(monkeypatch, out: Path, *extra: str) -> int:  # type: ignore[no-untyped-def]
    with _fake_benchmark(monkeypatch, "test-fair2", 2):
        return cli.main(["test-fair2", "--device", "cpu", "--cache", "warm", "--pairs", "4",
                         "--output-dir", str(out), *extra])


def test_without_matplotlib_the_run_writes_json_and_markdown_and_says_how_to_plot(
    monkeypatch, tmp_path: Path, capsys  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setattr(cli.output, "have_matplotlib", lambda: False)
    assert _fair_run(monkeypatch, tmp_path) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test-fair2.json", "test-fair2.md"]
    assert "--plot" in capsys.readouterr().out


def test_plot_renders_report_and_plots_of_a_record_elsewhere(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert _fair_run(monkeypatch, tmp_path / "run", "--no-plots") == 0
    record = tmp_path / "run" / "test-fair2.json"
    assert cli.main(["--plot", str(record), "--output-dir", str(tmp_path / "plots")]) == 0
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "test-fair2.md", "test-fair2_ceilings.png", "test-fair2_samples.png",
    ]
    assert (tmp_path / "plots" / "test-fair2.md").read_text() == (tmp_path / "run" / "test-fair2.md").read_text()


def test_case_globs_select_cases_and_a_glob_matching_nothing_is_a_usage_error(
    tiny, tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
) -> None:
    assert [c.name for c in tiny.cases_for(False, ["b*"])] == ["big"]
    assert [c.name for c in tiny.cases_for(False, ["4k", "big"])] == ["4k", "big"]
    assert [c.name for c in tiny.cases_for(True, ["4*"])] == ["4k"]
    with pytest.raises(ValueError, match="'nope' matches none"):
        tiny.cases_for(False, ["4k", "nope"])
    with pytest.raises(ValueError, match="matches none"):  # quick drops "big"
        tiny.cases_for(True, ["big"])
    assert cli.main(["test-tiny-copy", "--device", "cpu", "--case", "zzz"]) == 2
    assert "'zzz' matches none" in capsys.readouterr().err


def test_staging_benchmark_declares_the_issue_grid() -> None:
    """Issue 6: H in {4096, 7168}, T in {1..16384}, K in {4, 8}, for every staging kernel,
    against the Torch path and a copy of the same bytes."""
    staging = get_benchmark("staging")
    assert [b.name for b in staging.baselines] == ["torch", "copy"]
    shapes = {(c.scenario, c.shape["hidden"], c.shape["tokens"], c.shape["top_k"])
              for c in staging.cases}
    formats = {c.scenario for c in staging.cases}
    assert formats == {"bf16", "mxfp8", "mxfp8-pre", "nvfp4", "nvfp4-pre", "safefp8"}
    for f in formats:
        for h in (4096, 7168):
            for t in (1, 4, 16, 128, 1024, 4096, 16384):
                for k in (4, 8):
                    assert (f, h, t, k) in shapes


def test_a_benchmark_whose_arms_cannot_be_captured_times_eager_loops() -> None:
    """``Benchmark.graph`` False (``ep_layer_torch``: its baseline reads split sizes on the
    host) turns the protocol's CUDA graphs off, as ``--no-graph`` does; the others keep them."""
    import megamoe.bench.benchmarks.ep_layer  # noqa: F401  (registers both)

    args = cli._parser().parse_args(["ep_layer_torch", "--device", "cuda"])
    eager, graphed = get_benchmark("ep_layer_torch"), get_benchmark("ep_layer")
    assert eager.graph is False and graphed.graph is True
    assert cli.protocol_from_args(args, graph=eager.graph).graph is False
    assert cli.protocol_from_args(args, graph=graphed.graph).graph is True
