"""Benchmarks: each module prints one JSON object with its figures and the machine it ran on.

Run from the repository root as modules, ``py312/bin/python -m bench.<name> --help``; what they share with
the tests (clocks, microphones, CER, percentiles, /proc readers, the JSON) is in tests/support. Neither
.ci/run nor the tests run them."""
