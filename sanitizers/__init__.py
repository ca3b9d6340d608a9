"""compute-sanitizer wrappers, summary parsing and planted-bug self-tests."""
