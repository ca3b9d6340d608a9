"""The megamoe oracle: a pure-PyTorch reference that defines docs/contract.md exactly.

It runs on any device and never imports ``megamoe``, so a bug in production
code can never cancel itself out against the reference.
"""
