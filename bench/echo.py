"""Echo bench: the assistant's own voice in a simulated room, with and without echo cancellation.

    py312/bin/python -m bench.echo [--answers 50] [--users 3] [--aec auto|webrtc|speex] [--speex-build system,pyaec] [--quick]

The assistant's answers (the configured portable voice, cached under .cache/echo/) are played
through the real player path (a NullPlayer on a FakeClock behind the ReferenceTap, which places every
block on the reference timeline) and reach the microphone through a generated small-room impulse
response (direct path after 20-120 ms of device delay, a few early reflections, an exponential
diffuse tail of RT60 0.25 s), at 0 to +10 dB above the user. Hidden user utterances (the wake phrase
alone, with a request, and "小智小智，停", other voices made by the wake set's speed/pitch trick)
are mixed in at several places. The same microphone audio is heard with the canceller (``aec_on``),
raw (``aec_off``) and with the mute fallback (``mute``: the wake path is silent during playback
plus the echo tail) by the real portable wake (silero VAD -> Whisper -> pinyin match) and the
follow-up path (VAD -> Whisper). Prints one JSON object ``{"aec_on": {...}, "aec_off": {...},
"mute": {...}, "run": {...}}``; each has erle_db (at the default delay and level), erle_by_condition,
wake_recall_quiet, wake_recall_playback, self_wakes, self_requests, answers, cer_quiet, cer_playback.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from rkvoice.audio.sinks import NullPlayer
from rkvoice.config import Config, load_config
from rkvoice.hear import aec, speexdsp
from rkvoice.hear.echo import EchoFilter, PlayedAudio, ReferenceTap
from tests.support import FakeClock, bench_run, cer
from tests.support.echo import RATE, USER_DBFS, Voices, erle_db, rms, room_ir

DELAYS_MS = (20, 60, 120)
LEVELS_DB = (0.0, 5.0, 10.0)
DEFAULT_DELAY_MS, DEFAULT_LEVEL_DB = 60, 5.0
NOISE_DBFS = -65.0  # the room's noise floor
USER_AT_S = 4.0  # where the user speaks into the playback: the daemon's canceller has heard earlier answers
FOLLOW_UP_EARLY_S = 1.0  # the follow-up window opens this long before the player's last block ends (a stress)
T0 = 1_000 * RATE  # the tick (clock second 1000) where each playback starts

ANSWER_TEMPLATES = [
    "我是小智，{}", "好的，{}", "{}", "小智在这里，{}", "明白了，{}",
]
ANSWER_BODIES = [
    "今天北京晴，最高气温二十五度，适合出门散步。", "已经把客厅的灯关掉了。", "明天早上七点的闹钟设好了。",
    "现在是下午三点二十分。", "这首歌叫做月亮代表我的心。", "我可以帮你查天气、设闹钟和记事情。",
    "一公里等于一千米。", "上海明天有小雨，记得带伞。", "好的，我会提醒你下午开会。", "你的购物清单里有牛奶和面包。",
    "长城全长两万多公里。", "水的沸点是一百摄氏度。",
]
USERS = [  # (text said, the request it holds: "" for the wake phrase alone)
    ("小智小智", ""), ("小智小智，把客厅的灯关掉", "把客厅的灯关掉"), ("小智小智，停", "停"),
    ("小智小智，明天天气怎么样", "明天天气怎么样"),
]
USER_VOICES = ((1.0, -3.0), (0.9, 3.0), (1.1, 1.0))  # (speed, semitones): not the assistant's voice


def answer_texts(n: int) -> list[str]:
    """``n`` answers; every fifth starts 我是小智 and every fifth says 小智在这里 (the name, spoken)."""
    return [ANSWER_TEMPLATES[i % len(ANSWER_TEMPLATES)].format(ANSWER_BODIES[i % len(ANSWER_BODIES)])
            for i in range(n)]


def play(blocks_of: np.ndarray, rate: int, cfg: Config) -> PlayedAudio:
    """Hand the answer to the real player path (20 ms int16 blocks) -> the reference it records."""
    from dataclasses import replace

    from rkvoice.audio.post import to_blocks, to_pcm16

    clock = FakeClock(T0 / RATE)
    played = PlayedAudio(keep_s=len(blocks_of) / rate + 1.0)  # the whole answer: it is written at once
    tap = ReferenceTap(NullPlayer(replace(cfg, audio=replace(cfg.audio, output_rate=rate)), clock), played, clock)
    tap.open()
    for block in to_blocks(blocks_of, rate // 50):
        tap.write(to_pcm16(block))
    tap.close()
    return played


@dataclass
class Case:
    played: PlayedAudio
    echo: np.ndarray
    """The echo at the microphone, from tick T0 on."""
    user: np.ndarray
    """The user's speech at the microphone (zeros when none), same length."""
    noise: np.ndarray
    condition: tuple[int, float]
    request: str | None = None
    """What the user asked (None: no user speech in this case)."""

    @property
    def mic(self) -> np.ndarray:
        mix = self.echo + self.user + self.noise
        peak = float(np.max(np.abs(mix)))
        return (mix * (0.99 / peak if peak > 0.99 else 1.0)).astype(np.float32)  # a mic gain that does not clip


