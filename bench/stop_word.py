"""Stop word latency: from the end of 停 / 别说了 to the playback cleared, while a reply plays.

    py312/bin/python -m bench.stop_word [--quick] [--out FILE] [-v]

Portable profile: the satellite core (tests/support/stop_rig.StopRig: the real asr-match wake engine and
the stop word's engine on Whisper base, every frame heard inline) with a reply streaming. Each clip is
the portable voice saying the phrase at a speed and pitch (tests/support/wake_set.Maker), after 0.8 s
of silence and before 1.5 s. Per clip:

- ``audio_ms``: the audio time of the frame the stop was decided at minus the word's end (the last 10
  ms within 35 dB of its loudest): the segmenter's share, the same on any machine;
- ``asr_ms``: the stop word engine's decoding of that segment (plain decode, and the primed looks when
  the plain one misses), wall time on this machine;
- ``total_ms`` = audio_ms + asr_ms: word end -> cleared for a microphone read in real time with the
  hear thread free (the frame that closes the segment is heard, then decoded; the clear is immediate).

``recall``: stops / clips; ``false_stops``: stops on the negatives (short words and sentences that are
no stop phrase), said the same way while a reply plays. Medians over the clips.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rkvoice.config import load_config
from rkvoice.hear.whisper_asr import WhisperAsr
from tests.support import bench_run, median
from tests.support.stop_rig import StopRig, silence, word_end_s
from tests.support.wake_set import UNRELATED, Maker

PHRASES = ("停", "别说了")
VOICES = [(1.0, 0.0), (0.8, 0.0), (1.2, 0.0), (1.0, -3.0), (1.0, 3.0), (0.9, 2.0), (1.1, -2.0)]
QUICK_VOICES = VOICES[:3]
NEGATIVES = ["嗯", "好的", "对", "听", "天", "定", "行", "挺好", "谢谢", "再见", "停下来吧我们走", *UNRELATED[:4]]
LEAD_S, TRAIL_S = 0.8, 1.5


def clip_run(rig: StopRig, speech: np.ndarray) -> dict[str, Any]:
    """One clip said while a reply plays: whether it stopped it, and when."""
    stream = rig.play_reply()
    hits = len(rig.engine.hits)
    at = rig.hear(np.concatenate([silence(LEAD_S), speech, silence(TRAIL_S)]))
    if not rig.stops:
        rig.playback.clear("next clip")
        stream.cut = True
        return {"stopped": False, "heard": rig.engine.last_text}
    end = at + LEAD_S + word_end_s(speech)
    audio_ms = (rig.stops[0] - end) * 1000.0
    asr_ms = rig.engine.hits[hits].asr_ms
    rig.stops.clear()
    return {"stopped": True, "heard": rig.engine.last_text, "audio_ms": round(audio_ms, 1),
            "asr_ms": round(asr_ms, 1), "total_ms": round(audio_ms + asr_ms, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 voices instead of 7, no negatives")
    args, run = bench_run("stop_word", ap)
    cfg = load_config()
    maker = Maker(cfg)
    asr = WhisperAsr(cfg)
    asr.load()
    t0 = time.monotonic()
    clips: list[dict[str, Any]] = []
    for phrase in PHRASES:
        for speed, semitones in QUICK_VOICES if args.quick else VOICES:
            rig = StopRig(cfg, asr)  # a fresh core per clip: one clip's state never reaches the next
            try:
                clips.append({"phrase": phrase, "speed": speed, "semitones": semitones,
                              **clip_run(rig, maker.voice(phrase, speed, semitones))})
            finally:
                rig.close()
    false_stops: list[str] = []
    for text in [] if args.quick else NEGATIVES:
        rig = StopRig(cfg, asr)
        try:
            if clip_run(rig, maker.voice(text))["stopped"]:
                false_stops.append(text)
        finally:
            rig.close()
    stopped = [c for c in clips if c["stopped"]]
    out: dict[str, Any] = {
        "recall": f"{len(stopped)}/{len(clips)}",
        **{f"{key}_p50": round(median([c[key] for c in stopped]), 1) if stopped else None
           for key in ("audio_ms", "asr_ms", "total_ms")},
        **{f"{phrase}_total_ms_p50": round(median([c["total_ms"] for c in stopped if c["phrase"] == phrase]), 1)
           if any(c["phrase"] == phrase for c in stopped) else None for phrase in PHRASES},
        "false_stops": f"{len(false_stops)}/{0 if args.quick else len(NEGATIVES)}",
        "false_stop_texts": false_stops,
        "wall_s": round(time.monotonic() - t0, 1),
        "clips": clips,
    }
    run.emit(out, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
