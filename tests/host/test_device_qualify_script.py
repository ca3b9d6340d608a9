"""``devtools/device_qualify.sh``: the device returns at most 8 files from ``$OUT``, so the
script must bring back every record under its suggested name, the summaries and the logs in
at most that many files, and fail when a suite fails. Run here with a stand-in
``qualify.py`` that writes what the real one writes (a record, a summary, one log and one
JUnit report per case) in a scratch checkout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.harness.suite_run import worker_threads
from tests.suites import SANITIZER_TOOLS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "devtools" / "device_qualify.sh"
DEVICE_FILE_LIMIT = 8  # /work/.library/device/README.md: files back from $OUT
DEVICE_CALL_LIMIT_S = 600  # /work/.library/device/README.md: the most one command may run
PRELUDE_AND_COPY_S = 30  # by hand: unpacking the carried wheel, then copying the records back

FAKE_QUALIFY = """
import json, sys
from pathlib import Path
args = sys.argv[1:]
out = Path(args[args.index("--output-dir") + 1])
suite = args[args.index("--suite") + 1]
tool = args[args.index("--sanitizer-tool") + 1] if "--sanitizer-tool" in args else None
name = suite if tool is None else f"{suite}-{tool}"
(out / "cases").mkdir(parents=True)
for i in range(25):  # one log and one JUnit report per case, as the sanitize suite writes
    (out / "cases" / f"case{i}.log").write_text("log")
    (out / "cases" / f"case{i}.junit.xml").write_text("<x/>")
status = "fail" if tool == "{failing}" else "pass"
(out / "qualification.json").write_text(json.dumps(
    {"status": status, "suggested_record_name": f"20261203T000000Z_{name}_abc.json",
     "argv": args, "threads": __import__("os").environ.get("OMP_NUM_THREADS")}))
(out / "summary.md").write_text(f"# Qualification: {status.upper()} ({name})\\n")
sys.exit(0 if status == "pass" else 1)
"""


def _run(tmp_path: Path, what: str, failing: str = "none",
         tool: str | None = None, out_name: str = "out",
         env_extra: dict[str, str] | None = None) -> tuple[int, Path]:
    """One device call: a fresh ``$OUT`` (``out_name``) each time, the same machine's
    ``/tmp`` (``MEGAMOE_QUALIFY_TMP``) across calls, as on a warm device."""
    repo, out = tmp_path / "repo", tmp_path / out_name
    (repo / ".whl").mkdir(parents=True, exist_ok=True)
    (repo / ".whl" / "prelude.sh").write_text("true\n")
    (repo / "qualify.py").write_text(FAKE_QUALIFY.replace("{failing}", failing))
    out.mkdir()
    bindir = tmp_path / "bin"  # ``python3`` in the script: this interpreter
    bindir.mkdir(exist_ok=True)
    if not (bindir / "python3").exists():
        (bindir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "OUT": str(out), "MEGAMOE_QUALIFY_TMP": str(tmp_path / "q"),
           "MEGAMOE_GPU_LOCK": str(tmp_path / "gpu.lock"),
           "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT),  # the script reads the tool list from tests.suites
           **(env_extra or {})}
    argv = ["bash", str(SCRIPT), what] + (tool.split() if tool else [])
    proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, out


PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")
"""Names the device brings back: session 43 left ``logs-mega_sm107-single+multi.tgz`` out
("name"), so anything beyond these characters is suspect."""


def _files(out: Path) -> list[Path]:
    """Every file under ``out``; each one's name must be one the device brings back."""
    files = sorted(p for p in out.rglob("*") if p.is_file())
    odd = [p.name for p in files if not PLAIN_NAME.fullmatch(p.name)]
    assert not odd, f"the device leaves these names out: {odd}"
    return files


@pytest.mark.parametrize("what", ["single", "sanitize"])
def test_every_record_comes_back_under_its_name_within_the_file_limit(tmp_path, what) -> None:
    rc, out = _run(tmp_path, what)
    assert rc == 0
    files = _files(out)
    assert len(files) <= DEVICE_FILE_LIMIT
    suites = ["single"] if what == "single" else [f"sanitize-{t}" for t in SANITIZER_TOOLS]
    records = sorted(p.name for p in (out / "records").iterdir())
    assert records == sorted(f"20261203T000000Z_{s}_abc.json" for s in suites)
    for s in suites:
        rec = json.loads((out / "records" / f"20261203T000000Z_{s}_abc.json").read_text())
        assert rec["status"] == "pass"
        assert f"({s})" in (out / "summaries.md").read_text()
    with tarfile.open(out / f"logs-{what}.tgz") as tar:
        logs = [n for n in tar.getnames() if n.endswith(".log")]
    assert len(logs) >= 25 * len(suites)  # every case's log, in one file


