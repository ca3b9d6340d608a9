"""Tests that compile the same kernels run in one xdist worker under ``--dist loadgroup``.

``cute.compile`` shares nothing between processes (CuTe DSL 4.3.5 passes ``no_cache=True``;
docs/engineering-notes.md "Qualification time"), so under pytest-xdist's default distribution
every worker compiles every kernel variant its tests meet. A test module opts in by naming,
in ``COMPILE_GROUP_PARAMS``, the parameters whose values choose the kernels its tests compile
(``("cfg",)``: the GEMM variant); this plugin (``tests/conftest.py`` loads it) marks each of
its tests that has them ``xdist_group`` with the module and those values, so that under ``-n N
--dist loadgroup`` a group's tests share one worker and its compiled kernels. Under any other
distribution the marks do nothing. Whether it pays is measured on a GPU, not assumed (issue 40
item 11: with 12 workers ``test_mxfp4_gemm_kernel.py`` ran barely faster than with one).
"""

from __future__ import annotations

import pytest

PARAMS_ATTRIBUTE = "COMPILE_GROUP_PARAMS"


def _value_name(value: object) -> str:
    return str(getattr(value, "name", value))


def group_of(item: pytest.Item) -> str | None:
    """The compile group of ``item``: its module and the values of the module's
    ``COMPILE_GROUP_PARAMS``, or None (the module does not opt in, or the test lacks one)."""
    names = getattr(getattr(item, "module", None), PARAMS_ATTRIBUTE, None)
    params = getattr(getattr(item, "callspec", None), "params", {})
    if not names or not all(n in params for n in names):
        return None
    values = ",".join(_value_name(params[n]) for n in names)
    return f"{item.module.__name__}:{values}"  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
