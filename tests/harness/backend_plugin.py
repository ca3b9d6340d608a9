"""pytest plugin: the MegaMoE backend the contract tests judge (``megamoe.backends``).

- ``--moe-backend NAME`` (else ``$MEGAMOE_MOE_BACKEND``, else ``megamoe``) chooses it; the
  session header names it and its version.
- The ``moe_backend`` fixture is the chosen ``MoEBackend``; a name that loads nothing fails
  every test that asks for it, with the reason (never a skip).
- Tests that use the fixture are the contract tests and carry the ``moe_backend`` marker.
  The others test our own kernels' internals (staging kernels, GEMM variants, the compile
  gate): with any backend but ``megamoe`` they are deselected, and the terminal summary
  says how many, so a foreign backend's run holds its contract tests only.
"""

from __future__ import annotations

import pytest

from megamoe.backends import BackendError, MoEBackend, load_backend, selected_name
from megamoe.backends.registry import DEFAULT

OPTION = "--moe-backend"
MARKER = "moe_backend"
FIXTURE = "moe_backend"
_DESELECTED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(OPTION, default=None, metavar="NAME",
                     help="the MegaMoE the contract tests judge: a registered name "
                     "(megamoe.backends.registry.REGISTERED) or package.module:attribute "
                     "(default: $MEGAMOE_MOE_BACKEND, else megamoe)")


def backend_name(config: pytest.Config) -> str:
    return selected_name(config.getoption(OPTION))


def pytest_report_header(config: pytest.Config) -> str:
    name = backend_name(config)
    try:
        info = load_backend(name).info
    except BackendError as err:
        return f"moe backend: {err}"
    return f"moe backend: {info.name} {info.version} ({', '.join(info.archs)})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = backend_name(config) == DEFAULT
    keep, drop = [], []
    for item in items:
        if FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(MARKER)
            keep.append(item)
        else:
            (keep if ours else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    config.stash[_DESELECTED] = len(drop)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    dropped = config.stash.get(_DESELECTED, 0)
    if dropped:
        terminalreporter.write_line(
            f"moe backend {backend_name(config)}: {dropped} test(s) of megamoe's own kernel "
            "internals deselected; the contract tests ran against this backend")


@pytest.fixture(scope="session")
def moe_backend(request: pytest.FixtureRequest) -> MoEBackend:
    """The chosen backend (module docstring)."""
    try:
        return load_backend(backend_name(request.config))
    except BackendError as err:
        pytest.fail(str(err), pytrace=False)
