"""The names of compile groups (``tests.harness.compile_groups``), without pytest: the JUnit
readers of ``qualify.py`` use them too.

A group is named ``<test module>:<values>``. Under ``--dist loadgroup`` pytest-xdist appends
``@<group>`` to a grouped test's node id in its workers, so JUnit names carry it; a record names
its tests as any other run does, and a shard holds the same tests with the option or without,
because ``plain_nodeid`` takes the suffix off (the shard plugin, ``tests.harness.junit.case_id``).
"""

from __future__ import annotations

import re

DIST_ARGS = ("--dist", "loadgroup")
"""The xdist option that sends each group's tests to one worker (``qualify.py
--group-compiles``)."""

_SUFFIX = re.compile(r"@[A-Za-z_][\w.]*:[^@\[\]]*\]?$")
"""``@`` and a group name (a dotted module, ``:``, its values) at the end of a node id, with the
``]`` that pytest 9.2's JUnit names add after a suffix put back by
``compile_groups.SuffixRepair``."""


def group_name(module: str, values: list[str]) -> str:
    """The group of the tests of ``module`` whose compile parameters have ``values``."""
    return f"{module}:{','.join(values)}"


def plain_nodeid(nodeid: str) -> str:
    """``nodeid`` without the ``@<group>`` suffix ``loadgroup`` gives a grouped test; any
    other id is returned as it is (an ``@`` inside a parameter's brackets stays)."""
    m = _SUFFIX.search(nodeid)
    if m is None:
        return nodeid
    head = nodeid[:m.start()]
    return head if head.count("[") == head.count("]") else nodeid
