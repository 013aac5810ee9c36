"""Benchmarks that print figures (never asserted in tests). `python -m bench` runs the quick ones."""