def make_case(played: PlayedAudio, length: int, delay_ms: int, level_db: float, seed: int,
              user: np.ndarray | None = None, at: int = 0) -> Case:
    ref = played.read(T0, length)
    echo = np.convolve(ref, room_ir(delay_ms, seed))[:length]
    user_level = 10 ** (USER_DBFS / 20)
    echo *= user_level * 10 ** (level_db / 20) / max(rms(echo), 1e-9)
    voice = np.zeros(length, np.float32)
    if user is not None:
        part = user[: length - at] * user_level / max(rms(user), 1e-9)
        voice[at : at + len(part)] = part
    noise = np.random.default_rng(seed + 1).standard_normal(length) * 10 ** (NOISE_DBFS / 20)
    return Case(played, echo.astype(np.float32), voice, noise.astype(np.float32), (delay_ms, level_db))


BUILDS: dict[str, Any] = {"system": lambda: speexdsp.SpeexDspCanceller("system"),
                          "pyaec": lambda: speexdsp.SpeexDspCanceller("pyaec"),
                          "pyaec-wrapper": speexdsp.PyaecWrapperCanceller}
"""``--speex-build``: speexdsp from the system (libspeexdsp1) or from the pyaec wheel (driven like the
system's, or through pyaec's own AecNew: the canceller at its 8 kHz constants)."""


