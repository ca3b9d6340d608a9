"""``megamoe.graphs.capture`` on the host (docs/contract.md s9): garbage is collected before the
capture begins, the automatic collector is off while it runs and restored after, also when
the block raises. ``torch.cuda.graph`` is replaced by a recorder (no GPU here); the GPU
test (tests/single/test_graph_capture.py) shows the failure this prevents."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import ClassVar

import pytest

from megamoe import graphs


class _Cycle:
    """Unreachable only as a cycle: freed by the cyclic collector, never by refcounts."""

    freed: ClassVar[list[str]] = []

    def __init__(self, name: str) -> None:
        self.name = name
        self.me = self

    def __del__(self) -> None:
        _Cycle.freed.append(self.name)


@pytest.fixture
def recorder(monkeypatch):
    seen: dict[str, object] = {}

    @contextmanager
    def fake_graph(graph, **kwargs):
        seen["gc_enabled_at_begin"] = gc.isenabled()
        seen["freed_at_begin"] = list(_Cycle.freed)
        seen["graph"], seen["kwargs"] = graph, kwargs
        yield
        seen["gc_enabled_at_end"] = gc.isenabled()

    monkeypatch.setattr(graphs.torch.cuda, "graph", fake_graph)
    _Cycle.freed.clear()
    assert gc.isenabled()
    yield seen
    gc.enable()


def test_garbage_is_collected_before_the_capture_begins(recorder) -> None:
    _Cycle("old graph")
    with graphs.capture("g", pool="p"):
        pass
    assert recorder["freed_at_begin"] == ["old graph"]
    assert recorder["graph"] == "g" and recorder["kwargs"] == {"pool": "p"}


def test_the_collector_is_off_during_the_capture_and_restored_after(recorder) -> None:
    with graphs.capture("g"):
        assert not gc.isenabled()
    assert recorder["gc_enabled_at_begin"] is False
    assert recorder["gc_enabled_at_end"] is False
    assert gc.isenabled()


def test_the_collector_is_restored_when_the_block_raises(recorder) -> None:
    with pytest.raises(ValueError, match="inside"), graphs.capture("g"):
        raise ValueError("inside")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled(recorder) -> None:
    gc.disable()
    with graphs.capture("g"):
        pass
    assert not gc.isenabled()


def test_plain_torch_graph_leaves_the_window_open(recorder) -> None:
    """The planted bug: without ``capture`` the cycle survives into the capture, with the
    collector on (free to finalize it at any allocation inside)."""
    _Cycle("old graph")
    with graphs.torch.cuda.graph("g"):
        pass
    assert recorder["freed_at_begin"] == [] and recorder["gc_enabled_at_begin"] is True
    gc.collect()
