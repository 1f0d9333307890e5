"""RKLLM engine: a ctypes binding of librkllmrt.so (ABI chosen by llm.rkllm_abi). rkllm_run runs on
a worker thread; its callback queues each token's bytes for ``stream()``, which yields whole characters."""

from __future__ import annotations

import codecs
import ctypes
import logging
import queue
import threading
from collections.abc import Iterator
from ctypes import byref
from pathlib import Path
from typing import Any

from rkvoice.answer.llm import rkllm_abi as abi_mod
from rkvoice.answer.llm.base import LlmEngine, Message, chatml, model_path
from rkvoice.board import versions
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)

_ERROR = object()  # queued by the callback for an ERROR state
FAILED_INITS: set[str] = set()
"""Libraries (1.3 ABI) whose rkllm_init failed in this process: a second attempt may segfault."""


def flatten(messages: list[Message]) -> str:
    """The conversation as one user text, for a runtime that applies its own chat template."""
    names = {"user": "用户", "assistant": "助手"}
    lines = [m["content"] if m["role"] == "system" else f"{names.get(m['role'], m['role'])}：{m['content']}"
             for m in messages[:-1]]
    lines.append(messages[-1]["content"] if messages else "")
    return "\n".join(lines)


def loaded_path(lib: ctypes.CDLL, symbol: str) -> Path | None:
    """The file the dynamic linker really loaded for ``lib`` (the /proc/self/maps mapping holding
    ``symbol``): ``llm.rkllm_lib`` is usually a bare soname, and a guessed path may be another file."""
    try:
        addr = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value or 0
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(maxsplit=5)  # range perms offset dev inode [path]
                low, high = (int(x, 16) for x in fields[0].split("-"))
                if low <= addr < high and len(fields) == 6:
                    return Path(fields[5]).resolve()
    except (AttributeError, OSError, ValueError):
        pass
    return None