def hear(mic: np.ndarray, played: PlayedAudio | None, mode: str, make: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """What the wake path gets: ``mode`` on (the canceller ``make()`` returns), off (raw) or mute (the fallback)."""
    if mode == "off" or played is None:
        return mic, {}
    canceller = make() if mode.startswith("on") else None
    f = EchoFilter(played, canceller, tail_s=0.3)
    out = np.concatenate([f.process(mic[i : i + 512], T0 + i) for i in range(0, len(mic), 512)])
    return out, {"delay_ms": None if f.delay is None else round(f.delay * 1000 / RATE, 1)}


class Listener:
    """The portable wake (AsrMatchWake) and the follow-up path (Segmenter + ASR); decodes cached by audio."""

    def __init__(self, cfg: Config) -> None:
        from bench.wake_recall import SharedDecodes
        from rkvoice.hear.vad import Segmenter
        from rkvoice.hear.whisper_asr import WhisperAsr

        self.cfg = cfg
        self.asr = SharedDecodes(WhisperAsr(cfg))
        self.asr.load()
        self._segmenter = Segmenter

    def wake(self, audio: np.ndarray) -> tuple[bool, str, str]:
        """(woke, request, heard) for ``audio`` heard by the wake engine (the assistant speaking)."""
        from rkvoice.hear.wake import AsrMatchWake

        engine = AsrMatchWake(self.cfg, self.asr)
        engine.load()
        hit = None
        for i in range(0, len(audio), 512):
            hit = hit or engine.accept(audio[i : i + 512])
        hit = hit or engine.flush()
        return (True, hit.request, hit.text) if hit else (False, "", engine.last_text)

    def follow_up(self, audio: np.ndarray) -> list[str]:
        """The requests the follow-up window would take from ``audio`` (transcripts with words)."""
        seg = self._segmenter(self.cfg)
        seg.load()
        found = []
        for i in range(0, len(audio) + 1, 512):
            segments = seg.accept(audio[i : i + 512]) if i < len(audio) else seg.flush()
            for s in segments:
                text = self.asr.transcribe(s.samples).strip()
                if any(ch.isalnum() for ch in text):
                    found.append(text)
        return found


def run(cfg: Config, n_answers: int, n_users: int, setting: str, builds: list[str]) -> dict[str, Any]:
    voices = Voices(cfg)
    listener = Listener(cfg)
    texts = answer_texts(n_answers)
    answers = [voices.assistant(t) for t in texts]
    conditions = [(d, lv) for d in DELAYS_MS for lv in LEVELS_DB]
    makers = {"on": lambda: aec.create_canceller(setting)} if not builds else \
        {("on" if i == 0 else f"on_{b}"): BUILDS[b] for i, b in enumerate(builds)}
    modes = (*makers, "off", "mute")
    res: dict[str, dict[str, Any]] = {m: {"woke_quiet": 0, "woke_playback": 0, "cer_quiet": [], "cer_playback": [],
                                          "self_wakes": 0, "self_requests": 0, "erle": {}, "heard": [], "requests_heard": []}
                                   for m in modes}
    # 1. the user during playback (and the same utterance in quiet), conditions in turn
    users = [(text, req, v) for v in USER_VOICES[:n_users] for text, req in USERS]
    cases = 0
    for k, (text, req, (speed, semi)) in enumerate(users):
        voice = voices.user(text, speed, semi)
        for j in range(2):  # each utterance under two conditions, all nine in turn
            delay, level = conditions[(2 * k + j) % len(conditions)]
            parts = [answers[(2 * k + j + m) % len(answers)] for m in range(3)]  # three answers in a row
            rate = parts[0][1]
            audio = np.concatenate([a for a, _r in parts])
            played = play(audio, rate, cfg)
            length = int((len(audio) / rate + 1.0) * RATE)
            at = min(int(USER_AT_S * RATE), length - len(voice) - RATE // 2)
            case = make_case(played, length, delay, level, seed=1000 * k + j, user=voice, at=at)
            quiet = (case.user + case.noise).astype(np.float32)
            cases += 1
            for mode in modes:
                for where, audio_in, pl in (("quiet", quiet, None), ("playback", case.mic, played)):
                    heard_audio, _ = hear(audio_in, pl, mode, makers.get(mode))
                    woke, request, heard = listener.wake(heard_audio)
                    res[mode][f"woke_{where}"] += int(woke)
                    if req:
                        res[mode][f"cer_{where}"].append(min(1.0, cer(req, request)) if woke else 1.0)
                        res[mode]["requests_heard"].append([where, req, list(case.condition), request])
                    if where == "playback" and not woke:
                        res[mode]["heard"].append([text, list(case.condition), heard])
    # 2. the assistant's own answers alone: ERLE, self-wakes, self-requests
    for i, (audio, rate) in enumerate(answers):
        played = play(audio, rate, cfg)
        delay, level = (DEFAULT_DELAY_MS, DEFAULT_LEVEL_DB) if i % 3 == 0 else conditions[i % len(conditions)]
        length = int((len(audio) / rate + 1.0) * RATE)
        case = make_case(played, length, delay, level, seed=50_000 + i)
        for mode in modes:
            heard_audio, info = hear(case.mic, played, mode, makers.get(mode))
            skip = 2 * RATE  # the canceller's first look at the room (and the delay estimate)
            if mode != "mute" and length > skip + RATE:
                residual = heard_audio[skip:] - case.noise[skip:] if mode == "off" else heard_audio[skip:]
                res[mode]["erle"].setdefault(f"{delay}ms/+{level:g}dB", []).append(
                    erle_db(case.echo[skip:], residual))
            woke, _req, heard = listener.wake(heard_audio)
            if woke:
                res[mode]["self_wakes"] += 1
                res[mode]["heard"].append(["self-wake", texts[i], heard])
            opens = max(0, (played.end_tick or T0) - T0 - int(FOLLOW_UP_EARLY_S * RATE))
            requests = listener.follow_up(heard_audio[opens:])
            if requests:
                res[mode]["self_requests"] += 1
                res[mode]["heard"].append(["self-request", texts[i], requests])
    out: dict[str, Any] = {}
    for mode, r in res.items():
        by_cond = {c: round(float(np.mean(v)), 1) for c, v in sorted(r["erle"].items())}
        default = f"{DEFAULT_DELAY_MS}ms/+{DEFAULT_LEVEL_DB:g}dB"
        on = mode in makers
        out[{"off": "aec_off", "mute": "mute"}.get(mode, f"aec_{mode}")] = {
            "canceller": ("speex" if builds else aec.resolve(setting)) if on else mode,
            "build": type(makers[mode]()).__name__ if on else None,
            "erle_db": by_cond.get(default, 0.0) if on else (0.0 if mode == "off" else None),
            "erle_by_condition": by_cond if on else {},
            "wake_recall_quiet": round(r["woke_quiet"] / cases, 3),
            "wake_recall_playback": round(r["woke_playback"] / cases, 3),
            "self_wakes": r["self_wakes"], "self_requests": r["self_requests"], "answers": len(answers),
            "answers_saying_name": sum("小智" in t for t in texts),
            "cer_quiet": round(float(np.mean(r["cer_quiet"])), 3) if r["cer_quiet"] else None,
            "cer_playback": round(float(np.mean(r["cer_playback"])), 3) if r["cer_playback"] else None,
            "user_cases": cases, "requests": len(r["cer_quiet"]), "misses_and_self_hearings": r["heard"][:20],
            "requests_heard": r["requests_heard"],
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=50, help="assistant answers played alone (default 50)")
    ap.add_argument("--users", type=int, default=3, help="user voices (x4 utterances, default 3)")
    ap.add_argument("--aec", default="auto", choices=["auto", "webrtc", "speex", "external"])
    ap.add_argument("--speex-build", default="", help="speexdsp builds side by side instead of --aec: "
                    f"some of {','.join(BUILDS)} (aec_on is the first, aec_on_<build> the others)")
    ap.add_argument("--quick", action="store_true", help="6 answers, one user voice (a smoke run)")
    args, run_info = bench_run("echo", ap)
    cfg = load_config()
    t0 = time.monotonic()
    n_answers, n_users = (6, 1) if args.quick else (args.answers, args.users)
    builds = [b for b in args.speex_build.split(",") if b]
    if unknown := set(builds) - set(BUILDS):
        ap.error(f"unknown --speex-build {sorted(unknown)}: choose from {', '.join(BUILDS)}")
    result = run(cfg, n_answers, n_users, args.aec, builds)
    result["run"] = {"wall_s": round(time.monotonic() - t0, 1), "default_delay_ms": DEFAULT_DELAY_MS,
                     "default_level_db": DEFAULT_LEVEL_DB, "delays_ms": DELAYS_MS, "levels_db": LEVELS_DB}
    run_info.emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
