"""megamoe: Hopper CuTe DSL kernels for expert-parallel MoE layers, and their layer API.

Semantics: docs/contract.md (the oracle in ``oracle/`` defines them).
"""

from megamoe.errors import CommTimeoutError, ConfigError, RouteError

__all__ = ["CommTimeoutError", "ConfigError", "RouteError"]
