"""Expert GEMMs (docs/contract.md s5): grouped Hopper GEMMs over the local experts."""
