"""The ``MEGAMOE_CHECK_ROUTES`` setting (docs/contract.md s2).

Value checks (range, duplicates, finite active scores) run by default;
``MEGAMOE_CHECK_ROUTES=0`` turns them off (metadata checks and masked-score zeroing
still run). The environment is read only at warmup and at graph capture, and the
value read is recorded in the workspace (``StagingWorkspace.check_routes``); changing
the variable afterwards has no effect until the next warmup or capture.
"""

from __future__ import annotations

from collections.abc import Mapping

from megamoe.env_flag import read_on_off
from megamoe.errors import ConfigError

ENV_VAR = "MEGAMOE_CHECK_ROUTES"


def read_check_routes(environ: Mapping[str, str] | None = None) -> bool:
    """Parse the setting (``megamoe.env_flag.read_on_off``): unset or empty -> True;
    ``0/false/off/no`` -> False; ``1/true/on/yes`` -> True; anything else raises
    ``ConfigError``."""
    return read_on_off(ENV_VAR, environ)


def record_check_routes(workspace, environ: Mapping[str, str] | None = None) -> bool:
    """Read the setting now (warmup / capture) and record it in ``workspace``."""
    workspace.check_routes = read_check_routes(environ)
    return workspace.check_routes


def check_routes_in_force(workspace) -> bool:
    """The setting recorded in ``workspace``; raises ``ConfigError`` before any warmup."""
    if workspace.check_routes is None:
        raise ConfigError(
            "workspace", "a workspace warmed up by megamoe.staging.warmup()", "no warmup yet"
        )
    return workspace.check_routes
