"""Benchmarks (DESIGN.md section 12); run as scripts, e.g. python bench/placement.py."""
