"""``devtools/ep_bench_device.sh``: one device call runs the EP benchmarks in the world the
machine allows (real with P GPUs, else emulated on one), gives the exchange benchmarks
``--no-graph`` only where their all-to-all baseline goes over gloo, fits the device call's
time, and brings back each record within the file limit. Run here with stand-ins for
``python3`` (torchrun) and ``nvidia-smi``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.host.test_device_qualify_script import (
    DEVICE_CALL_LIMIT_S,
    DEVICE_FILE_LIMIT,
    PRELUDE_AND_COPY_S,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "devtools" / "ep_bench_device.sh"

FAKE_PYTHON = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
name = args[args.index("megamoe.bench") + 1]
out = Path(args[args.index("--output-dir") + 1])
out.mkdir(parents=True)
(out / f"{{name}}.json").write_text(json.dumps({{"argv": args,
                                                "mode": os.environ["MEGAMOE_EP_MODE"]}}))
(out / f"{{name}}.md").write_text("# " + name)  # the report, as the real CLI writes it
"""


def _run(tmp_path: Path, gpus: int, *args: str) -> tuple[int, Path, str]:
    repo, out, bindir = tmp_path / "repo", tmp_path / "out", tmp_path / "bin"
    for d in (repo / ".whl", out, bindir):
        d.mkdir(parents=True)
    (repo / ".whl" / "prelude.sh").write_text("true\n")
    (bindir / "python3").write_text(FAKE_PYTHON)
    (bindir / "nvidia-smi").write_text("#!/bin/sh\n" + "echo GPU\n" * gpus)
    for f in ("python3", "nvidia-smi"):
        (bindir / f).chmod(0o755)
    env = {**os.environ, "OUT": str(out), "PATH": f"{bindir}:{os.environ['PATH']}",
           "MEGAMOE_GPU_LOCK": str(tmp_path / "gpu.lock")}
    env.pop("MEGAMOE_EP_BENCH_TIMEOUT", None)
    r = subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, out, r.stdout + r.stderr


def _records(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def test_on_one_gpu_the_world_is_emulated_and_only_the_exchange_benchmarks_run_eagerly(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, 1, "2", "quick")
    assert rc == 0, log
    recs = _records(out)
    assert set(recs) == {"ep_layer", "ep_dispatch", "ep_combine"}
    for name, rec in recs.items():
        assert rec["mode"] == "emulated" and "--quick" in rec["argv"]
        assert "--nproc-per-node=2" in rec["argv"]
        assert ("--no-graph" in rec["argv"]) == (name != "ep_layer"), name
    assert len(list(out.iterdir())) <= DEVICE_FILE_LIMIT


def test_with_p_gpus_the_world_is_real_graphs_are_kept_and_the_stock_baseline_runs(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, 8, "8")
    assert rc == 0, log
    recs = _records(out)
    assert set(recs) == {"ep_layer", "ep_dispatch", "ep_combine", "ep_layer_torch"}
    for rec in recs.values():
        assert rec["mode"] == "real" and "--no-graph" not in rec["argv"]
        assert "--quick" not in rec["argv"]
    assert len(list(out.iterdir())) <= DEVICE_FILE_LIMIT
    assert (out / "logs-ep-bench.tgz").exists()


def test_every_benchmark_together_fits_one_device_call() -> None:
    text = SCRIPT.read_text()
    default = int(text.split("MEGAMOE_EP_BENCH_TIMEOUT:-")[1].split("}")[0])
    assert 4 * (default + 10) + PRELUDE_AND_COPY_S <= DEVICE_CALL_LIMIT_S


@pytest.mark.parametrize(("args", "says"), [((), "usage"), (("two",), "expected 2, 4 or 8")])
def test_a_missing_or_bad_world_size_is_refused_before_anything_runs(tmp_path, args, says) -> None:  # type: ignore[no-untyped-def]
    rc, out, log = _run(tmp_path, 1, *args)
    assert rc != 0 and not _records(out) and says in log
