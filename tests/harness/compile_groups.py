"""Tests that compile the same kernels run in one xdist worker under ``--dist loadgroup``.

``cute.compile`` shares nothing between processes (CuTe DSL 4.3.5 passes ``no_cache=True``;
docs/engineering-notes.md "Qualification time"), so under pytest-xdist's default distribution
every worker compiles every kernel variant its tests meet. A test module opts in by naming,
in ``COMPILE_GROUP_PARAMS``, the parameters whose values choose the kernels its tests compile
(``("cfg",)``: the GEMM variant); this plugin (``tests/conftest.py`` loads it) marks each of
its tests that has them ``xdist_group`` with the module and those values, so that under ``-n N
--dist loadgroup`` a group's tests share one worker and its compiled kernels. Under any other
distribution the marks do nothing. ``qualify.py --group-compiles`` runs the xdist phase of an
exclusive suite that way (``tests.harness.suite_run.run_split``). Whether it pays is measured on
a GPU, not assumed (issue 40 item 11: with 12 workers ``test_mxfp4_gemm_kernel.py`` ran barely
faster than with one).

The names, and how a run under ``loadgroup`` keeps its tests' ids, are in
``tests.harness.group_names``.

pytest-xdist 3.8 tells its scheduler a test's group by appending ``@<group>`` to the test's node
id in the worker (``item._nodeid``); pytest 9.2 reads node ids from a structured ``_id`` instead,
so there the suffix is lost and ``loadgroup`` silently distributes test by test (pytest-xdist
issue 1386, open on 2026-12-05; seen here: the host test of ``--group-compiles`` failed).
``SuffixRepair`` puts the suffix back where xdist's did not take, after xdist's hook; where it
did, it does nothing. Remove it once xdist carries groups itself.
"""

from __future__ import annotations

import pytest

from tests.harness.group_names import group_name

PARAMS_ATTRIBUTE = "COMPILE_GROUP_PARAMS"
"""The module attribute naming the parameters that choose a test's kernels."""


def _value_name(value: object) -> str:
    return str(getattr(value, "name", value))


def group_of(item: pytest.Item) -> str | None:
    """The compile group of ``item``: its module and the values of the module's
    ``COMPILE_GROUP_PARAMS``, or None (the module does not opt in, or the test lacks one)."""
    names = getattr(getattr(item, "module", None), PARAMS_ATTRIBUTE, None)
    params = getattr(getattr(item, "callspec", None), "params", {})
    if not names or not all(n in params for n in names):
        return None
    return group_name(item.module.__name__,  # type: ignore[attr-defined]
                      [_value_name(params[n]) for n in names])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


class SuffixRepair:
    """Under ``--dist loadgroup`` in an xdist worker: a grouped test whose node id lacks its
    ``@<group>`` suffix after xdist's hook gets it (module docstring)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):  # set in xdist's workers only
            return
        for item in items:
            groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                             for m in item.iter_markers("xdist_group")})
            suffix = f"@{'_'.join(groups)}"  # what xdist appends
            if not groups or item.nodeid.endswith(suffix):
                continue  # ungrouped, or xdist's suffix took (pytest 9.1 and older)
            try:
                from _pytest.nodes import NodeId  # pytest 9.2's structured id (private)
            except ImportError:
                return
            item._id = NodeId.parse(item.nodeid + suffix)  # type: ignore[attr-defined]


def pytest_configure(config: pytest.Config) -> None:
    option = config.option
    if getattr(option, "dist", None) == "loadgroup" or getattr(option, "loadgroup", False):
        config.pluginmanager.register(SuffixRepair(), "megamoe-loadgroup-suffix-repair")
