"""LLM backends by name: ``llama`` (llama.cpp, portable) and ``rkllm`` (RKLLM on the NPU, board),
each with what it needs."""

from __future__ import annotations

import logging
from typing import Any

from rkvoice.answer.llm.absent import NotInstalledLlm
from rkvoice.answer.llm.base import LlmEngine, model_path
from rkvoice.config import Config
from rkvoice.errors import Stage
from rkvoice.needs import FileNeed, Needs, PackageNeed, RuntimeNeed, missing
from rkvoice.registry import Registry

log = logging.getLogger(__name__)


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


RUNS_WITHOUT = ("rkllm",)
"""Engines whose model the install does not provide (``optional`` in models/manifest.yaml: the user
converts it and brings it in with ``install.sh --rkllm``): without it the assistant runs and says so."""


def not_installed(cfg: Config, name: str) -> str | None:
    """What of optional engine ``name``'s model is missing (one line), None when it is there or the
    engine is not optional."""
    if name not in RUNS_WITHOUT:
        return None
    lacks = [lack for lack in missing(LLM.needs(name, cfg), devices=False) if lack.kind == "file"]
    return "; ".join(lack.what for lack in lacks) or None


def engine_name(cfg: Config) -> str:
    """``llm.engine`` with ``auto`` resolved: rkllm on the board profile, llama elsewhere."""
    return LLM.resolve(cfg.llm.engine, cfg.models.profile)


def create_llm(cfg: Config) -> LlmEngine:
    """The configured engine, not loaded yet; an optional engine without its model: ``NotInstalledLlm``."""
    name = engine_name(cfg)
    lack = not_installed(cfg, name)
    if lack is not None:
        log.warning("no language model (%s): questions for it get one sentence saying so", lack)
        return NotInstalledLlm(cfg, name, lack)
    return LLM.create(name, cfg)
