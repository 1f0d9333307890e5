"""Streaming synthesis of a Piper voice: the first audio after the text encoder and one small
decoder window, not after the whole piece.

models/prepare_piper.py cuts the VITS graph in three (SPLIT): ``text.onnx`` (phoneme ids, lengths,
scales -> the flow's input z_p, one column per audio frame, and the frame mask), ``flow.onnx``
(z_p -> z) and ``decoder.onnx`` (HiFiGAN, z -> HOP samples per frame). Both the flow and the
decoder are convolutions along the frames, so z is made and decoded in windows: the first window
FIRST_FRAMES long, each next one twice as long (it is made while the previous one plays), each run
with FLOW_CONTEXT / DEC_CONTEXT frames of context on both sides that are cut off again. With that
context the windows join to the whole piece's decode (44 dB or closer; tests/test_piper_stream.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.errors import RkvoiceError, Stage
from rkvoice.npu.runtime import tts_session

SPLIT = ("text.onnx", "flow.onnx", "decoder.onnx")
HOP = 256
"""Audio samples per frame (the decoder's upsampling)."""
FLOW_CONTEXT = 16
DEC_CONTEXT = 8
"""Frames of context each side of a flow / decoder window. The joined windows are 44-60 dB from the
whole decode on five sentences (24 and 10: 82-106 dB, at 10 % more work in the first window; 12 and
8: 27-42 dB): far below the difference the voice's sampled noise makes between two takes."""
FIRST_FLOW_CONTEXT = 8
"""Frames of right context of the first window's flow; its z past the window's end (the decoder's
right context) is made again, with FLOW_CONTEXT, for the second window: 3-4 ms less CPU before the
first sound (text encoder + first window 58.8 -> 54.6-56.1 ms), and the joined windows 52-64 dB from
the whole decode on five sentences (16, z kept: 41-64 dB; 6: 31 dB)."""
FIRST_FRAMES = 12
"""The first window (140 ms): past the voice's lead-in (onset at frames 5-10), so it holds speech."""
MAX_FRAMES = 96
MIN_LAST = 16
"""A shorter rest joins the window before it (fewer calls; the tail trim sees the whole tail)."""


def frame_windows(total: int, first: int = FIRST_FRAMES, most: int = MAX_FRAMES) -> list[tuple[int, int]]:
    """[start, end) frame windows covering ``total``: ``first`` long, then doubling up to ``most``."""
    out: list[tuple[int, int]] = []
    start, size = 0, first
    while start < total:
        end = total if total - (start + size) < MIN_LAST else start + size
        out.append((start, end))
        start, size = end, min(most, size * 2)
    return out


def phoneme_ids(phonemes: str, ids: dict[str, int]) -> list[int]:
    """Piper's ids: ^, then each phoneme followed by the pad _, then $ (piper.phoneme_ids.phonemes_to_ids);
    phonemes the voice lacks are skipped, as there."""
    out = [ids["^"], ids["_"]]
    for p in phonemes:
        if p in ids:
            out += [ids[p], ids["_"]]
    return out + [ids["$"]]


class PiperStream:
    """The three split graphs of one Piper voice folder, run with ``threads`` intra-op threads."""

    def __init__(self, folder: Path, threads: int, fix: str) -> None:
        self._run: list[Any] = [tts_session(folder / name, threads, "streaming graph", fix) for name in SPLIT]
        text, flow, dec = self._run
        shapes = [len(text.get_inputs()), len(text.get_outputs()), len(flow.get_inputs()), len(dec.get_inputs())]
        if shapes != [3, 2, 2, 1]:
            raise RkvoiceError(Stage.TTS, "corrupt-model", f"streaming graphs in {folder} do not fit together: {fix}")
        self._flow_in = [i.name for i in flow.get_inputs()]
        self._dec_in = dec.get_inputs()[0].name

    def encode(self, ids: list[int], scales: tuple[float, float, float]) -> np.ndarray:
        """The flow's input z_p (1, channels, frames) for one sentence's phoneme ids; scales are
        (noise_scale, length_scale, noise_w)."""
        x = np.asarray([ids], dtype=np.int64)
        feeds = {"input": x, "input_lengths": np.asarray([x.shape[1]], dtype=np.int64),
                 "scales": np.asarray(scales, dtype=np.float32)}
        return np.asarray(self._run[0].run(None, feeds)[0], dtype=np.float32)

    def flow(self, zp: np.ndarray) -> np.ndarray:
        mask = np.ones((1, 1, zp.shape[2]), dtype=np.float32)
        return np.asarray(self._run[1].run(None, {self._flow_in[0]: zp, self._flow_in[1]: mask})[0])

    def decode(self, z: np.ndarray) -> np.ndarray:
        return np.asarray(self._run[2].run(None, {self._dec_in: z}), dtype=np.float32).reshape(-1)

    def windows(self, zp: np.ndarray, first: int = FIRST_FRAMES) -> Iterator[tuple[np.ndarray, bool]]:
        """z_p's audio, one array per frame window (frame_windows), each as soon as made, with
        "is it the last"."""
        total = zp.shape[2]
        z = np.empty_like(zp)
        made = 0  # z is known for frames [0, made)
        for n, (start, end) in enumerate(frame_windows(total, first)):
            need = min(total, end + DEC_CONTEXT)
            if need > made:
                lo, hi = max(0, made - FLOW_CONTEXT), min(total, need + (FLOW_CONTEXT if n else FIRST_FLOW_CONTEXT))
                z[:, :, made:need] = self.flow(zp[:, :, lo:hi])[:, :, made - lo:need - lo]
                made = need if n else end
            lo = max(0, start - DEC_CONTEXT)
            yield self.decode(z[:, :, lo:need])[(start - lo) * HOP:(end - lo) * HOP], end == total
