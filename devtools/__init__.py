"""Developer tools that are not part of the library or the harness (run as modules)."""
