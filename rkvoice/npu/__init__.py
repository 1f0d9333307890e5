"""NPU-facing pieces that run anywhere: the model runtime interface and the CPU ISTFT."""
