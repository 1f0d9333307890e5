"""LLM engines behind one interface (base.LlmEngine) and a registry (registry.LLM)."""