def test_a_failing_suite_fails_the_script_and_its_record_still_comes_back(tmp_path) -> None:
    rc, out = _run(tmp_path, "sanitize", failing="racecheck")
    assert rc != 0
    rec = json.loads((out / "records" / "20261203T000000Z_sanitize-racecheck_abc.json")
                     .read_text())
    assert rec["status"] == "fail"
    assert len(list((out / "records").iterdir())) == len(SANITIZER_TOOLS)


def test_an_unknown_suite_is_refused(tmp_path) -> None:
    rc, out = _run(tmp_path, "bogus")
    assert rc == 2
    assert not list((out / "records").iterdir())


def test_multi_without_a_world_size_is_refused(tmp_path) -> None:
    rc, out = _run(tmp_path, "multi")
    assert rc != 0
    assert not (out / "records").exists() or not list((out / "records").iterdir())


def test_one_sanitizer_tool_can_be_run_again_alone(tmp_path) -> None:
    """``sanitize racecheck``: a second run of one tool (a sanitizer run that crashed on the
    host) qualifies that tool only."""
    rc, out = _run(tmp_path, "sanitize", tool="racecheck")
    assert rc == 0
    assert [p.name for p in (out / "records").iterdir()] == [
        "20261203T000000Z_sanitize-racecheck_abc.json"]


def test_an_unknown_sanitizer_tool_is_refused(tmp_path) -> None:
    rc, out = _run(tmp_path, "sanitize", tool="leakcheck")
    assert rc == 2
    assert not list((out / "records").iterdir())


def test_a_rerun_on_a_warm_machine_reports_only_itself(tmp_path) -> None:
    """The first call's racecheck fails; the second call, on the same machine's ``/tmp``,
    runs racecheck again and passes: it must exit 0 and bring back that one record (not the
    first call's failed status, not its other records)."""
    rc, _ = _run(tmp_path, "sanitize", failing="racecheck", out_name="out1")
    assert rc != 0
    rc, out = _run(tmp_path, "sanitize", tool="racecheck", out_name="out2")
    assert rc == 0
    assert [p.name for p in (out / "records").iterdir()] == [
        "20261203T000000Z_sanitize-racecheck_abc.json"]
    assert "PASS (sanitize-racecheck)" in (out / "summaries.md").read_text()


def _single_argv(out: Path) -> list[str]:
    rec = json.loads((out / "records" / "20261203T000000Z_single_abc.json").read_text())
    return rec["argv"]


def test_the_single_suite_gets_a_limit_that_fits_one_device_call(tmp_path,
                                                                  monkeypatch) -> None:
    """Session 28: the suite's 480 s limit stopped fitting it (427 s of xdist phase, then
    the alone phase killed). Its default limit must still leave the prelude and the copies
    inside one device call, and both knobs must reach ``qualify.py``."""
    monkeypatch.delenv("MEGAMOE_SINGLE_TIMEOUT", raising=False)
    monkeypatch.delenv("MEGAMOE_SINGLE_WORKERS", raising=False)
    rc, out = _run(tmp_path, "single", out_name="default")
    assert rc == 0
    argv = _single_argv(out)
    timeout = float(argv[argv.index("--timeout") + 1])
    assert 480 < timeout <= DEVICE_CALL_LIMIT_S - PRELUDE_AND_COPY_S
    assert argv[argv.index("--workers") + 1] == "12"  # session 29: 469 s in all
    rc, out = _run(tmp_path, "single", out_name="knobs",
                   env_extra={"MEGAMOE_SINGLE_TIMEOUT": "300", "MEGAMOE_SINGLE_WORKERS": "8"})
    assert rc == 0
    argv = _single_argv(out)
    assert argv[argv.index("--timeout") + 1] == "300"
    assert argv[argv.index("--workers") + 1] == "8"


def test_a_shard_of_single_reaches_qualify(tmp_path) -> None:
    """``single 1/2``: the suite in shards, one device call each (``tests.harness.shard``)."""
    rc, out = _run(tmp_path, "single", tool="1/2")
    assert rc == 0
    argv = _single_argv(out)
    assert argv[argv.index("--shard") + 1] == "1/2"
    rc, out = _run(tmp_path, "single", out_name="whole")
    assert rc == 0 and "--shard" not in _single_argv(out)


