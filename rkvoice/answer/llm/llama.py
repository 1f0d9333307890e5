"""llama.cpp engine (portable profile) through cyllama's low-level bindings: its own generation loop
for thread counts per token (rkvoice.answer.llm.cores), characters split across tokens kept whole,
abort inside a decode, and the KV cache of the prompt prefix shared with the last turn kept.

Every decode runs on the engine's own thread (``_decode``). libgomp keeps a team of threads per
thread that calls into it, and once its threads outnumber the cores it spins 100 times at a barrier
(not ``GOMP_SPINCOUNT``) before sleeping: with the system prompt primed on the loading thread and the
answer decoded on another, two threads slept at nearly every barrier and took 43 ms a token, as
long as one, against 29 ms from one calling thread (2 cores).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from rkvoice.answer.llm import cores
from rkvoice.answer.llm.base import LlmEngine, Message, chatml, model_path
from rkvoice.answer.llm.cores import FreeCores, Threads, thread_counts
from rkvoice.config import Config
from rkvoice.errors import RkvoiceError, Stage

log = logging.getLogger(__name__)

SPIN_COUNT = "20000"
"""How many times llama.cpp's OpenMP threads (libgomp) spin at a barrier before sleeping. Its default,
300000, is right on an idle machine only: beside 2 busy processes two threads took 2.35x one on the
prompt and 4.5x per token; with 20000, 1.17x / 1.18x, and the default's speed when idle."""


