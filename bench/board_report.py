"""Board report: load every engine of the configured profile with its real models and measure it.

    py312/bin/python -m bench.board_report [--config FILE] [--set KEY=VALUE] [--runs 3]
                                           [--no-llm] [--out FILE]

On a board this is the one command that shows the board works; here it runs on the portable
profile. Prints ONE JSON object:

- ``memory``: MemAvailable (/proc/meminfo) before anything is loaded and after everything is;
  per engine the load time and the change of this process's VmRSS (/proc/self/status). On the
  board the NPU's buffers are DMA memory that may not show in VmRSS: compare MemAvailable.
- ``tts``: on a fixed text, first audio / max gap through the real Speaker (a paced null player,
  so nothing waits for playback) and the whole-text synthesis RTF, medians over ``--runs``; for
  the Matcha voice, calls and time per bucket (the Matcha decoder per window, on the NPU; Vocos per
  frame bucket) and per CPU stage of the split voice (``stages``: encoder_cpu, align, istft).
- ``asr``: the TTS's own output of that text transcribed, CER against the text.
- ``wake``: the wake phrase synthesised (alone and followed by a request) and fed to the wake
  engine (kws on the board, VAD + ASR + pinyin match on portable): detected or not.
- ``llm``: time to the first text and tokens per second on a fixed question.

An engine whose models or runtime are not installed appears as {"status": "missing", "why": ...};
one that fails otherwise as {"status": "error", "why": ...}; the report still comes out (exit 0).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.audio.post import resample
from rkvoice.config import DEFAULT_CONFIG, Config, load_config, parse_override
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.text.normalize import speakable
from rkvoice.timeline import Ev
from rkvoice.tts.matcha_engine import MatchaTts
from tests.support import bench_run, cer, median, mem_available_mb, rss_mb
from tests.support.matcha_stats import MatchaStats
from tests.support.sink import sink_speaker, speak_through

log = logging.getLogger("board_report")

TEXT = "今天天气不错，我们出去走走吧。公园里的花都开了，空气也很新鲜。记得带上水和帽子。"
WAKE_REQUEST = "今天天气怎么样？"
QUESTION = "用两句话介绍一下你自己。"
SAMPLE_RATE = 16000
FRAME = 512  # the live loop's frame: one silero window


# -- loading ---------------------------------------------------------------------------------

def load_engine(what: str, name: str, build: Callable[[], Any]) -> tuple[Any | None, dict[str, Any]]:
    """Build and load one engine; (engine or None, its report entry)."""
    rss0 = rss_mb()
    t0 = time.monotonic()
    try:
        engine = build()
        engine.load()
    except (RkvoiceError, ImportError, OSError) as exc:
        status = "missing" if _is_missing(exc) else "error"
        log.warning("%s: %s: %s", what, status, exc)
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        return None, {"status": status, "engine": name, "why": why}
    except Exception as exc:  # a broken model or runtime: reported, the rest of the board still measured
        log.exception("%s failed to load", what)
        return None, {"status": "error", "engine": name, "why": f"{type(exc).__name__}: {exc}"}
    entry = {"status": "ok", "engine": _engine_name(engine) if name == "auto" else name,
             "load_s": round(time.monotonic() - t0, 3),
             "rss_delta_mb": round(rss_mb() - rss0, 1)}
    return engine, entry


def _is_missing(exc: BaseException) -> bool:
    if isinstance(exc, ImportError):
        return True
    code = getattr(exc, "code", "")
    text = str(exc).lower()
    return "missing" in str(code) or "not found" in text or "not installed" in text or "no such file" in text \
        or "cannot load" in text and "lib" in text


def _engine_name(engine: Any) -> str:
    return str(getattr(engine, "name", "") or type(engine).__name__)


# -- measurements ----------------------------------------------------------------------------

def measure_tts(engine: Any, cfg: Config, runs: int) -> dict[str, Any]:
    """First audio and max gap through the Speaker; whole-text RTF; Matcha bucket times."""
    stats = MatchaStats(engine) if isinstance(engine, MatchaTts) else None
    chunked, whole = [], []
    for _ in range(runs):
        with sink_speaker(engine, cfg) as speaker:
            timeline = speak_through(speaker, TEXT)
        s = timeline.summary()
        s["played_s"] = round(sum(float(e.get("audio_s", 0.0)) for e in timeline.find(Ev.PLAY_CHUNK)), 4)
        chunked.append(s)
        t0 = time.monotonic()
        samples, rate = engine.generate(speakable(TEXT), sid=cfg.tts.sid, speed=cfg.tts.speed)
        synth = time.monotonic() - t0
        whole.append({"synth_s": synth, "audio_s": len(samples) / rate, "rate": rate})
    heard = [s for s in chunked if s.get("first_audio_ms") is not None]
    out: dict[str, Any] = {
        "text_chars": len(TEXT),
        "first_audio_ms": median([s["first_audio_ms"] for s in heard], 3),
        "max_gap_ms": max((s.get("max_gap_ms", 0.0) for s in heard), default=None),
        "played_s": round(chunked[0]["played_s"], 3),
        "chunks": chunked[0].get("chunks"),
        "rtf": median([w["synth_s"] / w["audio_s"] for w in whole if w["audio_s"]], 3),
        "audio_s": round(whole[0]["audio_s"], 3),
        "sample_rate": whole[0]["rate"],
        "runs": runs,
        "raw_first_audio_ms": [round(s["first_audio_ms"], 1) for s in heard],
    }
    if not heard:  # every sample below the player's lead-trim threshold: the voice is silent
        out["silent"] = "no audio reached the player: the voice's output is below the 1 % lead-trim threshold"
    if stats is not None:
        stats.close()
        out["buckets"] = stats.report()
    return out


def synthesise_16k(engine: Any, text: str, cfg: Config) -> np.ndarray:
    samples, rate = engine.generate(speakable(text), sid=cfg.tts.sid, speed=cfg.tts.speed)
    return resample(np.asarray(samples, dtype=np.float32), rate, SAMPLE_RATE)


def measure_asr(asr: Any, audio: np.ndarray) -> dict[str, Any]:
    t0 = time.monotonic()
    heard = asr.transcribe(audio)
    asr_s = time.monotonic() - t0
    audio_s = len(audio) / SAMPLE_RATE
    return {"reference": TEXT, "transcript": heard, "cer": round(cer(TEXT, heard), 4),
            "asr_ms": round(asr_s * 1000, 1), "audio_s": round(audio_s, 3),
            "rtf": round(asr_s / audio_s, 4) if audio_s else None}


def detect_wake(wake: Any, audio: np.ndarray) -> dict[str, Any]:
    """Feed 0.5 s of silence, the audio and 1 s of silence in live-loop frames; the first hit."""
    silence = np.zeros(SAMPLE_RATE // 2, np.float32)
    stream = np.concatenate([silence, audio, silence, silence])
    wake.restart(0)
    t0 = time.monotonic()
    hit = None
    for k in range(0, len(stream), FRAME):
        hit = wake.accept(stream[k : k + FRAME])
        if hit is not None:
            break
    if hit is None:
        hit = wake.flush()
    out: dict[str, Any] = {"detected": hit is not None, "audio_s": round(len(audio) / SAMPLE_RATE, 3),
                           "wall_ms": round((time.monotonic() - t0) * 1000, 1)}
    if hit is not None:
        out.update({"at_s": round(hit.at_s, 3), "heard": hit.text, "request": hit.request})
    else:
        out["heard"] = getattr(wake, "last_text", "")
    return out


def measure_llm(llm: Any, cfg: Config) -> dict[str, Any]:
    messages = [{"role": "system", "content": "你是小智，一个离线中文语音助手。"}, {"role": "user", "content": QUESTION}]
    t0 = time.monotonic()
    first = None
    deltas: list[str] = []
    for delta in llm.stream(messages):
        if first is None:
            first = time.monotonic()
        deltas.append(delta)
    end = time.monotonic()
    stats = getattr(llm, "last_stats", None) or {}
    perf = getattr(llm, "last_perf", None) or {}
    tokens = int(stats.get("new_tokens") or perf.get("generate_tokens") or len(deltas))
    gen_s = end - (first or end)
    return {"question": QUESTION, "answer": "".join(deltas),
            "first_token_ms": round(((first or end) - t0) * 1000, 1), "tokens": tokens,
            "tokens_per_s": round((tokens - 1) / gen_s, 2) if tokens > 1 and gen_s > 0 else None,
            "total_s": round(end - t0, 3)}


def guarded(what: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return {"status": "ok", **fn()}
    except Exception as exc:  # one failed measurement must not hide the others
        log.exception("%s failed", what)
        return {"status": "error", "why": f"{type(exc).__name__}: {exc}"}


# -- the report ------------------------------------------------------------------------------

def engine_names(cfg: Config) -> dict[str, str]:
    from rkvoice.answer.llm.registry import engine_name
    from rkvoice.hear.asr import asr_name
    from rkvoice.hear.wake_registry import wake_name

    return {"tts": cfg.tts.engine, "asr": asr_name(cfg), "wake": wake_name(cfg), "vad": "silero",
            "llm": engine_name(cfg)}


def voices(cfg: Config) -> dict[str, Any]:
    """Installed TTS voices, and why the Matcha voice (the board's own) is not, when it is not."""
    from rkvoice.needs import missing
    from rkvoice.tts.registry import TTS, engine_languages

    out: dict[str, Any] = {name: {"status": "installed", "languages": list(langs)}
                           for name, langs in sorted(engine_languages(cfg).items())}
    if "matcha" not in out:
        try:
            lacks = missing(TTS.needs("matcha", cfg), relative_to=cfg.models.path.parent, devices=False)
            out["matcha"] = {"status": "missing", "why": "; ".join(map(str, lacks))}
        except Exception as exc:  # the check itself failing is worth reporting, not fatal
            out["matcha"] = {"status": "missing", "why": f"{type(exc).__name__}: {exc}"}
    return out


def report(cfg: Config, runs: int, with_llm: bool) -> dict[str, Any]:
    from rkvoice.answer.llm.registry import LLM
    from rkvoice.hear.asr import create_asr
    from rkvoice.hear.vad import Segmenter
    from rkvoice.hear.wake_registry import create_wake
    from rkvoice.tts.registry import create_tts

    out: dict[str, Any] = {
        "profile": cfg.models.profile,
        "configured": engine_names(cfg),
        "memory": {"mem_available_mb_before": mem_available_mb(), "rss_mb_start": rss_mb()},
        "engines": {},
    }
    out["voices"] = voices(cfg)
    engines = out["engines"]
    names = out["configured"]
    tts, engines["tts"] = load_engine("tts", names["tts"], lambda: create_tts(cfg, None, text=TEXT))
    vad, engines["vad"] = load_engine("vad", "silero", lambda: Segmenter(cfg))
    asr, engines["asr"] = load_engine("asr", names["asr"], lambda: create_asr(cfg))
    if names["wake"] == "asr-match" and asr is None:
        wake, engines["wake"] = None, {"status": "missing", "engine": "asr-match",
                                       "why": "asr-match wake needs the ASR engine, which did not load"}
    else:
        wake, engines["wake"] = load_engine("wake", names["wake"], lambda: create_wake(cfg, asr))
    llm = None
    if with_llm:
        # the engine itself, not create_llm's stand-in for a missing optional model: a missing model is
        # reported missing, not measured
        llm, engines["llm"] = load_engine("llm", names["llm"], lambda: LLM.create(names["llm"], cfg))
    else:
        engines["llm"] = {"status": "skipped", "why": "--no-llm"}
    out["memory"].update({"mem_available_mb_after": mem_available_mb(), "rss_mb_loaded": rss_mb()})
    out["memory"]["mem_available_drop_mb"] = round(out["memory"]["mem_available_mb_before"]
                                                   - out["memory"]["mem_available_mb_after"], 1)

    out["tts"] = guarded("tts", lambda: measure_tts(tts, cfg, runs)) if tts is not None else engines["tts"]
    spoken = None
    if tts is not None:
        try:
            spoken = synthesise_16k(tts, TEXT, cfg)
        except Exception as exc:
            log.exception("synthesis of the test text failed")
            out["tts"] = {"status": "error", "why": f"{type(exc).__name__}: {exc}"}
    if asr is None:
        out["asr"] = engines["asr"]
    elif spoken is None:
        out["asr"] = {"status": "skipped", "why": "no TTS to speak the test text"}
    else:
        out["asr"] = guarded("asr", lambda: measure_asr(asr, spoken))
    if wake is None:
        out["wake"] = engines["wake"]
    elif tts is None:
        out["wake"] = {"status": "skipped", "why": "no TTS to speak the wake phrase"}
    else:
        phrase = cfg.hear.wake_phrase
        out["wake"] = {"status": "ok", "engine": engines["wake"]["engine"], "phrase": phrase}
        for key, text in (("alone", f"{phrase}。"), ("with_request", f"{phrase}，{WAKE_REQUEST}")):
            out["wake"][key] = guarded(f"wake {key}",
                                       lambda text=text: {"text": text, **detect_wake(wake, synthesise_16k(tts, text, cfg))})
    if llm is not None:
        out["llm"] = guarded("llm", lambda: measure_llm(llm, cfg))
    else:
        out["llm"] = engines["llm"]
    out["memory"]["rss_mb_end"] = rss_mb()
    for engine in (tts, vad, asr, wake, llm):
        close = getattr(engine, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # closing is best effort at exit
                log.debug("close failed", exc_info=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, help="config file layered over config.yaml (e.g. config.board.yaml); "
                    "default: /etc/rkvoice/config.yaml (or $RKVOICE_CONFIG) when present, as the daemon")
    ap.add_argument("--set", action="append", default=[], help="config override KEY=VALUE")
    ap.add_argument("--runs", type=int, default=3, help="TTS runs (medians)")
    ap.add_argument("--no-llm", action="store_true", help="do not load or measure the LLM")
    args, run = bench_run("board_report", ap, argv)
    try:
        if args.config is not None and not args.config.is_file():
            raise RkvoiceError(Stage.CONFIG, "unreadable", f"--config {args.config}: no such file")
        files = [DEFAULT_CONFIG, args.config] if args.config else None  # None: + /etc/rkvoice/config.yaml
        cfg = load_config([parse_override(s) for s in args.set], files=files)
        if args.runs < 1:
            raise RkvoiceError(Stage.INPUT, "bad-value", f"--runs {args.runs}: give 1 or more")
    except RkvoiceError as exc:
        sys.stderr.write(f"board_report: {exc}\n")
        return 2
    run.emit(report(cfg, args.runs, not args.no_llm), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
