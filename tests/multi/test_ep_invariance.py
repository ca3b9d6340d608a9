"""The invariance contract across world sizes (docs/contract.md s7, s8): the same rows give the
same output bits in worlds of every size that divides P (1, 2, 4, ... within this run: the
sub-worlds over blocks of ranks), equal to EP1; a rerun gives the same hashes, which each
rank records (JUnit suite property ``row_hashes[recipe]``) so runs of different world sizes can be
compared by their records too."""

from __future__ import annotations

import pytest

from tests.multi.ep_world import (
    RECIPES,
    Verdict,
    build_layer,
    config,
    digest,
    rank_scenario_inputs,
    shape_of,
)

STATES = ("dense-C", "sparse-holes", "skewed")


@pytest.mark.contract("s7.ep-equals-ep1", "s8.invariance")
@pytest.mark.parametrize("recipe", RECIPES)
def test_rows_are_bitwise_equal_in_every_world_size_and_across_reruns(
        moe_backend, world, subworlds, recipe, record_testsuite_property) -> None:  # type: ignore[no-untyped-def]
    shape = shape_of(world)
    cfg = config(shape, recipe)
    ep1 = build_layer(moe_backend, cfg, None, shape, world.device)
    layers = {p: build_layer(moe_backend, cfg, w, shape, world.device) for p, w in
              subworlds.worlds.items()}
    verdict = Verdict()
    hashes = []
    try:
        for i, name in enumerate(STATES):
            # the same rows for this rank in every world: generated for the largest world
            x, ids, w = rank_scenario_inputs(world, shape, name, 17)
            ref = ep1.warmup(x, ids, w) if i == 0 else ep1.forward(x, ids, w)
            for p, layer in layers.items():
                got = layer.warmup(x, ids, w) if i == 0 else layer.forward(x, ids, w)
                verdict.equal_bits(world.rank, f"{recipe} {name}: P={p} vs EP1", got, ref)
                again = layer.forward(x, ids, w)
                verdict.check(world.rank, f"{recipe} {name}: P={p} rerun hash differs",
                              digest(again) == digest(got))
            hashes.append(f"{name}={digest(ref)}")
    finally:
        for layer in (ep1, *layers.values()):
            layer.destroy()
    record_testsuite_property(f"row_hashes[{recipe}]", " ".join(hashes))
    verdict.assert_clean(world)
