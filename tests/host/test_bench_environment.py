"""The environment of a run: device state read (never set), versions, commit, source hash."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from megamoe.bench import device as device_mod
from megamoe.bench.device import HostBackend, physical_gpu_id, read_gpu_clocks
from megamoe.bench.environment import collect_environment, source_hash


def _fake_pynvml(calls: list[str]) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 0, 1, 0
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlDeviceGetHandleByIndex = lambda i: ("idx", i)
    m.nvmlDeviceGetHandleByUUID = lambda u: ("uuid", u)
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlSystemGetDriverVersion = lambda: "580.1"
    m.nvmlDeviceGetClockInfo = lambda h, c: 1980 if c == 0 else 3201
    m.nvmlDeviceGetMaxClockInfo = lambda h, c: 1980 if c == 0 else 3201
    m.nvmlDeviceGetTemperature = lambda h, s: 40
    m.nvmlDeviceGetPowerUsage = lambda h: 120_000
    m.nvmlDeviceGetPowerManagementLimit = lambda h: 700_000
    # Anything that would change the card's settings must never be called.
    for setter in ("nvmlDeviceSetApplicationsClocks", "nvmlDeviceSetPowerManagementLimit",
                   "nvmlDeviceSetPersistenceMode", "nvmlDeviceSetGpuLockedClocks"):
        setattr(m, setter, lambda *a, _n=setter: calls.append(_n))
    return m


def test_gpu_state_is_read_through_pynvml_and_is_json(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(calls))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    state = read_gpu_clocks(1)
    assert state["source"] == "pynvml" and state["id"] == "5"
    assert state["name"] == "NVIDIA H200" and state["clocks.sm"] == 1980
    assert state["power.draw"] == 120.0 and state["power.limit"] == 700.0
    assert calls == ["init", "shutdown"]  # read only: no setter was called
    json.dumps(state, allow_nan=False)


def test_gpu_state_without_pynvml_or_nvidia_smi_says_why(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(device_mod.subprocess, "run", _raise_missing)
    state = read_gpu_clocks(0)
    assert state["source"] is None and "nvidia-smi" in state["error"]


def _raise_missing(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise FileNotFoundError("nvidia-smi")


def test_physical_gpu_id_honours_cuda_visible_devices(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc, GPU-def")
    assert physical_gpu_id(1) == "GPU-def"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert physical_gpu_id(2) == "2"


def test_environment_names_versions_commit_and_source_hash() -> None:
    env = collect_environment(HostBackend())
    assert env["packages"]["torch"]
    assert env["git_commit"] is None or len(env["git_commit"]) == 40
    assert len(env["source_sha256"]) == 64
    json.dumps(env, allow_nan=False)


def test_source_hash_changes_when_a_source_file_changes(tmp_path: Path) -> None:
    pkg = tmp_path / "megamoe"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    before = source_hash(tmp_path)
    (pkg / "a.py").write_text("x = 2\n")
    assert source_hash(tmp_path) != before


@pytest.mark.parametrize("kind", ["tpu", ""])
def test_unknown_device_kind_is_rejected(kind: str) -> None:
    with pytest.raises(ValueError, match="device"):
        device_mod.default_backend(kind)


def test_the_caller_names_the_commit_a_run_measures(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``MEGAMOE_GIT_COMMIT`` (and ``MEGAMOE_GIT_DIRTY``) win over the checkout's git, as for
    qualification records: a tree copied to a GPU machine may carry another checkout's git
    state (a detached commit's run recorded ``main``'s commit). The report says who named it."""
    from megamoe.bench.report import _commit_line

    monkeypatch.setenv("MEGAMOE_GIT_COMMIT", "c" * 40)
    monkeypatch.delenv("MEGAMOE_GIT_DIRTY", raising=False)
    env = collect_environment(HostBackend())
    assert (env["git_commit"], env["git_dirty"], env["git_source"]) == ("c" * 40, "unknown", "env")
    assert _commit_line(env) == "c" * 40 + " (dirty: unknown) (named by MEGAMOE_GIT_COMMIT)"
    monkeypatch.setenv("MEGAMOE_GIT_DIRTY", "false")
    assert collect_environment(HostBackend())["git_dirty"] == "false"
    monkeypatch.delenv("MEGAMOE_GIT_COMMIT")
    env = collect_environment(HostBackend())
    assert env["git_source"] == "git" and env["git_commit"] != "c" * 40
    assert "named by" not in _commit_line(env)


def test_a_clean_checkouts_commit_line_says_nothing_of_dirt() -> None:
    from megamoe.bench.report import _commit_line

    assert _commit_line({"git_commit": "a" * 40, "git_dirty": False, "git_source": "git"}) == "a" * 40
    assert _commit_line({"git_commit": "a" * 40, "git_dirty": True}) == "a" * 40 + " (dirty)"
    assert _commit_line({"git_commit": None, "git_dirty": None}) == "unknown"
