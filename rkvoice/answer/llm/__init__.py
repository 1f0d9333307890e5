"""LLM engines behind one interface (base.LlmEngine) and a registry (registry.LLM).

llama.cpp's threads (the portable engine: ggml built with OpenMP, cyllama's own libgomp) meet at a
barrier after every operation of every layer. libgomp's default lets a waiting thread spin for a
while: when another process takes the core of one llama thread, its partner spins on the other core
instead of giving it up, so the preempted thread waits longer for a core. Measured in process (2 cores
shared with two busy processes, load 3.4-4.2): two threads took 3.2-3.3x the time of one for a
32-token prompt and 8-16x per generated token; with ``OMP_WAIT_POLICY=PASSIVE`` (a waiting thread
sleeps at once) 0.95-1.0x and 1.0x. libgomp reads the variable once, when it is loaded: it is set here,
before the llama engine's module loads llama.cpp; a value already in the environment is kept.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
