"""Benchmarks (docs/design.md section 12); run as scripts, e.g. python bench/placement.py."""
