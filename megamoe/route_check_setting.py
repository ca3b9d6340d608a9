"""The ``MEGAMOE_CHECK_ROUTES`` setting (CONTRACTS.md s2).

Value checks (range, duplicates, finite active scores) run by default;
``MEGAMOE_CHECK_ROUTES=0`` turns them off (metadata checks and masked-score zeroing
still run). The environment is read only at warmup and at graph capture, and the
value read is recorded in the workspace (``StagingWorkspace.check_routes``); changing
the variable afterwards has no effect until the next warmup or capture.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from megamoe.errors import ConfigError

ENV_VAR = "MEGAMOE_CHECK_ROUTES"
_ON = ("1", "true", "on", "yes")
_OFF = ("0", "false", "off", "no")


def read_check_routes(environ: Mapping[str, str] | None = None) -> bool:
    """Parse the setting: unset or empty -> True; ``0/false/off/no`` -> False;
    ``1/true/on/yes`` -> True; anything else raises ``ConfigError``."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_VAR, "")
    value = raw.strip().lower()
    if value == "" or value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigError(ENV_VAR, f"one of {_OFF + _ON} or unset", repr(raw))


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