def native() -> ModuleType:
    """cyllama's llama.cpp bindings, imported on first use (``LlamaEngine.load``). libgomp reads
    GOMP_SPINCOUNT once, when it is loaded with them, so SPIN_COUNT is put into this process's
    environment just before (unless the environment sets a wait policy or a count): set when the
    engine loads, not as a side effect of importing a module."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
    return importlib.import_module("cyllama.llama.llama_cpp")

N_BATCH = 256
PENALTY_LAST_N = 64
MAX_PENDING_TOKENS = 6
"""Tokens held back waiting for a character to complete before giving up on it."""


class LlamaEngine(LlmEngine):
    name = "llama"

    def __init__(self, cfg: Config, model: Path | None = None) -> None:
        self.cfg = cfg
        self.model_file = model or model_path(cfg, "llama")
        self.ll: Any = None  # the bindings (native()), from load()
        self.model: Any = None
        self.vocab: Any = None
        self.ctx: Any = None
        self._template: str | None = None
        self._cancel = threading.Event()
        self._busy = threading.Lock()
        self._kv: list[int] = []  # tokens whose keys/values are in the context, in order
        self.threads = self.threads_batch = 0  # in use now (set by load(), then per answer)
        self._plan = Threads(0, 0, 0)
        self._speaking = threading.Event()
        self.last_stats: dict[str, Any] = {}
        self._decoder: ThreadPoolExecutor | None = None  # the decoding thread, from load() to close()

    def load(self) -> None:
        if self.model is not None:
            return
        if not self.model_file.is_file():
            raise RkvoiceError(Stage.LLM, "model-missing",
                               f"GGUF model {self.model_file} not found; run ./install.sh or set llm.model")
        t0 = time.monotonic()
        ll = self.ll = native()
        ll.disable_logging()
        ll.ggml_backend_load_all()
        params = ll.LlamaModelParams()
        params.n_gpu_layers = 0
        try:
            self.model = ll.LlamaModel(str(self.model_file), params)
        except Exception as exc:
            raise RkvoiceError(Stage.LLM, "model-bad", f"llama.cpp cannot load {self.model_file}: {exc}") from exc
        self.vocab = self.model.get_vocab()
        cparams = ll.LlamaContextParams()
        cparams.n_ctx = self.cfg.llm.context
        cparams.n_batch = N_BATCH
        cores.WINDOW.watch()  # the last second's CPU use by other processes, for auto thread counts
        self._plan = thread_counts(self.cfg.llm)
        self.threads, self.threads_batch = self._plan.quiet, self._plan.prompt
        cparams.n_threads = self.threads  # llama.cpp: batches of one token (generation)
        cparams.n_threads_batch = self.threads_batch  # batches of more (the prompt)
        cparams.no_perf = True
        self.ctx = ll.LlamaContext(self.model, cparams)
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rkvoice-llama")
        self.ctx.install_cancel_callback()
        self._template = self.model.get_default_chat_template() or None
        log.info("llama loaded %s in %.1f s (%d threads generating, %d on the prompt, n_ctx %d)",
                 self.model_file.name, time.monotonic() - t0, self.threads, self.threads_batch,
                 self.cfg.llm.context)

    def prompt(self, messages: list[Message]) -> str:
        if self._template:
            try:
                msgs = [self.ll.LlamaChatMessage(role=m["role"], content=m["content"]) for m in messages]
                return str(self.model.chat_apply_template(self._template, msgs, True))
            except Exception:
                log.debug("model chat template failed; using ChatML", exc_info=True)
        return chatml(messages)

    def _sampler(self) -> Any:
        llm = self.cfg.llm
        sp = self.ll.LlamaSamplerChainParams()
        sp.no_perf = True
        s = self.ll.LlamaSampler(sp)
        if llm.repeat_penalty != 1.0:
            s.add_penalties(PENALTY_LAST_N, llm.repeat_penalty, 0.0, 0.0)
        if llm.temperature <= 0:
            s.add_greedy()
            return s
        s.add_top_k(llm.top_k)
        s.add_top_p(llm.top_p, 1)
        s.add_temp(llm.temperature)
        s.add_dist(llm.seed if llm.seed >= 0 else int(time.time_ns() & 0x7FFFFFFF))
        return s

    def stream(self, messages: list[Message]) -> Generator[str, None, None]:
        if not self._busy.acquire(blocking=False):
            raise RkvoiceError(Stage.LLM, "busy", "llama is already generating; abort() the running answer first")
        try:
            ctx, vocab = self.ctx, self.vocab
            tokens = self._start(messages)
            max_new = self.cfg.llm.max_tokens
            if len(tokens) + max_new > self.cfg.llm.context:
                raise RkvoiceError(Stage.LLM, "prompt-too-long",
                                   f"prompt of {len(tokens)} tokens + {max_new} new exceeds llm.context "
                                   f"{self.cfg.llm.context}; lower llm.history_turns or raise llm.context")
            sampler = self._sampler()
            t0 = time.monotonic()
            reused = self._reuse_prefix(tokens)
            if not self._prefill(tokens, reused):
                return
            t_prefill = time.monotonic() - t0
            pending: list[int] = []
            n_new = 0
            t_first = 0.0
            free = FreeCores(start=self._plan.quiet) if self._plan.follow else None
            quiet_used: set[int] = set()
            for _ in range(max_new):
                if self._cancel.is_set():
                    break
                if self._speaking.is_set():
                    want = self._plan.speaking
                else:
                    want = free.threads() if free is not None else self._plan.quiet
                    quiet_used.add(want)
                self._use_threads(want, self.threads_batch)
                tok = sampler.sample(ctx, -1)
                if vocab.is_eog(tok):
                    break
                n_new += 1
                pending.append(tok)
                text = vocab.detokenize(pending, False, False)
                if not text.endswith("\ufffd") or len(pending) >= MAX_PENDING_TOKENS:
                    pending.clear()
                    text = text.replace("\ufffd", "")
                    if text:
                        t_first = t_first or time.monotonic() - t0
                        yield text
                try:
                    self._decode([tok], len(self._kv))  # its position: the cache's length
                except InterruptedError:
                    self._kv = []
                    break
                self._kv.append(tok)
            self.last_stats = {"prompt_tokens": len(tokens), "reused_tokens": reused, "new_tokens": n_new,
                               "threads": self.threads, "threads_batch": self.threads_batch,
                               "threads_quiet": sorted(quiet_used), "prefill_s": t_prefill,
                               "first_text_s": t_first, "total_s": time.monotonic() - t0}
        finally:
            self._busy.release()

    def _start(self, messages: list[Message]) -> list[int]:
        """The prompt's tokens, with a previous abort cleared and the thread counts set for it."""
        if self.model is None:
            raise RkvoiceError(Stage.LLM, "not-loaded", "llama engine used before load()")
        self._cancel.clear()
        self.ctx.cancel = False
        self._speaking.clear()  # nothing spoken yet; auto counts follow the cores free now
        self._plan = thread_counts(self.cfg.llm)
        self._use_threads(self._plan.quiet, self._plan.prompt)
        return self.vocab.tokenize(self.prompt(messages), add_special=True, parse_special=True)

    def _use_threads(self, generating: int, prompt: int) -> None:
        """llama.cpp takes new counts between decode calls (llama_set_n_threads)."""
        if (generating, prompt) != (self.threads, self.threads_batch):
            self.threads, self.threads_batch = generating, prompt
            self.ctx.set_n_threads(generating, prompt)

    def speaking(self) -> None:
        """The answer's first piece went to the voice: the next tokens leave the TTS thread a core
        (``Threads.speaking``). Safe from any thread; the current answer only."""
        self._speaking.set()

    def _prefill(self, tokens: list[int], start: int) -> bool:
        """Decode ``tokens[start:]`` into the cache; False if aborted (the cache is then dropped)."""
        try:
            for i in range(start, len(tokens), N_BATCH):
                if self._cancel.is_set():
                    raise InterruptedError
                batch = tokens[i:i + N_BATCH]
                self._decode(batch, i)
                self._kv.extend(batch)
        except InterruptedError:  # aborted (perhaps inside a decode): the cache is not trusted any more
            self._kv = []
            return False
        return True

    def _decode(self, tokens: list[int], pos: int) -> None:
        """``tokens`` into the cache from position ``pos``, on the engine's one decoding thread (the
        module's docstring says why); an abort raises InterruptedError here as in the decode."""
        ctx, decoder, batch = self.ctx, self._decoder, self.ll.llama_batch_get_one
        assert decoder is not None  # set by load(), as ctx
        decoder.submit(lambda: ctx.decode(batch(tokens, pos))).result()

    def prime(self, messages: list[Message]) -> None:
        """Compute the cache for the start of a prompt (the system prompt) ahead of the first question."""
        with self._busy:
            tokens = self._start(messages)
            self._prefill(tokens, self._reuse_prefix(tokens))

    def _reuse_prefix(self, tokens: list[int]) -> int:
        """Keep the cached keys/values of the common prefix with the last run; returns its length."""
        n = next((i for i, (a, b) in enumerate(zip(self._kv, tokens)) if a != b), min(len(self._kv), len(tokens)))
        n = min(n, len(tokens) - 1)  # at least one prompt token is decoded, for fresh logits
        if n > 0 and self.ctx.memory_seq_rm(0, n, -1):
            self._kv = self._kv[:n]
            return n
        self.ctx.kv_cache_clear()
        self._kv = []
        return 0

    def close(self) -> None:
        """Free the context and the model (an unfinished answer is aborted first)."""
        self.abort()
        with self._busy:
            self.ctx = self.model = self.vocab = None
            self._kv = []
            if self._decoder is not None:  # its thread ends, and libgomp's team with it
                self._decoder.shutdown()
                self._decoder = None

    def abort(self) -> None:
        self._cancel.set()
        if self.ctx is not None:
            self.ctx.cancel = True
