"""devtools/nvshmem_device.sh, the NVSHMEM probe's device call, with a stand-in qualify.py:
by default the multi tier's oracle tests under an emulated nvshmem world, filtered, and no
record to commit; ``all``: the whole tier, unfiltered, and its record back under
``$OUT/records/`` (the evidence that would lift the refusal of an emulated nvshmem world)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.host.test_device_qualify_script import DEVICE_FILE_LIMIT, _files

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "devtools" / "nvshmem_device.sh"
FAKE_QUALIFY = """
import json, sys
from pathlib import Path
args = sys.argv[1:]
out = Path(args[args.index("--output-dir") + 1])
out.mkdir(parents=True)
(out / "qualification.json").write_text(json.dumps(
    {"suggested_record_name": "20261205T000000Z_multi_abc.json", "argv": args}))
(out / "summary.md").write_text("# Qualification: PASS\\n")
"""


def _run(tmp_path: Path, *args: str, unpacked: bool = True) -> tuple[int, Path]:
    """One call; ``unpacked``: nvshmem4py's site is there already (a warm machine), else only
    the carried ``.whl-nvshmem/site.tar.xz``."""
    repo, out = tmp_path / "repo", tmp_path / "out"
    (repo / ".whl").mkdir(parents=True)
    (repo / ".whl" / "prelude.sh").write_text("export PYTHONPATH=${PYTHONPATH:-}\n")
    (repo / "qualify.py").write_text(FAKE_QUALIFY)
    if unpacked:
        (tmp_path / "site" / "nvshmem").mkdir(parents=True)
    else:
        (repo / ".whl-nvshmem").mkdir()
        with tarfile.open(repo / ".whl-nvshmem" / "site.tar.xz", "w:xz") as tar:
            member = tarfile.TarInfo("nvshmem/__init__.py")
            tar.addfile(member, io.BytesIO(b""))
    out.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "OUT": str(out), "MEGAMOE_NVSHMEM_SITE": str(tmp_path / "site"),
           "MEGAMOE_NVSHMEM_TMP": str(tmp_path / "q"), "MEGAMOE_GPU_LOCK": str(tmp_path / "gpu.lock"),
           "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, out


def _argv(out: Path) -> list[str]:
    logs = out / "logs-nvshmem.tgz"
    assert logs.exists()
    with tarfile.open(logs) as tar:
        member = tar.extractfile("./multi/qualification.json")
        assert member is not None
        rec = json.loads(member.read())
    return rec["argv"]


def test_the_probe_runs_the_oracle_tests_filtered_and_brings_back_no_record(tmp_path) -> None:
    rc, out = _run(tmp_path)
    assert rc == 0
    argv = _argv(out)
    assert argv[argv.index("--filter") + 1] == "test_ep_oracle"
    assert argv[argv.index("--backend") + 1] == "nvshmem"
    assert argv[argv.index("--mode") + 1] == "emulated"
    assert not (out / "records").exists()
    assert "filter: test_ep_oracle" in (out / "probe.txt").read_text()
    assert len(_files(out)) <= DEVICE_FILE_LIMIT


def test_all_runs_the_whole_tier_and_brings_back_its_record(tmp_path) -> None:
    rc, out = _run(tmp_path, "all")
    assert rc == 0
    assert "--filter" not in _argv(out)
    assert [p.name for p in (out / "records").iterdir()] == ["20261205T000000Z_multi_abc.json"]
    assert len(_files(out)) <= DEVICE_FILE_LIMIT


def test_a_cold_machine_unpacks_the_carried_nvshmem4py(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, out = _run(tmp_path, unpacked=False)
    assert rc == 0 and (tmp_path / "site" / "nvshmem" / "__init__.py").is_file()
    assert _argv(out)[:2] == ["--suite", "multi"]
