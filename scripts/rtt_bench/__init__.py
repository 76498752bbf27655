"""The sections of scripts/bench.py, a module each, and the page they render.

``common`` holds what they share, ``render`` writes docs/benchmarks.md from
their results, and ``notes/<section>.md`` is each section's prose, rendered
below its table. Run them with ``python scripts/bench.py [--only NAME ...]``.
"""
