"""LLM engines behind one interface (base.LlmEngine) and a registry (registry.LLM).

llama.cpp's OpenMP threads (cyllama's libgomp) meet at a barrier after every operation, and by
default a waiting thread spins 300000 times: beside 2 busy processes, two threads took 2.35x one on
the prompt and 4.5x per token; with ``GOMP_SPINCOUNT=20000`` 1.17x / 1.18x, and idle it keeps the
default's speed (passive waiting lost 0.71x vs 0.54x a token). libgomp reads it once, when loaded:
so it is set here, before llama.cpp loads, unless the environment sets a wait policy or a count.
"""

import os

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")
