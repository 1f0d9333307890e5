"""LLM backends by name: ``llama`` (llama.cpp, portable) and ``rkllm`` (RKLLM on the NPU, board),
each with what it needs."""

from __future__ import annotations

from typing import Any

from rkvoice.answer.llm.base import LlmEngine, model_path
from rkvoice.config import Config
from rkvoice.errors import Stage
from rkvoice.needs import FileNeed, Needs, PackageNeed, RuntimeNeed
from rkvoice.registry import Registry


def llama_needs(cfg: Config, **_: Any) -> Needs:
    return Needs(files=(FileNeed("model", (model_path(cfg, "llama"),)),),
                 packages=(PackageNeed("cyllama", "cyllama"),), profile="portable")


def rkllm_needs(cfg: Config, **_: Any) -> Needs:
    """The .rkllm model, the NPU, and a librkllmrt whose version fits ``llm.rkllm_abi``."""
    return Needs(files=(FileNeed("model", (model_path(cfg, "rkllm"),)),), devices=("npu",),
                 runtimes=(RuntimeNeed("librkllmrt", abi=cfg.llm.rkllm_abi, library_path=cfg.llm.rkllm_lib),),
                 profile="board")


LLM = Registry(Stage.LLM, auto=("rkllm", "llama"))
LLM.register("llama", "rkvoice.answer.llm.llama:LlamaEngine", "llama.cpp (cyllama) with a GGUF model",
             "pip install cyllama==0.2.18 (./install.sh does it)", needs=llama_needs)
LLM.register("rkllm", "rkvoice.answer.llm.rkllm:RkllmEngine", "RKLLM runtime (librkllmrt.so) on the RK3576 NPU",
             "the board image provides librkllmrt.so", needs=rkllm_needs)


def engine_name(cfg: Config) -> str:
    """``llm.engine`` with ``auto`` resolved: rkllm on the board profile, llama elsewhere."""
    return LLM.resolve(cfg.llm.engine, cfg.models.profile)


def create_llm(cfg: Config) -> LlmEngine:
    """The configured engine, not loaded yet."""
    return LLM.create(engine_name(cfg), cfg)
