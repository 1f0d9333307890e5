"""The LLM engine interface: load once, stream text deltas, abort from any thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from rkvoice.config import Config

Message = dict[str, str]
"""{"role": "system" | "user" | "assistant", "content": str}"""

DEFAULT_MODELS = {
    "llama": "portable/llm/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "rkllm": "board/llm/qwen2.5-0.5b-instruct-w4a16.rkllm",
}


class LlmEngine(Protocol):
    """An LLM runtime. ``prime``, ``speaking`` and ``close`` have default no-ops here: an engine that
    subclasses the protocol gets them and overrides those it has a use for (llama.cpp all three)."""

    name: str

    def load(self) -> None:
        """Load the model (seconds); raises RkvoiceError naming the missing file or library."""

    def stream(self, messages: list[Message]) -> Iterator[str]:
        """Yield the reply's text deltas (whole characters) until the model ends, ``max_tokens`` or
        ``abort()``."""

    def abort(self) -> None:
        """Stop the running generation soon; safe from any thread, a no-op when idle."""

    def prime(self, messages: list[Message]) -> None:
        """Get ready for prompts that start with ``messages`` (the system prompt) before the first
        question, e.g. by computing their cache. Default: nothing to prepare."""
        return None

    def speaking(self) -> None:
        """The current answer's first piece went to the voice (the engine may leave it a core). Safe
        from any thread. Default: nothing changes."""
        return None

    def close(self) -> None:
        """Free the model. Default: nothing held beyond what the garbage collector frees."""
        return None


def model_path(cfg: Config, engine: str) -> Path:
    """llm.model, or the engine's default model under models.dir."""
    return cfg.models.path / Path(cfg.llm.model or DEFAULT_MODELS[engine]).expanduser()  # an absolute one stays


def chatml(messages: list[Message]) -> str:
    """Qwen's ChatML prompt with the assistant turn opened (for runtimes given raw text)."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"
