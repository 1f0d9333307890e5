"""RKLLM ctypes binding: layouts match docs/rkllm-abi.md, and it runs end to end against a fake
librkllmrt.so built here with gcc from a header written from docs/rkllm-abi.md (both ABIs)."""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rkvoice.answer.llm import rkllm as rkllm_mod, rkllm_abi as A
from rkvoice.answer.llm.rkllm import RkllmEngine
from rkvoice.board import versions
from rkvoice.config import Config, LlmConfig
from rkvoice.errors import RkvoiceError

# Sizes and offsets straight from docs/rkllm-abi.md (LP64).
DOC_SIZES = {
    "1.2": {"Param": 208, "Input": 64, "InferParam": 32, "Result": 72},
    "1.3": {"Param": 184, "Input": 160, "InferParam": 40, "Result": 72},
}


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_struct_sizes_match_doc(version: str) -> None:
    abi = A.get_abi(version)
    sizes = DOC_SIZES[version]
    assert ctypes.sizeof(abi.Param) == sizes["Param"]
    assert ctypes.sizeof(abi.Input) == sizes["Input"]
    assert ctypes.sizeof(abi.InferParam) == sizes["InferParam"]
    assert ctypes.sizeof(A.RKLLMResult) == sizes["Result"]
    assert ctypes.sizeof(A.RKLLMExtendParam) == 120
    assert abi.Param.extend_param.offset == (88 if version == "1.2" else 60)
    for name, off in (("role", 0), ("enable_thinking", 8), ("input_type", 12), ("u", 16)):
        assert getattr(abi.Input, name).offset == off


def test_other_offsets_match_doc() -> None:
    assert A.RKLLMParam12.skip_special_token.offset == 56 and A.RKLLMParam12.is_async.offset == 57
    assert A.RKLLMParam13.ignore_eos_token.offset == 57 and A.RKLLMParam13.is_async.offset == 58
    assert A.RKLLMInferParam12.keep_history.offset == 24
    assert A.RKLLMInferParam13.sampling_params.offset == 24
    assert A.RKLLMInferParam13.keep_history.offset == 32 and A.RKLLMInferParam13.max_new_tokens.offset == 36
    assert A.RKLLMResult.perf.offset == 48 and A.RKLLMResult.token_id.offset == 8
    assert ctypes.sizeof(A.RKLLMCallback13) == 48
    with pytest.raises(RkvoiceError, match="choose one of: 1.2, 1.3"):
        A.get_abi("1.1")


HEADER = r"""
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
typedef void* LLMHandle;
typedef enum { RKLLM_RUN_NORMAL = 0, RKLLM_RUN_WAITING = 1, RKLLM_RUN_FINISH = 2, RKLLM_RUN_ERROR = 3 } LLMCallState;
typedef struct { int32_t base_domain_id; int8_t embed_flash; int8_t enabled_cpus_num; uint32_t enabled_cpus_mask;
                 uint8_t n_batch; int8_t use_cross_attn; uint8_t reserved[104]; } RKLLMExtendParam;
typedef struct {
  const char* model_path; int32_t max_context_len; int32_t max_new_tokens; int32_t top_k; int32_t n_keep;
  float top_p; float temperature; float repeat_penalty; float frequency_penalty; float presence_penalty;
  int32_t mirostat; float mirostat_tau; float mirostat_eta; bool skip_special_token;
#ifdef ABI13
  bool ignore_eos_token; bool is_async;
#else
  bool is_async; const char* img_start; const char* img_end; const char* img_content;
#endif
  RKLLMExtendParam extend_param;
} RKLLMParam;
typedef struct { float* embed; size_t n_tokens; } RKLLMEmbedInput;
typedef struct { int32_t* input_ids; size_t n_tokens; } RKLLMTokenInput;
#ifdef ABI13
typedef struct { char* prompt; float* image_embed; size_t n_image_tokens; size_t n_image; size_t image_width;
                 size_t image_height; size_t extra[12]; } RKLLMMultiModalInput;
#else
typedef struct { char* prompt; float* image_embed; size_t n_image_tokens; size_t n_image; size_t image_width;
                 size_t image_height; } RKLLMMultiModalInput;
#endif
typedef struct { const char* role; bool enable_thinking; int32_t input_type;
  union { const char* prompt_input; RKLLMEmbedInput embed_input; RKLLMTokenInput token_input;
          RKLLMMultiModalInput multimodal_input; }; } RKLLMInput;
typedef struct {
  int32_t mode; void* lora_params; void* prompt_cache_params;
#ifdef ABI13
  void* sampling_params; int32_t keep_history; int32_t max_new_tokens;
#else
  int32_t keep_history;
#endif
} RKLLMInferParam;
typedef struct { const float* hidden_states; int embd_size; int num_tokens; } RKLLMResultLastHiddenLayer;
typedef struct { const float* logits; int vocab_size; int num_tokens; } RKLLMResultLogits;
typedef struct { float prefill_time_ms; int prefill_tokens; float generate_time_ms; int generate_tokens;
                 float memory_usage_mb; } RKLLMPerfStat;
typedef struct { const char* text; int32_t token_id; RKLLMResultLastHiddenLayer last_hidden_layer;
                 RKLLMResultLogits logits; RKLLMPerfStat perf; } RKLLMResult;
typedef int (*LLMResultCallback)(RKLLMResult* result, void* userdata, LLMCallState state);
typedef struct { LLMResultCallback result_callback; void* result_userdata; void* tokenizer_callback;
                 void* tokenizer_userdata; void* embed_callback; void* embed_userdata; } RKLLMCallback;
"""

