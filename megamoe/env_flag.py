"""On/off settings read from the environment (``MEGAMOE_PDL``, ``MEGAMOE_CHECK_ROUTES``):
one parser, so every megamoe switch accepts the same words and refuses the same typos."""

from __future__ import annotations

import os
from collections.abc import Mapping

from megamoe.errors import ConfigError

ON = ("1", "true", "on", "yes")
OFF = ("0", "false", "off", "no")


def read_on_off(var: str, environ: Mapping[str, str] | None = None) -> bool:
    """Parse ``var`` in ``environ`` (default ``os.environ``): unset or empty -> True;
    ``0/false/off/no`` -> False; ``1/true/on/yes`` -> True (any case, surrounding blanks
    ignored); anything else raises ``ConfigError`` naming the variable."""
    env = os.environ if environ is None else environ
    raw = env.get(var, "")
    value = raw.strip().lower()
    if value == "" or value in ON:
        return True
    if value in OFF:
        return False
    raise ConfigError(var, f"one of {OFF + ON} or unset", repr(raw))
