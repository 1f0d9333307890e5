"""ctypes layouts of librkllmrt.so, one set per ABI ("1.2" = 1.2.1-1.2.3, "1.3" = 1.3.0), from rkllm.h
(docs/rkllm-abi.md). The wrong version's binding crashes in rkllm_run: never mix them."""

from __future__ import annotations

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    Union,
    _SimpleCData,
    c_bool,
    c_char_p,
    c_float,
    c_int,
    c_int8,
    c_int32,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from dataclasses import dataclass
from typing import Any

from rkvoice.errors import RkvoiceError, Stage

# LLMCallState
NORMAL, WAITING, FINISH, ERROR = 0, 1, 2, 3
# RKLLMInputType
INPUT_PROMPT, INPUT_TOKEN, INPUT_EMBED, INPUT_MULTIMODAL = 0, 1, 2, 3
# RKLLMInferMode
INFER_GENERATE = 0

LLMHandle = c_void_p


class RKLLMExtendParam(Structure):
    _fields_ = [
        ("base_domain_id", c_int32),
        ("embed_flash", c_int8),
        ("enabled_cpus_num", c_int8),
        ("enabled_cpus_mask", c_uint32),
        ("n_batch", c_uint8),
        ("use_cross_attn", c_int8),
        ("reserved", c_uint8 * 104),
    ]


_PARAM_HEAD: list[tuple[str, type[_SimpleCData[Any]]]] = [
    ("model_path", c_char_p),
    ("max_context_len", c_int32),
    ("max_new_tokens", c_int32),
    ("top_k", c_int32),
    ("n_keep", c_int32),
    ("top_p", c_float),
    ("temperature", c_float),
    ("repeat_penalty", c_float),
    ("frequency_penalty", c_float),
    ("presence_penalty", c_float),
    ("mirostat", c_int32),
    ("mirostat_tau", c_float),
    ("mirostat_eta", c_float),
    ("skip_special_token", c_bool),
]


class RKLLMParam12(Structure):
    _fields_ = [
        *_PARAM_HEAD,
        ("is_async", c_bool),
        ("img_start", c_char_p),
        ("img_end", c_char_p),
        ("img_content", c_char_p),
        ("extend_param", RKLLMExtendParam),
    ]


class RKLLMParam13(Structure):
    _fields_ = [
        *_PARAM_HEAD,
        ("ignore_eos_token", c_bool),
        ("is_async", c_bool),
        ("extend_param", RKLLMExtendParam),
    ]


class RKLLMEmbedInput(Structure):
    _fields_ = [("embed", POINTER(c_float)), ("n_tokens", c_size_t)]


class RKLLMTokenInput(Structure):
    _fields_ = [("input_ids", POINTER(c_int32)), ("n_tokens", c_size_t)]


def _input(multimodal_words: int) -> type[Structure]:
    """RKLLMInput; the releases differ only in the size of the union's multimodal member."""

    class _Union(Union):
        _fields_ = [
            ("prompt_input", c_char_p),
            ("embed_input", RKLLMEmbedInput),
            ("token_input", RKLLMTokenInput),
            ("multimodal_input", c_uint64 * multimodal_words),
        ]

    class RKLLMInput(Structure):
        _anonymous_ = ("u",)
        _fields_ = [("role", c_char_p), ("enable_thinking", c_bool), ("input_type", c_int32), ("u", _Union)]

    return RKLLMInput


RKLLMInput12 = _input(6)  # {prompt, image_embed, n_image_tokens, n_image, w, h}
RKLLMInput13 = _input(18)  # the larger 1.3.0 multimodal member


_INFER_HEAD: list[tuple[str, type[_SimpleCData[Any]]]] = [
    ("mode", c_int32),
    ("lora_params", c_void_p),
    ("prompt_cache_params", c_void_p),
]


class RKLLMInferParam12(Structure):
    _fields_ = [*_INFER_HEAD, ("keep_history", c_int32)]


class RKLLMInferParam13(Structure):
    _fields_ = [*_INFER_HEAD, ("sampling_params", c_void_p), ("keep_history", c_int32), ("max_new_tokens", c_int32)]


class RKLLMResultLastHiddenLayer(Structure):
    _fields_ = [("hidden_states", POINTER(c_float)), ("embd_size", c_int), ("num_tokens", c_int)]


class RKLLMResultLogits(Structure):
    _fields_ = [("logits", POINTER(c_float)), ("vocab_size", c_int), ("num_tokens", c_int)]


class RKLLMPerfStat(Structure):
    _fields_ = [
        ("prefill_time_ms", c_float),
        ("prefill_tokens", c_int),
        ("generate_time_ms", c_float),
        ("generate_tokens", c_int),
        ("memory_usage_mb", c_float),
    ]


class RKLLMResult(Structure):
    _fields_ = [
        ("text", c_void_p),  # raw bytes: may end inside a UTF-8 sequence
        ("token_id", c_int32),
        ("last_hidden_layer", RKLLMResultLastHiddenLayer),
        ("logits", RKLLMResultLogits),
        ("perf", RKLLMPerfStat),
    ]


LLMResultCallback = CFUNCTYPE(c_int, POINTER(RKLLMResult), c_void_p, c_int)


class RKLLMCallback13(Structure):
    _fields_ = [
        ("result_callback", LLMResultCallback),
        ("result_userdata", c_void_p),
        ("tokenizer_callback", c_void_p),
        ("tokenizer_userdata", c_void_p),
        ("embed_callback", c_void_p),
        ("embed_userdata", c_void_p),
    ]


@dataclass(frozen=True)
class Abi:
    version: str
    Param: Any
    Input: Any
    InferParam: Any
    callbacks_struct: bool
    """1.3.0 passes an RKLLMCallback struct to rkllm_init; 1.2.x the bare function pointer."""


ABIS = {
    "1.2": Abi("1.2", RKLLMParam12, RKLLMInput12, RKLLMInferParam12, False),
    "1.3": Abi("1.3", RKLLMParam13, RKLLMInput13, RKLLMInferParam13, True),
}


def get_abi(version: str) -> Abi:
    key = {"1.2.1": "1.2", "1.2.2": "1.2", "1.2.3": "1.2", "1.3.0": "1.3"}.get(version, version)
    try:
        return ABIS[key]
    except KeyError:
        raise RkvoiceError(
            Stage.LLM, "bad-rkllm-abi",
            f"llm.rkllm_abi {version!r} is not supported; choose one of: 1.2, 1.3 (match librkllmrt.so on the board)",
        ) from None


def bind(lib: ctypes.CDLL, abi: Abi) -> None:
    """Declare argument and return types of the runtime's functions for ``abi``."""
    lib.rkllm_createDefaultParam.restype = abi.Param
    lib.rkllm_createDefaultParam.argtypes = []
    cb_arg = POINTER(RKLLMCallback13) if abi.callbacks_struct else LLMResultCallback
    for name, argtypes in (
        ("rkllm_init", [POINTER(LLMHandle), POINTER(abi.Param), cb_arg]),
        ("rkllm_run", [LLMHandle, POINTER(abi.Input), POINTER(abi.InferParam), c_void_p]),
        ("rkllm_abort", [LLMHandle]),
        ("rkllm_destroy", [LLMHandle]),
        ("rkllm_set_chat_template", [LLMHandle, c_char_p, c_char_p, c_char_p]),  # not in every 1.2.x build
    ):
        if name == "rkllm_set_chat_template" and not hasattr(lib, name):
            continue
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = c_int