# The fake runtime. The reply is "<reply>" followed by the prompt's last user line echoed
# back, emitted in 2-byte tokens (so most Chinese characters are split across tokens: the
# first half is reported as WAITING with the bytes, like an incomplete UTF-8 sequence).
# A prompt containing "SLOW" produces tokens forever (until rkllm_abort); "BOOM" -> ERROR.
FAKE = HEADER + r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef struct { LLMResultCallback cb; RKLLMParam param; volatile int abort_flag; char tmpl[256]; int runs; } Fake;
#ifdef FAKE_VERSION
/* what Rockchip builds embed: the runtime's version with its build stamp */
__attribute__((used)) const char fake_rkllm_version[] = "rkllm-runtime version: " FAKE_VERSION " (0a1b2c3@2025-01-01T00:00:00)";
#endif
static int g_inits = 0;
int fake_inits(void) { return g_inits; }
static int g_last_keep_history = -1, g_last_max_new = -1, g_last_domain = -1, g_last_cpus = -1;
static char g_last_role[32];
static char g_last_prompt[4096];
const char* fake_last_prompt(void) { return g_last_prompt; }
int fake_last(int what) {
  switch (what) { case 0: return g_last_keep_history; case 1: return g_last_max_new; case 2: return g_last_domain;
                  case 3: return g_last_cpus; default: return -1; } }
const char* fake_last_role(void) { return g_last_role; }
int fake_sizes(int i) {
  switch (i) { case 0: return sizeof(RKLLMParam); case 1: return sizeof(RKLLMInput); case 2: return sizeof(RKLLMInferParam);
               case 3: return sizeof(RKLLMResult); case 4: return offsetof(RKLLMParam, extend_param);
               case 5: return sizeof(RKLLMCallback); default: return -1; } }
RKLLMParam rkllm_createDefaultParam(void) {
  RKLLMParam p; memset(&p, 0, sizeof p);
  p.max_context_len = 512; p.max_new_tokens = -1; p.top_k = 40; p.top_p = 0.9f; p.temperature = 0.8f;
  p.repeat_penalty = 1.1f; p.extend_param.enabled_cpus_num = 4; return p; }
