"""LLM backends by name: ``llama`` (llama.cpp, portable) and ``rkllm`` (RKLLM on the NPU, board)."""

from __future__ import annotations

from rkvoice.answer.llm.base import LlmEngine
from rkvoice.config import Config
from rkvoice.registry import Registry

LLM = Registry("llm")
LLM.register("llama", "rkvoice.answer.llm.llama:LlamaEngine", "llama.cpp (cyllama) with a GGUF model",
             "pip install cyllama==0.2.18 (./install.sh does it)")
LLM.register("rkllm", "rkvoice.answer.llm.rkllm:RkllmEngine", "RKLLM runtime (librkllmrt.so) on the RK3576 NPU",
             "the board image provides librkllmrt.so")


def engine_name(cfg: Config, name: str | None = None) -> str:
    name = name or cfg.llm.engine
    if name == "auto":
        return "rkllm" if cfg.models.profile == "board" else "llama"
    LLM.backend(name)  # unknown names fail here with "choose one of"
    return name


def create_llm(cfg: Config, name: str | None = None) -> LlmEngine:
    """The configured engine, not loaded yet."""
    return LLM.create(engine_name(cfg, name), cfg)
