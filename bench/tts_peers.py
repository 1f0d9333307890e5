"""First audio on the English Piper voice: rkvoice's Speaker vs two peers on the same voice, one run.

    py312/bin/python -m bench.tts_peers [--runs 7] [--set KEY=VALUE ...]

The same English answer, the same model file (models/portable/piper-joe/model.onnx), runs
interleaved so all three see the same machine load, medians:

- ``rkvoice``: the product's Speaker (the answer cut into pieces, the first one synthesised while the
  rest waits, in frame windows that go out as they are made: rkvoice.tts.piper_stream; post-processing
  to the player's rate) with the ``vits`` engine on the Piper voice: text handed to the speaker ->
  first PCM handed to the player (a null sink that drains at once);
- ``piper``: piper-tts's own ``PiperVoice.synthesize`` generator (one chunk per sentence, its own
  onnxruntime session with default threads): call -> first chunk;
- ``sherpa_onnx``: sherpa-onnx's OfflineTts on the whole text (how a whole-text server answers; phonemes
  from the same espeak-ng, as the engine does): call -> the audio.

Prints one JSON object: the medians, rkvoice's first piece, its audio length and that of its first
part (the first PCM handed to the player), the longest silence a real-time listener would hear in
rkvoice's answer (rkvoice.timeline.max_gap_ms, over all runs), the ratio of
rkvoice to the better peer (the goal: <= 0.12), and the load average.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rkvoice.config import Config, load_config, parse_override
from rkvoice.pieces import piece_chars
from rkvoice.speaker import Speaker
from rkvoice.timeline import Ev
from rkvoice.tts.vits import VitsTts, read_onnx_metadata
from tests.support import bench_run, median
from tests.support.sink import sink_speaker, speak_through

TEXT = ("Thanks for asking, the weather today is sunny and warm with a light breeze from the west, "
        "so it is a good day for a walk in the park. Remember to bring some water and a hat.")


def piper_voice(cfg: Config) -> Any:
    """piper-tts's PiperVoice on the installed model: its JSON config rebuilt from the sherpa metadata
    and tokens.txt (the same phoneme ids the voice was trained with)."""
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    d = cfg.models.path / "portable" / "piper-joe"
    meta = read_onnx_metadata(d / "model.onnx")
    ids: dict[str, list[int]] = {}
    for line in (d / "tokens.txt").read_text(encoding="utf-8").splitlines():
        if line.strip():
            sym, _, n = line.rpartition(" ")
            ids[sym or " "] = [int(n)]
    config = PiperConfig.from_dict({
        "num_symbols": len(ids), "num_speakers": 1, "audio": {"sample_rate": int(meta["sample_rate"])},
        "espeak": {"voice": meta.get("voice") or "en-us"}, "phoneme_id_map": ids,
        "inference": {"noise_scale": 0.667, "length_scale": 1.0, "noise_w": 0.8}})
    session = onnxruntime.InferenceSession(str(d / "model.onnx"), providers=["CPUExecutionProvider"])
    return PiperVoice(config=config, session=session)


def rkvoice_first_audio(speaker: Speaker) -> tuple[float, str, float, float, float]:
    """ms from the text to the first PCM at the player; the first piece, its audio seconds and
    those of the first part handed to the player; the longest gap in the answer (ms)."""
    tl = speak_through(speaker, TEXT, timeout=120)
    first = tl.find(Ev.SYNTH_END)[0]
    piece = str(tl.find(Ev.CHUNK)[0].get("text"))
    part = float(tl.find(Ev.PLAY_CHUNK)[0].get("audio_s"))
    summary = tl.summary()
    return float(summary["first_audio_ms"]), piece, float(first.get("audio_s")), part, float(summary["max_gap_ms"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args, run = bench_run("tts_peers", ap)
    cfg = load_config([{"tts": {"vits_voice": "piper-joe"}}, *(parse_override(s) for s in args.set)])
    engine = VitsTts(cfg, "piper-joe")
    engine.load()
    voice = piper_voice(cfg)
    next(iter(voice.synthesize("Hello.")))  # warm-up, like the engine's own
    times: dict[str, list[float]] = {"rkvoice": [], "piper": [], "sherpa_onnx": []}
    piece, piece_audio_s, part_audio_s, gaps = "", 0.0, 0.0, []
    with sink_speaker(engine, cfg) as speaker:
        for _ in range(args.runs):
            ms, piece, piece_audio_s, part_audio_s, gap = rkvoice_first_audio(speaker)
            times["rkvoice"].append(ms)
            gaps.append(gap)
            t = time.perf_counter()
            next(iter(voice.synthesize(TEXT)))
            times["piper"].append((time.perf_counter() - t) * 1000.0)
            t = time.perf_counter()
            engine.generate(TEXT)
            times["sherpa_onnx"].append((time.perf_counter() - t) * 1000.0)
    med = {k: median(v) for k, v in times.items()}
    better = min(med["piper"], med["sherpa_onnx"])
    out = {"text": TEXT, "runs": args.runs, "first_audio_ms": med, "raw_ms": {k: [round(x, 1) for x in v]
                                                                             for k, v in times.items()},
           "rkvoice_first_piece": piece, "rkvoice_first_piece_audio_s": round(piece_audio_s, 3),
           "rkvoice_first_part_audio_s": round(part_audio_s, 3), "rkvoice_max_gap_ms": round(max(gaps), 1),
           "ratio_to_better_peer": round(med["rkvoice"] / better, 3), "goal_ratio": 0.12,
           "tts_threads": cfg.tts.threads, "piece_chars": list(piece_chars(cfg, engine))}
    run.emit(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