def test_a_mutants_call_runs_the_gpu_tier_and_brings_back_its_record(tmp_path) -> None:
    """``mutants``: the catalog's GPU-tier planted bugs (``--mutant-tiers single``) under a
    bound per mutant; ``mutants host,single`` the whole catalog."""
    rc, out = _run(tmp_path, "mutants", env_extra={"MEGAMOE_MUTANT_TIMEOUT": "240"})
    assert rc == 0 and len(_files(out)) <= DEVICE_FILE_LIMIT
    (rec,) = (out / "records").iterdir()
    argv = json.loads(rec.read_text())["argv"]
    assert argv[argv.index("--suite") + 1] == "mutants"
    assert argv[argv.index("--mutant-tiers") + 1] == "single"
    assert argv[argv.index("--timeout") + 1] == "240" and "--wall-budget" in argv
    rc, out = _run(tmp_path, "mutants", tool="host,single", out_name="all")
    (rec,) = (out / "records").iterdir()
    argv = json.loads(rec.read_text())["argv"]
    assert rc == 0 and argv[argv.index("--mutant-tiers") + 1] == "host,single"


def test_single_and_gpu_share_compiles_unless_told_not_to(tmp_path, monkeypatch) -> None:
    """The whole ``single`` passed with ``--share-compiles`` (H100, 2026-12-05: 662 s against
    717 s in three shards), so ``single`` and ``gpu`` pass it by default;
    ``MEGAMOE_SHARE_COMPILES=0`` leaves it off, and the other runs never get it."""
    monkeypatch.delenv("MEGAMOE_SHARE_COMPILES", raising=False)
    monkeypatch.delenv("MEGAMOE_QUALIFY_EXTRA", raising=False)
    rc, out = _run(tmp_path, "single", out_name="shared")
    assert rc == 0 and "--share-compiles" in _single_argv(out)
    rc, out = _run(tmp_path, "single", out_name="unshared",
                   env_extra={"MEGAMOE_SHARE_COMPILES": "0"})
    assert rc == 0 and "--share-compiles" not in _single_argv(out)
    for what, tool in (("gpu", None), ("sanitize", "memcheck"), ("multi", "2")):
        rc, out = _run(tmp_path, what, tool=tool, out_name=f"{what}-shares")
        assert rc == 0
        argvs = [json.loads(r.read_text())["argv"] for r in (out / "records").iterdir()]
        assert argvs and all(("--share-compiles" in a) == (what == "gpu") for a in argvs), what


