"""The Chinese turn-end set: requests of every kind the assistant answers, said by an installed voice,
whole and with a pause where people pause (bench/turn_end.py, bench/endpoint.py, tests).

Each request is written with ``|`` where a speaker may stop to think ("帮我把|客厅灯打开"). ``whole``:
said without a break. ``paused``: said with a comma at the mark (the voice's continuing intonation, as
a speaker who has not finished), cut at the comma's own quiet gap, and the rest put back after
``pause_ms`` of silence (300-800 ms): a request that goes on after a pause. ``cut``: the same audio up
to the pause and nothing after (the speaker stopped mid-sentence). Clips are 16 kHz float32, no
leading or trailing silence beyond the voice's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

RATE = 16000

REQUESTS: tuple[tuple[str, str], ...] = (
    # tools
    ("tool", "现在几点"),
    ("tool", "今天|几号"),
    ("tool", "明天早上|七点叫我起床"),
    ("tool", "帮我设一个|十分钟的计时器"),
    ("tool", "提醒我|下午三点|开会"),
    ("tool", "把温度调到二十|六度"),
    ("tool", "定一个|十五分钟的闹钟"),
    ("tool", "北京|明天的天气"),  # a terse request: a noun phrase alone, about what the assistant reports
    # home
    ("home", "帮我把|客厅灯打开"),
    ("home", "空调调到|二十六度"),
    ("home", "把卧室的灯|关掉"),
    ("home", "打开|客厅的空调"),
    ("home", "关掉所有的灯"),
    ("home", "客厅的温度"),
    # questions for the LLM
    ("llm", "我想问一下|长城有多长"),
    ("llm", "那个|就是|明天会下雨吗"),
    ("llm", "给我讲一个|关于月亮的故事"),
    ("llm", "为什么|天空是蓝色的"),
    ("llm", "北京有哪些|好玩的地方"),
    # Chinese with English words
    ("mixed", "帮我打开|Spotify"),
    ("mixed", "用Python|写一个排序"),
    ("mixed", "播放|Taylor Swift的歌"),
    ("mixed", "我的iPhone|没电了怎么办"),
)
QUICK = ("现在几点", "帮我把|客厅灯打开", "空调调到|二十六度", "我想问一下|长城有多长", "用Python|写一个排序")
PAUSES_MS = (300, 500, 800)


@dataclass(frozen=True)
class Clip:
    name: str
    kind: str
    """tool, home, llm or mixed: what would answer it."""
    text: str
    """The request as written (``|`` at its pauses)."""
    shape: str
    """whole, paused or cut (see the module)."""
    audio: np.ndarray
    speech_s: float
    """Where the request's speech ends in the clip (its last loud 20 ms)."""
    pause_ms: int = 0
    pause_at_s: float = 0.0
    """paused: where the pause starts."""
    speed: float = 1.0


def quiet_runs(x: np.ndarray, below_db: float = 40.0) -> list[tuple[int, int]]:
    """Sample spans of 20 ms frames quieter than the loudest frame by ``below_db``."""
    hop = RATE // 50
    n = len(x) // hop
    if n == 0:
        return []
    level = 20 * np.log10(np.sqrt((x[: n * hop].reshape(n, hop) ** 2).mean(1)) + 1e-9)
    quiet = level < level.max() - below_db
    runs, i = [], 0
    while i < n:
        if quiet[i]:
            j = i
            while j < n and quiet[j]:
                j += 1
            runs.append((i * hop, j * hop))
            i = j
        else:
            i += 1
    return runs


def speech_end(x: np.ndarray) -> int:
    """The sample after the last loud 20 ms frame."""
    runs = quiet_runs(x)
    return runs[-1][0] if runs and runs[-1][1] >= len(x) - RATE // 50 else len(x)


class Voice:
    """A loaded installed voice saying text at a speed, resampled to 16 kHz."""

    def __init__(self, name: str, engine: Any) -> None:
        self.name = name
        self.engine = engine

    def say(self, text: str, speed: float = 1.0) -> np.ndarray:
        import soxr

        audio, rate = self.engine.generate(text, speed=speed)
        x = np.asarray(audio, dtype=np.float32).reshape(-1)
        return soxr.resample(x, rate, RATE, quality="HQ").astype(np.float32) if rate != RATE else x


def _gap_near(audio: np.ndarray, at: int) -> tuple[int, int] | None:
    """The inner quiet gap of ``audio`` nearest to sample ``at`` (the comma's pause)."""
    end = speech_end(audio)
    inner = [(a, b) for a, b in quiet_runs(audio) if a > RATE // 10 and b < end]
    return min(inner, key=lambda r: abs(r[0] - at)) if inner else None


def clips_for(voice: Voice, text: str, kind: str, speed: float = 1.0,
              pauses: tuple[int, ...] = PAUSES_MS) -> list[Clip]:
    """The clips of one request: whole, and for each of its marks cut and paused (each pause)."""
    parts = text.split("|")
    whole = voice.say("".join(parts), speed)
    out = [Clip(f"{voice.name}/{speed}/{''.join(parts)}/whole", kind, text, "whole", whole,
                speech_end(whole) / RATE, speed=speed)]
    commas = voice.say("，".join(parts), speed)
    for k in range(1, len(parts)):
        head = voice.say("，".join(parts[:k]) + "，", speed)
        gap = _gap_near(commas, speech_end(head))
        if gap is None:
            continue
        # each earlier mark is said as written (comma), only this one becomes the pause
        before, after = commas[: gap[0]], commas[gap[1]:]
        tag = f"{voice.name}/{speed}/{'|'.join(parts[:k])}|"
        out.append(Clip(tag + "cut", kind, text, "cut", before, speech_end(before) / RATE, speed=speed))
        for ms in pauses:
            audio = np.concatenate([before, np.zeros(RATE * ms // 1000, np.float32), after])
            out.append(Clip(f"{tag}{ms}ms", kind, text, "paused", audio, speech_end(audio) / RATE, ms,
                            len(before) / RATE, speed))
    return out


def requests(quick: bool = False, kinds: tuple[str, ...] = ("tool", "home", "llm", "mixed")) -> list[tuple[str, str]]:
    return [(k, t) for k, t in REQUESTS if k in kinds and (not quick or t in QUICK)]