class RkllmEngine(LlmEngine):
    name = "rkllm"

    def __init__(self, cfg: Config, lib_path: str | None = None, model: Path | None = None) -> None:
        self.cfg = cfg
        self.abi = abi_mod.get_abi(cfg.llm.rkllm_abi)
        self.lib_path = lib_path or cfg.llm.rkllm_lib
        self.model = model or model_path(cfg, "rkllm")
        self.lib: ctypes.CDLL | None = None
        self.handle = abi_mod.LLMHandle()
        self._callback: Any = None  # keeps the CFUNCTYPE alive for the handle's lifetime
        self._callbacks13: Any = None
        self._q: queue.Queue[Any] = queue.Queue()
        self._run_lock = threading.Lock()
        self._aborted = threading.Event()
        self.raw_prompt = True

    def load(self) -> None:
        if self.lib is not None:
            return
        if not self.model.is_file():
            raise RkvoiceError(Stage.LLM, "model-missing",
                               f"RKLLM model {self.model} not found; convert it (docs/rkllm-model.md) and install it "
                               "with ./install.sh --profile board --rkllm FILE, or set llm.model")
        try:
            lib = ctypes.CDLL(self.lib_path)
        except OSError as exc:
            raise RkvoiceError(Stage.LLM, "rkllm-lib-missing",
                               f"cannot load {self.lib_path} ({exc}); install the RKLLM runtime or set llm.rkllm_lib"
                               ) from exc
        self._refuse_unsupported_runtime(lib)
        try:
            abi_mod.bind(lib, self.abi)
        except AttributeError as exc:
            raise RkvoiceError(Stage.LLM, "rkllm-lib-bad",
                               f"{self.lib_path} lacks {exc}; is it librkllmrt.so of version {self.abi.version}?"
                               ) from exc
        if self.abi.version == "1.3" and self.lib_path in FAILED_INITS:
            raise RkvoiceError(Stage.LLM, "rkllm-init-again",
                               f"rkllm_init already failed once in this process with {self.lib_path}; runtime "
                               "1.3.0 may crash on a second attempt: fix the cause above and restart rkvoice")
        llm = self.cfg.llm
        param = lib.rkllm_createDefaultParam()
        param.model_path = str(self.model).encode()
        param.max_context_len = llm.context
        param.max_new_tokens = llm.max_tokens
        for same in ("top_k", "top_p", "temperature", "repeat_penalty"):  # named alike in LlmConfig
            setattr(param, same, getattr(llm, same))
        param.skip_special_token = True
        param.is_async = False
        param.extend_param.base_domain_id = llm.rkllm_base_domain_id
        param.extend_param.enabled_cpus_mask = llm.rkllm_cpus_mask
        param.extend_param.enabled_cpus_num = llm.rkllm_cpus_mask.bit_count()
        self._callback = abi_mod.LLMResultCallback(self._on_result)
        if self.abi.callbacks_struct:
            self._callbacks13 = abi_mod.RKLLMCallback13(result_callback=self._callback)
            cb_arg: Any = byref(self._callbacks13)
        else:
            cb_arg = self._callback
        ret = lib.rkllm_init(byref(self.handle), byref(param), cb_arg)
        if ret != 0 or not self.handle:
            if self.abi.version == "1.3":
                FAILED_INITS.add(self.lib_path)
            raise RkvoiceError(
                Stage.LLM, "rkllm-init",
                f"rkllm_init failed ({ret}) for {self.model}: check the model matches runtime ABI "
                f"{self.abi.version} (llm.rkllm_abi), llm.context <= the model's max context, NPU driver >= 0.9.8",
            )
        # We build the prompt (ChatML), so the template embedded at conversion is switched off; a
        # runtime without the call keeps it and gets the conversation as the user's text (flatten).
        self.raw_prompt = hasattr(lib, "rkllm_set_chat_template") and \
            lib.rkllm_set_chat_template(self.handle, b"", b"", b"") == 0
        if not self.raw_prompt:
            log.warning("%s cannot replace the chat template; the model's own template wraps the prompt",
                        self.lib_path)
        self.lib = lib
        log.info("rkllm loaded %s (ABI %s)", self.model, self.abi.version)

    def _refuse_unsupported_runtime(self, lib: ctypes.CDLL) -> None:
        """Read the loaded library's version from its bytes and refuse one no binding here matches,
        before any call into it (a wrong layout crashes inside rkllm_run, not with an error)."""
        path = loaded_path(lib, "rkllm_init")  # None: not a librkllmrt (bind() says so) or no /proc
        version = versions.so_version(path, "rkllm") if path is not None else None
        if version is None:
            log.warning("cannot read the librkllmrt version of %s; assuming it matches llm.rkllm_abi %s",
                        path or self.lib_path, self.abi.version)
            return
        problem = versions.rkllm_runtime_problem(version, self.abi.version)
        if problem is not None:
            raise RkvoiceError(Stage.LLM, "rkllm-version", f"{path}: {problem}")
        log.info("librkllmrt %s (%s)", version, path)

    def close(self) -> None:
        if self.lib is not None and self.handle:
            self.lib.rkllm_destroy(self.handle)
            self.handle = abi_mod.LLMHandle()
        self.lib = None

    def _on_result(self, result: Any, _userdata: Any, state: int) -> int:
        try:
            res = result.contents if result else None
            if res is not None and res.text:
                self._q.put(ctypes.string_at(res.text))
            if state == abi_mod.ERROR:
                self._q.put(_ERROR)
        except Exception:  # never let an exception cross into C
            log.exception("rkllm callback failed")
        return 0

    def _run(self, prompt: bytes) -> None:
        assert self.lib is not None
        inp = self.abi.Input()
        inp.role = b"user"
        inp.enable_thinking = False
        inp.input_type = abi_mod.INPUT_PROMPT
        inp.prompt_input = prompt
        infer = self.abi.InferParam()
        infer.mode = abi_mod.INFER_GENERATE
        infer.keep_history = 0
        if self.abi.version == "1.3":
            infer.max_new_tokens = self.cfg.llm.max_tokens
        try:
            self._q.put(self.lib.rkllm_run(self.handle, byref(inp), byref(infer), None))  # its return code ends
        except (ctypes.ArgumentError, OSError) as exc:  # bad arguments reaching the runtime
            self._q.put(exc)

    def stream(self, messages: list[Message]) -> Iterator[str]:
        if self.lib is None:
            raise RkvoiceError(Stage.LLM, "not-loaded", "rkllm engine used before load()")
        if not self._run_lock.acquire(blocking=False):
            raise RkvoiceError(Stage.LLM, "busy", "rkllm is already generating; abort() the running answer first")
        worker: threading.Thread | None = None
        try:
            self._aborted.clear()
            self._q = queue.Queue()
            prompt = chatml(messages) if self.raw_prompt else flatten(messages)
            worker = threading.Thread(target=self._run, args=(prompt.encode("utf-8"),),
                                      name="rkllm-run", daemon=True)
            worker.start()
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            error = False
            while not isinstance(item := self._q.get(), (int, Exception)):  # token bytes or _ERROR
                if item is _ERROR:
                    error = True
                elif text := decoder.decode(item):
                    yield text
            if isinstance(item, Exception):
                raise RkvoiceError(Stage.LLM, "rkllm-run", f"rkllm_run failed: {item}")
            tail = decoder.decode(b"", final=True)
            if tail and tail != "\ufffd":
                yield tail
            elif tail:
                log.warning("rkllm output ended inside a UTF-8 character; dropped it")
            if (error or item != 0) and not self._aborted.is_set():
                raise RkvoiceError(Stage.LLM, "rkllm-run",
                                   f"rkllm_run reported an error (ret {item}); see the runtime log")
            worker.join()
        finally:
            if worker is not None and worker.is_alive():  # the consumer stopped early: stop the runtime first
                self.abort()
                worker.join(timeout=10)
            self._run_lock.release()

    def abort(self) -> None:
        self._aborted.set()
        if self.lib is not None and self.handle:
            self.lib.rkllm_abort(self.handle)
