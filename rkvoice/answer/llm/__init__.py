"""LLM engines behind one interface (base.LlmEngine) and a registry (registry.LLM).

llama.cpp's OpenMP threads (libgomp) spin 300000 times at every barrier by default: beside 2 busy
processes two threads took 2.35x one on the prompt, 4.5x per token; with ``GOMP_SPINCOUNT=20000``
1.17x / 1.18x, at the default's speed when idle. libgomp reads it once, so it is set here, before
llama.cpp loads, unless the environment sets a wait policy or a count.
"""

import os

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")