def test_sanitizer_runs_take_several_cases_at_once_and_a_seed_suite_runs_in_workers(
        tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``sanitize``, ``gpu`` and ``seed`` pass ``--sanitize-workers 3``
    (``MEGAMOE_SANITIZE_WORKERS``); a seed suite's single part gets 12 xdist workers
    (``MEGAMOE_SEED_WORKERS``) and shared compiles, as ``single`` does; the four ``sanitize``
    processes give each case its share of the cores among all twelve."""
    for v in ("MEGAMOE_SANITIZE_WORKERS", "MEGAMOE_SEED_WORKERS", "MEGAMOE_SHARE_COMPILES",
              "MEGAMOE_QUALIFY_EXTRA", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(v, raising=False)

    def records(what: str, tool: str | None, name: str, **env: str) -> list[dict]:
        rc, out = _run(tmp_path, what, tool=tool, out_name=name, env_extra=env)
        assert rc == 0
        return [json.loads(r.read_text()) for r in (out / "records").iterdir()]

    def value(argv: list[str], option: str) -> str | None:
        return argv[argv.index(option) + 1] if option in argv else None

    for what, tool in (("sanitize", None), ("gpu", None), ("seed", "mega_sm107")):
        recs = records(what, tool, f"{what}-default")
        assert recs and {value(r["argv"], "--sanitize-workers") for r in recs} == {"3"}, what
        knob = records(what, tool, f"{what}-knob", MEGAMOE_SANITIZE_WORKERS="2")
        assert {value(r["argv"], "--sanitize-workers") for r in knob} == {"2"}, what
    sanitize = records("sanitize", None, "threads")
    assert {r["threads"] for r in sanitize} == {str(worker_threads(3 * len(SANITIZER_TOOLS)))}
    assert {r["threads"] for r in records("sanitize", None, "set", OMP_NUM_THREADS="7")} == {"7"}
    (seed,) = records("seed", "mega_sm107", "seed-workers")
    assert value(seed["argv"], "--workers") == "12" and "--share-compiles" in seed["argv"]
    (seed,) = records("seed", "mega_sm107", "seed-workers-knob", MEGAMOE_SEED_WORKERS="4")
    assert value(seed["argv"], "--workers") == "4"
    for what, tool in (("single", None), ("multi", "2"), ("mutants", None)):
        assert all("--sanitize-workers" not in r["argv"] for r in records(what, tool, what))


def test_the_sanitizer_tools_get_a_limit_that_fits_one_device_call(tmp_path,
                                                                   monkeypatch) -> None:
    """Session 32: racecheck's 15 cases passed the old 280 s; the default leaves the prelude
    and the copies inside one call, and the knob reaches ``qualify.py``."""
    monkeypatch.delenv("MEGAMOE_SANITIZE_TIMEOUT", raising=False)
    rc, out = _run(tmp_path, "sanitize", out_name="default")
    assert rc == 0 and len(list((out / "records").iterdir())) == len(SANITIZER_TOOLS)
    for rec in (out / "records").iterdir():
        argv = json.loads(rec.read_text())["argv"]
        assert 280 < float(argv[argv.index("--timeout") + 1]) <= (
            DEVICE_CALL_LIMIT_S - PRELUDE_AND_COPY_S)
    rc, out = _run(tmp_path, "sanitize", out_name="knob",
                   env_extra={"MEGAMOE_SANITIZE_TIMEOUT": "333"})
    assert rc == 0 and len(list((out / "records").iterdir())) == len(SANITIZER_TOOLS)
    for rec in (out / "records").iterdir():
        argv = json.loads(rec.read_text())["argv"]
        assert argv[argv.index("--timeout") + 1] == "333"


@pytest.mark.parametrize(("args", "name"), [("2", "multi"), ("4 memcheck", "multi-memcheck")])
def test_a_multi_call_brings_back_its_record_and_passes_the_world_size(tmp_path, args,
                                                                        name) -> None:
    rc, out = _run(tmp_path, "multi", tool=args)
    assert rc == 0
    records = sorted(p.name for p in (out / "records").iterdir())
    assert records == [f"20261203T000000Z_{name}_abc.json"]
    argv = json.loads((out / "records" / records[0]).read_text())["argv"]
    size, *tool = args.split()
    assert argv[argv.index("--world-size") + 1] == size
    assert ("--sanitizer-tool" in argv) == bool(tool)
    assert len(_files(out)) <= DEVICE_FILE_LIMIT


def test_a_seed_suite_call_brings_back_its_record(tmp_path) -> None:
    rc, out = _run(tmp_path, "seed", tool="mega_sm90_mxfp4 4")
    assert rc == 0
    records = sorted(p.name for p in (out / "records").iterdir())
    assert records == ["20261203T000000Z_mega_sm90_mxfp4_abc.json"]
    argv = json.loads((out / "records" / records[0]).read_text())["argv"]
    assert argv[argv.index("--suite") + 1] == "mega_sm90_mxfp4"
    assert argv[argv.index("--world-size") + 1] == "4"
    assert "--parts" not in argv  # every part
    assert len(_files(out)) <= DEVICE_FILE_LIMIT


def test_a_seed_suite_runs_in_parts_over_two_calls(tmp_path) -> None:
    rc, out = _run(tmp_path, "seed", tool="mega_sm107 2 single,multi")
    assert rc == 0 and (out / "logs-mega_sm107-single-multi.tgz").exists()
    (rec,) = (out / "records").iterdir()
    argv = json.loads(rec.read_text())["argv"]
    assert argv[argv.index("--parts") + 1] == "single,multi"
    rc, out = _run(tmp_path, "seed", tool="mega_sm107 2 sanitize", out_name="out2")
    assert rc == 0 and (out / "logs-mega_sm107-sanitize.tgz").exists()
    (rec,) = (out / "records").iterdir()
    argv = json.loads(rec.read_text())["argv"]
    assert argv[argv.index("--parts") + 1] == "sanitize"


def test_the_gpu_call_runs_the_sanitizers_beside_single_in_one_record(tmp_path) -> None:
    rc, out = _run(tmp_path, "gpu", env_extra={"MEGAMOE_GPU_TIMEOUT": "540"})
    assert rc == 0 and len(_files(out)) <= DEVICE_FILE_LIMIT
    (rec,) = (out / "records").iterdir()
    argv = json.loads(rec.read_text())["argv"]
    assert argv[argv.index("--suite") + 1] == "gpu" and "--sanitizers-beside" in argv
    assert argv[argv.index("--timeout") + 1] == "540" and "--workers" in argv
    assert "--shard" not in argv


def test_a_gpu_call_may_take_a_shard_of_single(tmp_path) -> None:
    """``gpu 1/3``: shard 1 of 3 of ``single`` with the sanitizer tools whole beside it; its log
    archive is tagged with the shard."""
    rc, out = _run(tmp_path, "gpu", tool="1/3")
    assert rc == 0 and len(_files(out)) <= DEVICE_FILE_LIMIT
    (rec,) = (out / "records").iterdir()
    argv = json.loads(rec.read_text())["argv"]
    assert argv[argv.index("--shard") + 1] == "1/3" and "--sanitizers-beside" in argv
    assert (out / "logs-gpu-1of3.tgz").is_file()


@pytest.mark.parametrize("script", ["device_qualify.sh", "ep_bench_device.sh",
                                    "flashinfer_device.sh", "nvshmem_device.sh"])
def test_a_device_script_beside_another_stops_at_once_naming_the_lock(tmp_path,
                                                                       script) -> None:
    """Two device scripts at once fail each other's suites at the end (the neighbour watch);
    the second one stops before it runs anything (devtools/gpu_lock.sh)."""
    import fcntl

    lock = tmp_path / "gpu.lock"
    repo, out = tmp_path / "repo", tmp_path / "out"
    repo.mkdir()
    out.mkdir()
    ran = tmp_path / "ran"
    (repo / ".whl").mkdir()
    (repo / ".whl" / "prelude.sh").write_text(f"touch {ran}\n")  # the first thing each runs
    args = {"device_qualify.sh": ["single"], "ep_bench_device.sh": ["2"],
            "flashinfer_device.sh": ["flashinfer-sm90-cake"], "nvshmem_device.sh": []}[script]
    env = {**os.environ, "OUT": str(out), "MEGAMOE_GPU_LOCK": str(lock)}
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another script holds it
        proc = subprocess.run(["bash", str(SCRIPT.parent / script), *args], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"another device script holds the GPU (lock {lock};" in proc.stderr
    assert not ran.exists() and not any(out.iterdir())


def _budget(out: Path) -> list[float]:
    return [float(argv[argv.index("--wall-budget") + 1]) for argv in
            (json.loads(rec.read_text())["argv"] for rec in (out / "records").iterdir())]


@pytest.mark.parametrize(("what", "tool"), [("single", None), ("sanitize", None),
                                            ("multi", "2"), ("gpu", "1/3"),
                                            ("seed", "mega_sm107")])
def test_every_run_is_bounded_to_end_inside_the_device_call(tmp_path, what, tool) -> None:
    """``--wall-budget``: at most the call's 600 s less the prelude's unpacking and the copy
    back, so that a run past it still writes its record and its logs come back."""
    rc, out = _run(tmp_path, what, tool=tool)
    budgets = _budget(out)
    assert rc == 0 and budgets
    assert all(480 < b <= DEVICE_CALL_LIMIT_S - PRELUDE_AND_COPY_S for b in budgets), budgets


def test_runs_sharing_one_call_share_its_end(tmp_path) -> None:
    """``MEGAMOE_CALL_END`` (epoch seconds), exported once for several runs in one call: each
    gets what is left of it, and a run started past it gets 1 s (it times out at once)."""
    rc, out = _run(tmp_path, "multi", tool="2", out_name="near",
                   env_extra={"MEGAMOE_CALL_END": str(int(time.time()) + 100)})
    (budget,) = _budget(out)
    assert rc == 0 and 80 <= budget <= 100
    rc, out = _run(tmp_path, "multi", tool="2", out_name="past",
                   env_extra={"MEGAMOE_CALL_END": str(int(time.time()) - 50)})
    assert rc == 0 and _budget(out) == [1.0]


@pytest.mark.parametrize(("what", "tool"), [("single", "1/3"), ("sanitize", None),
                                            ("multi", "2"), ("seed", "mega_sm107")])
def test_extra_options_reach_every_run(tmp_path, what, tool) -> None:
    """``MEGAMOE_QUALIFY_EXTRA``: its words are added to every qualify.py run of the call
    (to measure an option on the device); without it the runs get none of them."""
    rc, out = _run(tmp_path, what, tool=tool, out_name="with",
                   env_extra={"MEGAMOE_QUALIFY_EXTRA": "--share-compiles --group-compiles"})
    argvs = [json.loads(rec.read_text())["argv"] for rec in (out / "records").iterdir()]
    assert rc == 0 and argvs
    assert all("--share-compiles" in a and "--group-compiles" in a for a in argvs), argvs
    rc, out = _run(tmp_path, what, tool=tool, out_name="without")
    argvs = [json.loads(rec.read_text())["argv"] for rec in (out / "records").iterdir()]
    assert rc == 0 and argvs and not any("--group-compiles" in a for a in argvs), argvs