#ifdef ABI13
int rkllm_init(LLMHandle* h, RKLLMParam* p, RKLLMCallback* cbs) { LLMResultCallback cb = cbs ? cbs->result_callback : NULL;
#else
int rkllm_init(LLMHandle* h, RKLLMParam* p, LLMResultCallback cb) {
#endif
  if (!p || !p->model_path || !cb || strstr(p->model_path, "broken") || access(p->model_path, R_OK) != 0) {
    fprintf(stderr, "E fake-rkllm: invalid rkllm model\n"); *h = NULL; return -1; }
  if (p->top_k != 20 || p->top_p < 0.79f || p->top_p > 0.81f) { fprintf(stderr, "bad sampling\n"); return -1; }
  g_inits++;
  Fake* f = calloc(1, sizeof(Fake)); f->cb = cb; f->param = *p;
  g_last_domain = p->extend_param.base_domain_id; g_last_cpus = p->extend_param.enabled_cpus_num;
  *h = f; return 0; }
#ifndef NO_TEMPLATE
int rkllm_set_chat_template(LLMHandle h, const char* s, const char* pre, const char* post) {
  Fake* f = h; snprintf(f->tmpl, sizeof f->tmpl, "%s|%s|%s", s, pre, post); return 0; }
#endif
int rkllm_clear_kv_cache(LLMHandle h, int keep, int* a, int* b) { (void)h; (void)keep; (void)a; (void)b; return 0; }
int rkllm_abort(LLMHandle h) { ((Fake*)h)->abort_flag = 1; return 0; }
int rkllm_destroy(LLMHandle h) { free(h); return 0; }
typedef struct { Fake* f; char* text; int forever; int error; int max_new; int nullwait; int ret; } Job;
static void* worker(void* arg) {
  Job* j = arg; RKLLMResult r; memset(&r, 0, sizeof r);
  size_t n = strlen(j->text); int tokens = 0; char tok[16]; char carry[16]; size_t ncarry = 0;
  if (j->error) { j->f->cb(NULL, NULL, RKLLM_RUN_ERROR); j->ret = -1; return NULL; }
  for (size_t i = 0; (i < n || j->forever) && !j->f->abort_flag; i += 2) {
    if (j->max_new > 0 && tokens >= j->max_new) break;
    size_t k = j->forever ? (i % n) : i; size_t len = (n - k) < 2 ? (n - k) : 2;
    memcpy(tok, j->text + k, len); tok[len] = 0; r.text = tok; r.token_id = tokens++;
    /* a token that ends inside a multi-byte character: the runtime reports WAITING */
    int incomplete = 0; size_t end = k + len; if (end < n && ((unsigned char)j->text[end] & 0xC0) == 0x80) incomplete = 1;
    if (j->nullwait) { /* runtime variant: WAITING carries no text, the bytes come with the next call */
      if (incomplete) { memcpy(carry + ncarry, tok, len); ncarry += len; r.text = NULL;
                        j->f->cb(&r, NULL, RKLLM_RUN_WAITING); continue; }
      char whole[32]; memcpy(whole, carry, ncarry); memcpy(whole + ncarry, tok, len + 1); ncarry = 0;
      r.text = whole; j->f->cb(&r, NULL, RKLLM_RUN_NORMAL); continue; }
    j->f->cb(&r, NULL, incomplete ? RKLLM_RUN_WAITING : RKLLM_RUN_NORMAL);
    if (j->forever) usleep(2000);
  }
  memset(&r, 0, sizeof r); r.perf.generate_tokens = tokens; r.perf.prefill_tokens = 7; r.perf.generate_time_ms = 1.5f;
  j->f->cb(&r, NULL, RKLLM_RUN_FINISH); j->ret = 0; return NULL; }
int rkllm_run(LLMHandle h, RKLLMInput* in, RKLLMInferParam* ip, void* userdata) {
  (void)userdata; Fake* f = h; f->abort_flag = 0; f->runs++;
  if (in->input_type != 0 || !in->prompt_input) return -1;
  snprintf(g_last_role, sizeof g_last_role, "%s", in->role ? in->role : "(null)");
  snprintf(g_last_prompt, sizeof g_last_prompt, "%s", in->prompt_input);
  g_last_keep_history = ip->keep_history;
#ifdef ABI13
  g_last_max_new = ip->max_new_tokens;
#else
  g_last_max_new = f->param.max_new_tokens;
#endif
  const char* p = in->prompt_input; const char* last = strstr(p, "<|im_start|>user\n");
  const char* u = NULL; while (last) { u = last + strlen("<|im_start|>user\n"); last = strstr(u, "<|im_start|>user\n"); }
  char* text = malloc(strlen(p) + 64); strcpy(text, "<reply>");
  if (u) { const char* e = strstr(u, "<|im_end|>"); size_t l = e ? (size_t)(e - u) : strlen(u); strncat(text, u, l); }
  else { const char* nl = strrchr(p, '\n'); strcat(text, nl ? nl + 1 : p); } /* no ChatML: echo the last line */
  Job j = { f, text, strstr(p, "SLOW") != NULL, strstr(p, "BOOM") != NULL, g_last_max_new,
            strstr(p, "NULLWAIT") != NULL, 0 };
  pthread_t t; pthread_create(&t, NULL, worker, &j); pthread_join(t, NULL); free(text); return j.ret; }
"""


@pytest.fixture(scope="module", params=["1.2", "1.3"])
def fake_lib(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build the fake librkllmrt.so")
    version = request.param
    d = tmp_path_factory.mktemp(f"rkllm{version}")
    src = d / "fake_rkllm.c"
    src.write_text(FAKE)
    lib = d / "librkllmrt.so"
    flags = ["-DABI13"] if version == "1.3" else []
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-pthread", *flags, "-o", str(lib), str(src)], check=True)
    return version, lib


def _cfg(version: str, **llm: object) -> Config:
    return Config(llm=dataclasses.replace(LlmConfig(), **{"rkllm_abi": version, "max_tokens": 200, **llm}))


class PerfEngine(RkllmEngine):
    """The engine keeping the runtime's figures of its last answer (read at RKLLMPerfStat's offsets)."""

    last_perf: dict[str, float] = {}

    def _on_result(self, result: Any, userdata: Any, state: int) -> int:
        if state == A.FINISH and result:
            p = result.contents.perf
            self.last_perf = {"prefill_tokens": p.prefill_tokens, "generate_tokens": p.generate_tokens}
        return super()._on_result(result, userdata, state)


def _engine(fake_lib: tuple[str, Path], tmp_path: Path, **llm: object) -> PerfEngine:
    version, lib = fake_lib
    model = tmp_path / "qwen.rkllm"
    model.write_bytes(b"fake model")
    return PerfEngine(_cfg(version, **llm), lib_path=str(lib), model=model)


def test_c_layouts_equal_binding(fake_lib: tuple[str, Path]) -> None:
    version, lib = fake_lib
    c = ctypes.CDLL(str(lib))
    abi = A.get_abi(version)
    assert [c.fake_sizes(i) for i in range(6)] == [
        ctypes.sizeof(abi.Param), ctypes.sizeof(abi.Input), ctypes.sizeof(abi.InferParam),
        ctypes.sizeof(A.RKLLMResult), abi.Param.extend_param.offset, ctypes.sizeof(A.RKLLMCallback13)]


def test_streams_whole_characters_end_to_end(fake_lib: tuple[str, Path], tmp_path: Path) -> None:
    eng = _engine(fake_lib, tmp_path)
    eng.load()
    try:
        msgs = [{"role": "system", "content": "你是小智。"}, {"role": "user", "content": "月亮为什么会发光？"}]
        deltas = list(eng.stream(msgs))
        assert "".join(deltas) == "<reply>月亮为什么会发光？"
        assert len(deltas) > 5  # streamed token by token, not in one piece
        assert all("\ufffd" not in d for d in deltas)  # split characters were joined, never mangled
        assert eng.last_perf["generate_tokens"] > 5 and eng.last_perf["prefill_tokens"] == 7
        c = eng.lib
        assert c is not None
        c.fake_last.restype = ctypes.c_int
        assert c.fake_last(0) == 0  # keep_history read at the right offset
        assert c.fake_last(2) == 1 and c.fake_last(3) == 4  # base_domain_id, cpus from mask 0xF0
        c.fake_last_role.restype = ctypes.c_char_p
        assert c.fake_last_role() == b"user"
        c.fake_last_prompt.restype = ctypes.c_char_p
        assert c.fake_last_prompt().decode() == (
            "<|im_start|>system\n你是小智。<|im_end|>\n<|im_start|>user\n月亮为什么会发光？<|im_end|>\n"
            "<|im_start|>assistant\n")
        # a second turn on the same handle works
        assert "".join(eng.stream([{"role": "user", "content": "再说一遍"}])) == "<reply>再说一遍"
    finally:
        eng.close()


def test_waiting_without_text_then_whole_bytes(fake_lib: tuple[str, Path], tmp_path: Path) -> None:
    eng = _engine(fake_lib, tmp_path)
    eng.load()
    try:
        deltas = list(eng.stream([{"role": "user", "content": "NULLWAIT 月亮为什么会发光？"}]))
        assert "".join(deltas) == "<reply>NULLWAIT 月亮为什么会发光？"
        assert all("\ufffd" not in d for d in deltas)
    finally:
        eng.close()


def test_runtime_without_set_chat_template_gets_flattened_prompt(
        fake_lib: tuple[str, Path], tmp_path: Path) -> None:
    version, _ = fake_lib
    src = tmp_path / "fake.c"
    src.write_text(FAKE)
    lib = tmp_path / "librkllmrt.so"
    flags = ["-DABI13"] if version == "1.3" else []
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-pthread", "-DNO_TEMPLATE", *flags, "-o", str(lib),
                    str(src)], check=True)
    model = tmp_path / "m.rkllm"
    model.write_bytes(b"x")
    eng = RkllmEngine(_cfg(version), lib_path=str(lib), model=model)
    eng.load()
    try:
        assert eng.raw_prompt is False
        msgs = [{"role": "system", "content": "你是小智。"}, {"role": "user", "content": "你好"},
                {"role": "assistant", "content": "你好呀。"}, {"role": "user", "content": "几岁了？"}]
        assert "".join(eng.stream(msgs)) == "<reply>几岁了？"
        assert eng.lib is not None
        eng.lib.fake_last_prompt.restype = ctypes.c_char_p
        assert eng.lib.fake_last_prompt().decode() == "你是小智。\n用户：你好\n助手：你好呀。\n几岁了？"
    finally:
        eng.close()


def test_max_new_tokens_reaches_the_runtime(fake_lib: tuple[str, Path], tmp_path: Path) -> None:
    eng = _engine(fake_lib, tmp_path, max_tokens=3)
    eng.load()
    try:
        out = "".join(eng.stream([{"role": "user", "content": "一二三四五六七八九十"}]))
        assert out == "<reply"  # 3 tokens of 2 bytes
    finally:
        eng.close()


def test_abort_from_another_thread(fake_lib: tuple[str, Path], tmp_path: Path) -> None:
    eng = _engine(fake_lib, tmp_path)
    eng.load()
    try:
        got: list[str] = []
        first = threading.Event()

        def consume() -> None:
            for d in eng.stream([{"role": "user", "content": "SLOW 讲个很长的故事"}]):
                got.append(d)
                first.set()

        t = threading.Thread(target=consume)
        t.start()
        assert first.wait(10)
        eng.abort()
        t.join(10)
        assert not t.is_alive(), "abort did not end the stream"
        assert got
        # the engine is usable after an abort
        assert "".join(eng.stream([{"role": "user", "content": "好"}])) == "<reply>好"
    finally:
        eng.close()


def test_runtime_error_state_raises(fake_lib: tuple[str, Path], tmp_path: Path) -> None:
    eng = _engine(fake_lib, tmp_path)
    eng.load()
    try:
        with pytest.raises(RkvoiceError, match="rkllm_run reported an error"):
            list(eng.stream([{"role": "user", "content": "BOOM"}]))
    finally:
        eng.close()


def test_init_failure_is_a_clear_error(fake_lib: tuple[str, Path], tmp_path: Path) -> None:
    version, lib = fake_lib
    model = tmp_path / "broken.rkllm"
    model.write_bytes(b"x")
    eng = RkllmEngine(_cfg(version), lib_path=str(lib), model=model)
    with pytest.raises(RkvoiceError, match=f"rkllm_init failed .*ABI {version}"):
        eng.load()
    missing = RkllmEngine(_cfg(version), lib_path=str(lib), model=tmp_path / "nope.rkllm")
    with pytest.raises(RkvoiceError, match="not found"):
        missing.load()
    good = tmp_path / "good.rkllm"
    good.write_bytes(b"x")
    again = RkllmEngine(_cfg(version), lib_path=str(lib), model=good)
    try:
        if version == "1.3":  # a second rkllm_init after a failure may crash 1.3.0: refused
            with pytest.raises(RkvoiceError, match="restart rkvoice"):
                again.load()
        else:
            again.load()
            again.close()
    finally:
        rkllm_mod.FAILED_INITS.clear()


def test_missing_library_is_a_clear_error(tmp_path: Path) -> None:
    model = tmp_path / "m.rkllm"
    model.write_bytes(b"x")
    eng = RkllmEngine(_cfg("1.2"), lib_path=str(tmp_path / "librkllmrt.so"), model=model)
    with pytest.raises(RkvoiceError, match="llm.rkllm_lib"):
        eng.load()


def test_stream_before_load_fails(tmp_path: Path) -> None:
    eng = RkllmEngine(_cfg("1.3"), lib_path="x", model=tmp_path / "m")
    with pytest.raises(RkvoiceError, match="before load"):
        list(eng.stream([{"role": "user", "content": "hi"}]))
    time.sleep(0)


# ---------------------------------------------------------------- runtime version (1.2.0 is refused)

def _versioned_lib(tmp_path: Path, runtime: str, abi: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build the fake librkllmrt.so")
    src = tmp_path / "fake.c"
    src.write_text(FAKE)
    lib = tmp_path / f"librkllmrt-{runtime}.so"
    flags = ["-DABI13"] if abi == "1.3" else []
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-pthread", f'-DFAKE_VERSION="{runtime}"', *flags,
                    "-o", str(lib), str(src)], check=True)
    return lib


def _versioned_engine(tmp_path: Path, runtime: str, abi: str, lib_abi: str | None = None) -> RkllmEngine:
    lib = _versioned_lib(tmp_path, runtime, lib_abi or abi)
    model = tmp_path / "qwen.rkllm"
    model.write_bytes(b"fake model")
    return RkllmEngine(_cfg(abi), lib_path=str(lib), model=model)


def test_runtime_1_2_0_is_refused_at_load_before_any_call(tmp_path: Path) -> None:
    eng = _versioned_engine(tmp_path, "1.2.0", "1.2")
    with pytest.raises(RkvoiceError, match=r"librkllmrt 1\.2\.0 is not supported .*role.*void callback.*"
                                            r"supported: 1\.2\.1-1\.2\.3 .* or 1\.3\.x") as err:
        eng.load()
    assert err.value.code == "rkllm-version"
    assert str(tmp_path / "librkllmrt-1.2.0.so") in str(err.value)  # names the file the loader really used
    assert eng.lib is None
    lib = ctypes.CDLL(str(tmp_path / "librkllmrt-1.2.0.so"))
    assert lib.fake_inits() == 0  # rkllm_init was never called


def test_runtime_of_the_other_abi_names_the_setting(tmp_path: Path) -> None:
    eng = _versioned_engine(tmp_path, "1.3.0", "1.2", lib_abi="1.3")
    with pytest.raises(RkvoiceError, match=r'librkllmrt 1\.3\.0 needs llm.rkllm_abi "1\.3"'):
        eng.load()


@pytest.mark.parametrize(("runtime", "abi"), [("1.2.1", "1.2"), ("1.2.3", "1.2"), ("1.3.0", "1.3")])
def test_supported_runtimes_load_and_stream(tmp_path: Path, runtime: str, abi: str) -> None:
    eng = _versioned_engine(tmp_path, runtime, abi)
    eng.load()
    try:
        assert "".join(eng.stream([{"role": "user", "content": "你好"}])) == "<reply>你好"
    finally:
        eng.close()


def test_runtime_abi_table() -> None:
    releases = ("1.2.0", "1.2.1", "1.2.3", "1.2.4", "1.3.0", "1.3.1", "1.1.4", "2.0.0")
    assert [versions.rkllm_runtime_abi(v) for v in releases] == [
        None, "1.2", "1.2", None, "1.3", "1.3", None, None]
    assert versions.rkllm_runtime_problem("1.2.2", "1.2") is None
    assert "role" in (versions.rkllm_runtime_problem("1.2.0", "1.2") or "")
    assert 'set llm.rkllm_abi: "1.2"' in (versions.rkllm_runtime_problem("1.2.2", "1.3") or "")


def test_check_refuses_runtime_1_2_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rkvoice.board import runtimes
    from rkvoice.board.runtimes import RuntimeNeed

    lib = tmp_path / "librkllmrt.so"
    monkeypatch.setattr(versions, "LIBRKLLMRT_PATHS", (lib,))
    monkeypatch.setattr(versions, "NPU_DRIVER_PATHS", (tmp_path / "none",))
    for runtime, abi, ok, expect in (
        ("1.2.0", "1.2", False, "librkllmrt 1.2.0 is not supported"),
        ("1.2.1", "1.2", True, "librkllmrt 1.2.1"),
        ("1.3.0", "1.2", False, 'set llm.rkllm_abi: "1.3"'),
        ("1.3.0", "1.3", True, "librkllmrt 1.3.0"),
    ):
        lib.write_bytes(b"\x00rkllm-runtime version: " + runtime.encode() + b" (0123456@2025-01-01T00:00:00)\x00")
        cfg = _cfg(abi)
        st = runtimes.Findings()
        runtimes.check_librkllmrt(RuntimeNeed("librkllmrt", abi=cfg.llm.rkllm_abi, library_path=cfg.llm.rkllm_lib), st)
        assert (not st.problems) is ok, (runtime, abi, st)
        assert any(expect in line for line in st.problems + st.notes), (runtime, abi, st)
        if runtime == "1.2.0":
            assert "1.2.1-1.2.3" in st.problems[0] and "1.3.x" in st.problems[0]


def test_loaded_path_is_the_file_the_linker_used() -> None:
    import ctypes.util

    name = ctypes.util.find_library("m")
    if name is None:
        pytest.skip("no libm to look up")
    path = rkllm_mod.loaded_path(ctypes.CDLL(name), "cos")
    assert path is not None and path.is_file() and path.name.startswith("libm")
