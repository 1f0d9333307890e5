"""Streaming synthesis of the Piper voice (rkvoice.tts.piper_stream, VitsTts.stream, Pieces.streamed):
windows, ids, the split graphs' decode against the whole one, the streamed piece against the whole
piece's post-processing, and the errors for missing or corrupt split files."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from rkvoice.audio.post import prepare_piece
from rkvoice.config import ROOT, load_config
from rkvoice.errors import RkvoiceError
from rkvoice.pieces import Pieces
from rkvoice.timeline import Ev, Timeline
from rkvoice.tts import piper_stream, vits
from rkvoice.turn import Turn
from tests.support import FakeClock

CFG = load_config()
VOICE = vits.VOICES["piper-joe"].dir(CFG)
HAVE_VOICE = (VOICE / "model.onnx").is_file() and (VOICE / "tokens.txt").is_file()
needs_voice = pytest.mark.skipif(not HAVE_VOICE, reason="piper-joe voice not installed (run ./install.sh)")


def snr_db(ref: np.ndarray, x: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / max(1e-30, np.sum((ref - x) ** 2.0))))


def test_frame_windows_cover_every_frame_once_first_short_then_doubling():
    for total in (1, 11, 12, 27, 28, 100, 263, 700):
        w = piper_stream.frame_windows(total)
        assert w[0][0] == 0 and w[-1][1] == total
        assert all(a[1] == b[0] for a, b in zip(w, w[1:]))
        sizes = [e - s for s, e in w]
        assert sizes[0] == min(total, piper_stream.FIRST_FRAMES) or len(w) == 1
        assert all(n <= piper_stream.MAX_FRAMES + piper_stream.MIN_LAST for n in sizes)
        assert len(w) == 1 or sizes[-1] >= piper_stream.MIN_LAST
    assert [e - s for s, e in piper_stream.frame_windows(200)] == [12, 24, 48, 96, 20]
    assert [e - s for s, e in piper_stream.frame_windows(190)] == [12, 24, 48, 106]  # a short rest joins


def test_phoneme_ids_are_pipers():
    from piper.phoneme_ids import phonemes_to_ids

    ids = {"_": 0, "^": 1, "$": 2, " ": 3, "a": 14, "ə": 59}
    text = "  aə a?"  # "?" is not in the map: skipped, as piper does
    assert piper_stream.phoneme_ids(text, ids) == phonemes_to_ids(list(text), {k: [v] for k, v in ids.items()})


# --- the real voice, split as models/prepare_piper.py does ----------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models dir whose piper-joe holds the installed model and tokens and freshly split graphs."""
    if not HAVE_VOICE:
        pytest.skip("piper-joe voice not installed (run ./install.sh)")
    spec = importlib.util.spec_from_file_location("prepare_piper", ROOT / "models" / "prepare_piper.py")
    assert spec is not None and spec.loader is not None
    prep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prep)
    root = tmp_path_factory.mktemp("models")
    d = root / "portable" / "piper-joe"
    d.mkdir(parents=True)
    for name in ("model.onnx", "tokens.txt"):
        (d / name).symlink_to(VOICE / name)
    for name, part in zip(prep.SPLIT, prep.split_graphs((VOICE / "model.onnx").read_bytes()), strict=True):
        (d / name).write_bytes(part)
    return root


@pytest.fixture(scope="module")
def engine(models: Path) -> vits.VitsTts:
    """The voice without sampled noise: the same text gives the same audio every call."""
    tts = vits.VitsTts(load_config([{"models": {"dir": str(models)}}]), "piper-joe", piper_noise=(0.0, 0.0))
    tts.load()
    return tts


TEXT = "Thanks for asking, the weather today is sunny and warm with a light breeze."


def test_windowed_decode_equals_the_whole_decode(engine: vits.VitsTts):
    stream = engine._stream
    assert stream is not None
    zp = stream.encode(piper_stream.phoneme_ids(engine._phonemes(TEXT)[0], engine._ids), (0.0, 1.0, 0.0))
    whole = stream.decode(stream.flow(zp))
    parts = list(stream.windows(zp))
    assert [last for _, last in parts] == [False] * (len(parts) - 1) + [True] and len(parts) >= 3
    joined = np.concatenate([a for a, _ in parts])
    assert len(joined) == len(whole) == zp.shape[2] * piper_stream.HOP
    assert snr_db(whole, joined) > 40.0


def test_stream_speaks_what_the_whole_model_speaks(engine: vits.VitsTts):
    """The split graphs and piper's ids (piper-tts's own pipeline: the whole sentence, its "," and
    "." included, in one call) give what model.onnx gives; no noise: the same samples."""
    import onnxruntime as ort

    ids = np.asarray([piper_stream.phoneme_ids(engine._phonemes(TEXT)[0], engine._ids)], dtype=np.int64)
    feeds = {"input": ids, "input_lengths": np.asarray([ids.shape[1]], dtype=np.int64),
             "scales": np.asarray([0.0, 1.0, 0.0], dtype=np.float32)}
    whole = ort.InferenceSession(str(VOICE / "model.onnx")).run(None, feeds)[0].reshape(-1)
    joined = np.concatenate([a for a, _ in engine.stream(TEXT)])
    assert len(joined) == len(whole) and snr_db(whole, joined) > 40.0


def test_streamed_piece_is_the_whole_piece_post_processed(engine: vits.VitsTts):
    """Parts go out as they are made, marked once per piece; joined they are the whole piece's
    prepare_piece output: no zero-padded gap or click at a seam."""
    tl = Timeline(FakeClock())
    pieces = Pieces(engine, CFG, Turn(tl, text=TEXT), out_rate=16000)
    parts = list(pieces.streamed("Thanks for asking, the weather today is sunny."))
    assert len({p.index for p in parts}) == 1 and len(parts) >= 3
    assert [e.name for e in tl.events] == [Ev.CHUNK, Ev.SYNTH_START, Ev.SYNTH_END]
    raw = np.concatenate([a for a, _ in engine.stream("Thanks for asking, the weather today is sunny.")])
    block = 16000 * CFG.audio.block_ms // 1000
    ref = prepare_piece(raw, engine.sample_rate, 16000, block, fade_ms=CFG.audio.crossfade_ms)
    got = np.concatenate([p.blocks for p in parts])
    assert got.shape == ref.shape and np.abs(got.astype(np.int32) - ref).max() <= 1
    assert tl.find(Ev.SYNTH_END)[0].get("audio_s") == pytest.approx(len(raw) / engine.sample_rate, abs=1e-3)


def test_the_first_piece_is_a_clause(engine: vits.VitsTts):
    pieces = Pieces(engine, CFG, Turn(Timeline(FakeClock()), text=TEXT))
    assert pieces.cut(TEXT)[0] == "Thanks for asking,"


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_bad_split_graph_is_a_clear_error(models: Path, tmp_path: Path, damage: str):
    d = tmp_path / "portable" / "piper-joe"
    shutil.copytree(models / "portable" / "piper-joe", d, symlinks=True)
    if damage == "missing":
        (d / "flow.onnx").unlink()
    else:
        (d / "flow.onnx").write_bytes((d / "flow.onnx").read_bytes()[:1000])
    with pytest.raises(RkvoiceError, match=r"flow\.onnx.*install\.sh") as err:
        vits.VitsTts(load_config([{"models": {"dir": str(tmp_path)}}]), "piper-joe").load()
    assert err.value.code == ("missing-model" if damage == "missing" else "corrupt-model")
