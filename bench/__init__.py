"""Benchmarks run by hand: retrieval quality (retrieval.py) and speed (speed.py). See README.md."""
