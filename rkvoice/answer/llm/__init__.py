"""LLM engines behind one interface (base.LlmEngine) and a registry (registry.LLM).

llama.cpp's threads (the portable engine: ggml built with OpenMP, cyllama's own libgomp) meet at a
barrier after every operation of every layer, and libgomp lets a thread waiting there spin 300000
times by default: when another process takes the core of one llama thread, its partner spins on the
other core instead of giving it up. Measured in process (bench: 32-token prompt, 12 tokens; two
threads vs one): with 2 busy processes beside it, two threads took 2.35x one on the prompt and 4.5x
per token (3.3x / 8-16x beside other helpers' work); ``GOMP_SPINCOUNT=20000`` 1.17x / 1.18x;
``OMP_WAIT_POLICY=PASSIVE`` (sleep at once) 1.29x / 1.65x. Idle, 20000 spins keep the default's speed
(prompt 0.51x, a token 0.54x of one thread) where passive lost a token's (0.71x). libgomp reads the
variable once, when it is loaded: it is set here, before the llama engine's module loads llama.cpp,
unless the environment already sets a wait policy or a spin count.
"""

import os

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")
