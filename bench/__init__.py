"""Benchmarks: ``python -m bench`` runs every case side by side and prints medians, rates and ratios.

See BENCHMARKS.md for the machine, the command and the figures, and ``python -m bench --help`` for the
options. The older standalone scripts (eviction.py, production.py, server_throughput.py) still run alone.
"""
