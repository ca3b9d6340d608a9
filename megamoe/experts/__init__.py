"""Expert GEMMs (CONTRACTS.md s5): grouped Hopper GEMMs over the local experts."""
