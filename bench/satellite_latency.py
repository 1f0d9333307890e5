"""The satellite's latency through Home Assistant's pipeline, against the real HA (tests/ha_home.py).

    py312/bin/python -m bench.satellite_latency [--runs 10] [--text 打开大灯] [--no-esphome] [--out satellite.json] [-v]

HA 2026.2.3 on loopback with the test home; rkvoice's Wyoming services server is its pipeline's
speech-to-text (Whisper base) and text-to-speech (the portable voice), HA's own agent answers, and the
satellite (rkvoice/satellite) runs on the portable wake engine (asr-match on the same Whisper). Each run
says 小智小智, a 1 s pause and ``--text`` into the satellite's microphone in real time
(tests/support/satellite_home.py) and waits until HA's reply has played on the board (a real-time null
player). Over ``--runs`` runs (at least 10, after one warm-up run):

- ``satellite_p50_ms``: end of speech (the request's last loud sample heard) -> the first block of HA's
  reply handed to the board's player, as the product runs: the board's VAD ends the request
  (``audio-stop`` after ``hear.trailing_silence_ms``) unless HA's VAD does first.
- ``ha_vad_p50_ms``: the same with HA's VAD alone deciding the end (a satellite that streams until
  HA says it heard enough: the naive way), on the same HA.
- its parts: ``*_end_to_transcript_p50_ms`` (end of speech -> HA's ``transcript``: the VAD deciding
  the end, then the ASR) and ``*_transcript_to_audio_p50_ms`` (HA's agent, the synthesis, the audio's
  way back), ``*_end_decided_p50_ms`` (end of speech -> the end decided: the satellite's ``audio-stop``,
  or HA's ``voice-stopped``, whichever came first). The two ways take turns, request by request, so
  both see the same load.
- ``esphome_p50_ms`` (and its parts, ``esphome_*``): the same request to the ESPHome device
  (``satellite.protocol: esphome``, tests/support/esphome_home.py) added to the same HA by its esphome
  config flow, the board's VAD ending the request: the two links side by side, in turns with the two
  ways above. HA's reply reaches the ESPHome device as a URL (WAV, played as it arrives), the Wyoming
  satellite's as streamed audio. ``--no-esphome``: the Wyoming satellite alone.
- ``local_asr_p50_ms``: one Whisper decode of the request alone, timed right after on the same
  engine: the speech-to-text share of the figures (the rest is the end-of-speech wait and HA).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

from rkvoice.config import load_config
from rkvoice.hear.whisper_asr import WhisperAsr
from rkvoice.tts.registry import create_tts
from tests.ha_home import HomeHa
from tests.support import bench_run, median
from tests.support.esphome_home import esphome_home
from tests.support.satellite_home import SatelliteHome, satellite_home, spoken

TEXT = "打开大灯"
"""HA's agent switches the light by its alias (Whisper base hears the voice's 客厅灯 as 客厅东)."""


PREFIX = {"board": "satellite", "ha": "ha_vad", "esphome": "esphome"}
"""The JSON keys' prefix of each way."""


def measure(home: SatelliteHome, runs: int, text: str = TEXT, esphome: SatelliteHome | None = None) -> dict[str, Any]:
    """``runs`` spoken requests each way after one warm-up (each link), the ways taking turns (the same
    load for all): the figures of the module docstring; ``esphome``: the ESPHome device on the same HA."""
    home.ask(text)  # warm-up: the first decode, HA's first pipeline run
    if esphome is not None:
        esphome.ask(text)
    mic = home.satellite.mic
    vad = mic.segmenter
    ways: dict[str, list[tuple[float, float | None, float | None, str, float | None]]] = {"board": [], "ha": []}
    if esphome is not None:
        ways["esphome"] = []
    try:
        for _ in range(runs):
            for way in ways:
                mic.segmenter = vad if way == "board" else None  # "ha": HA's VAD alone ends the request
                ways[way].append(timed(esphome if way == "esphome" and esphome is not None else home, text))
    finally:
        mic.segmenter = vad
    audio = spoken(home.voice, text)
    decodes = []
    for k in range(3):
        t0 = time.monotonic()
        home.asr.transcribe(audio + (k + 1) * 1e-5)  # its own input each: no kept encoding
        decodes.append((time.monotonic() - t0) * 1000.0)
    out: dict[str, Any] = {}
    for way, rows in ways.items():
        prefix = PREFIX[way]
        out[f"{prefix}_p50_ms"] = median(r[0] for r in rows)
        out[f"{prefix}_ms"] = [round(r[0], 1) for r in rows]
        out[f"{prefix}_end_to_transcript_p50_ms"] = median(r[1] for r in rows if r[1] is not None)
        out[f"{prefix}_transcript_to_audio_p50_ms"] = median(r[2] for r in rows if r[2] is not None)
        out[f"{prefix}_end_decided_p50_ms"] = median(r[4] for r in rows if r[4] is not None)
    out["transcripts"] = sorted({r[3] for rows in ways.values() for r in rows})
    out["satellite_runs"] = runs
    out["local_asr_p50_ms"] = median(decodes)
    return out


def timed(home: SatelliteHome, text: str) -> tuple[float, float | None, float | None, str, float | None]:
    """One request: (end of speech -> first reply audio, -> transcript, transcript -> first audio) in ms,
    the transcript, and end of speech -> the end decided (``audio-stop`` sent, or HA's ``voice-stopped``)."""
    run = home.ask(text)
    end = home.mic.speech_end_at
    assert end is not None and run.reply is not None and run.reply.first_audio_at is not None
    heard = None if run.heard_at is None else (run.heard_at - end) * 1000.0
    after = None if run.heard_at is None else (run.reply.first_audio_at - run.heard_at) * 1000.0
    decided = None if run.speech_end_at is None else (run.speech_end_at - end) * 1000.0
    time.sleep(0.5)
    return (run.reply.first_audio_at - end) * 1000.0, heard, after, str(run.transcript), decided


def satellite_p50(ha: HomeHa, runs: int) -> float:
    """For bench/home_latency.py: ``satellite_p50_ms`` on its running HA."""
    asr, voice = load_engines()
    with tempfile.TemporaryDirectory(prefix="satellite-latency-") as tmp, \
            satellite_home(Path(tmp), asr, voice, ha=ha) as home:
        return float(measure(home, runs)["satellite_p50_ms"] or 0.0)


def load_engines() -> tuple[Any, Any]:
    cfg = load_config()
    asr = WhisperAsr(cfg)
    asr.load()
    voice = create_tts(cfg, "fastspeech2")
    voice.load()
    return asr, voice


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10, help="measured requests (at least 10)")
    parser.add_argument("--text", default=TEXT, help="the request said after the wake phrase")
    parser.add_argument("--no-esphome", action="store_true", help="the Wyoming satellite alone (no ESPHome device)")
    args, run = bench_run("satellite_latency", parser, argv)
    if args.runs < 10:
        parser.error(f"--runs {args.runs}: the figure needs at least 10 runs")
    asr, voice = load_engines()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="satellite-latency-")))
        home = stack.enter_context(satellite_home(tmp, asr, voice))
        esphome = None if args.no_esphome else stack.enter_context(
            esphome_home(tmp / "esphome", asr, voice, ha=home.ha, services=False, name="rkvoice-esphome"))
        result = {"ha_version": home.ha.rest("GET", "/api/config")["version"], "text": args.text,
                  **measure(home, args.runs, args.text, esphome)}
    run.emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
