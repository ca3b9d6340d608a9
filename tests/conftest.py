"""Shared pytest configuration: tier markers by directory, hypothesis profiles.

Hypothesis profiles (select with ``MEGAMOE_HYPOTHESIS_PROFILE`` or
``--hypothesis-profile``):

- ``ci``: bounded and deterministic (derandomized), no deadline; the default
  when ``CI`` is set.
- ``dev``: a quick random search; the default otherwise.
- ``thorough``: many examples, for qualification runs and bug hunts.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.harness.backend_plugin", "tests.harness.compile_clock",
                  "tests.harness.compile_share_plugin", "tests.harness.dsl_memos_plugin",
                  "tests.harness.compile_groups"]

_SLOW_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "ci", max_examples=60, derandomize=True, deadline=None, suppress_health_check=_SLOW_CHECKS,
    print_blob=True,
)
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=_SLOW_CHECKS)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=_SLOW_CHECKS,
    print_blob=True,
)
settings.load_profile(
    os.environ.get("MEGAMOE_HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
)

_TESTS = Path(__file__).parent
_TIER_MARKERS = {_TESTS / "single": "gpu", _TESTS / "multi": "multirank"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve()
        for tier_dir, marker in _TIER_MARKERS.items():
            if tier_dir.resolve() in path.parents:
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def cuda_device():
    """The CUDA device for GPU tiers. Absence is a failure, never a skip."""
    import torch

    if not torch.cuda.is_available():
        pytest.fail("this test needs a CUDA GPU and none is available", pytrace=False)
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture
def one_torch_thread():
    """Run the test with one intra-op thread (tiny GEMMs on the small shared CI machine:
    oversubscribed OpenMP threads turn each small matmul into barrier waiting). The
    oracle's bits never depend on the thread count (tests/host/test_experts.py)."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
