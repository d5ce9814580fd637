"""``lossless demo``: the whole story on the embedded model in one command: served plainly and
speculatively, benchmarked, verified, reported.

options.py  ``DemoOptions``, ``demo_options()``: the demo's settings (``--quick`` for CI)
run.py      ``run()``: serve, bench, verify, write the report; ``report.demo`` says what it found
"""
