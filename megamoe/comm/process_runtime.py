"""A communication runtime that a process initializes once, shared by its worlds
(docs/contract.md s11).

NVSHMEM is such a runtime: "after the first call to nvshmem_init, a subsequent call ...
results in undefined behavior" (NVSHMEM's setup API), and its finalize is collective. A
process may still make several worlds over it: the multi tier's timeout tests make a world of
short waits beside the session's world (``tests.multi.ep_world.short_timeout_world``). So
the first world initializes the runtime, every later one over the same place (this rank of
the same size on the same device) shares it, and the runtime is finalized when the last
world releases it, unless any of them failed: a failed world may hold a rank that never
reaches a collective again, so the runtime is then left to process exit (``destroy`` stays
bounded, as for a failed world's buffers). A world anywhere else, or one after the runtime
was finalized, is refused with a ``ConfigError`` before anything is initialized.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from megamoe.errors import ConfigError


@dataclass(frozen=True)
class Place:
    """Where a process's runtime runs: this process's rank, the world size, its device."""

    rank: int
    size: int
    device: int


class OncePerProcess:
    """The runtime ``name``'s state in this process (module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.place: Place | None = None
        self.users = 0
        self.failed = False
        self.finalized = False

    def acquire(self, place: Place, init: Callable[[], None]) -> None:
        """Count one more world at ``place``; ``init`` runs for the first only."""
        if self.finalized:
            raise ConfigError(f"{self.name} world", "a runtime this process has not finalized",
                              "finalized", f"{self.name} cannot be initialized twice in one "
                              "process: keep one world alive for the process's life")
        if self.place is None:
            init()
            self.place = place
        elif place != self.place:
            raise ConfigError(f"{self.name} world", f"the place this process initialized it at "
                              f"({self.place})", place, f"one {self.name} runtime per process, "
                              "over the same ranks on the same device")
        self.users += 1

    def release(self, failed: bool, finalize: Callable[[], None]) -> None:
        """One world fewer (``failed``: it recorded a failure); ``finalize`` runs when none
        is left and none failed."""
        if self.users < 1:
            raise ConfigError(f"{self.name} world", "a world that acquired the runtime",
                              "a release without an acquire")
        self.users -= 1
        self.failed = self.failed or failed
        if self.users == 0 and not self.failed:
            finalize()
            self.finalized = True
