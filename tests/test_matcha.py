"""Matcha engine: the zh-en frontend on a lexicon in the real format, bucket choice, the true
frame count, splitting, Vocos buckets and windows, load-time checks of what models declare.

The voice files are made here the way sherpa-onnx's ``generate_lexicon.py`` makes them (pypinyin,
one toned syllable per Chinese character, tokens.txt with the blank as an id-only line). The
models are tiny hand-built ONNX graphs with the converter's contract I/O (models/matcha_split.py):

- ``matcha-encoder.onnx`` (CPU): x int64 [1,N], x_length int64 [1], length_scale float [1] ->
  mu_x [1,N,8] (ones), cum_durations [1,N], mel_frames, decoder_frames int64 [1]. Each token lasts
  ceil(FPT * length_scale) frames (FPT frames per token); T' is T rounded up to 4.
- ``matcha-t{K}`` (the decoder): mu [1,8,W], mask [1,1,W], noise [1,80,W], noise_scale,
  decoder_frames [1] -> mel [1,80,W]: voiced (0) where the aligned mu is 1 and the mask is set,
  silent (-11) elsewhere; the noise adds a little texture (noise * noise_scale * 0.01).
- ``vocos-f{N}``: mels [1,80,N] -> mag, x, y [1,513,N]: a 437.5 Hz tone where the mel is voiced.
- the dynamic pair: like the published model-steps-3.onnx / vocos-16khz-univ.onnx (any length).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package builds the tiny test graphs")
pypinyin = pytest.importorskip("pypinyin", reason="pypinyin writes the test lexicon like sherpa-onnx does")
from onnx import TensorProto, helper  # noqa: E402

from rkvoice.config import Config, MatchaConfig, ModelsConfig, TtsConfig, load_config  # noqa: E402
from rkvoice.errors import RkvoiceError  # noqa: E402
from rkvoice.npu import runtime as npu_runtime  # noqa: E402
from rkvoice.pieces import piece_chars  # noqa: E402
from rkvoice.tts.matcha_engine import MatchaTts  # noqa: E402
from rkvoice.tts.matcha_frames import (  # noqa: E402
    halve,
    split_units,
    vocos_windows,
)
from rkvoice.tts.matcha_frontend import (  # noqa: E402
    MatchaFrontend,
    Unit,
    ipa_to_tokens,
    words,
)
from tests.support.matcha_stats import MatchaStats  # noqa: E402

ZH = "你好今天天气不错我们出去走走吧是的这个那个时间地点人物事情开始结束一二三四五六七八九十银行长了吗"
PHRASES = {"银行行长": ["yin2", "hang2", "hang2", "zhang3"], "行长": ["hang2", "zhang3"]}
IPA = list("həlˈoʊpaɪθnɛkstwɹdmAIOWɡəʊɚb")
HOP = 256


# ---------------------------------------------------------------- voice files in the zh-en format

def _syllable(text: str) -> list[str]:
    out = []
    for (s,) in pypinyin.pinyin(text, style=pypinyin.Style.TONE3, neutral_tone_with_five=True):
        out.append(s if s[-1] in "12345" else s + "1")
    return out


def voice_files(d: Path) -> None:
    """tokens.txt + lexicon.txt as generate_tokens.py / generate_lexicon.py write them."""
    lexicon = [(c, _syllable(c)) for c in dict.fromkeys(ZH)] + list(PHRASES.items())
    syllables = sorted({s for _, ss in lexicon for s in ss})
    toks = [" "] + [",", ".", "?", "!", ";"] + syllables + list(dict.fromkeys(IPA))
    lines = [f"{t} {i}" if t != " " else f"  {i}" for i, t in enumerate(toks, start=1)]  # id 0 is the pad
    (d / "tokens.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / "lexicon.txt").write_text("".join(f"{w} {' '.join(ss)}\n" for w, ss in lexicon), encoding="utf-8")


def fake_ipa(word: str) -> str:
    return {"hello": "həlˈoʊ", "python": "pˈaɪθən", "next": "nˈɛkst", "world": "wˈɜːld", "ok": "ˌoʊkˈeɪ",
            "bob": "bˈɑːb"}.get(word.lower(), "")


def _frontend(tmp_path: Path, phonemizer=fake_ipa) -> MatchaFrontend:
    voice_files(tmp_path)
    return MatchaFrontend.from_files(tmp_path / "lexicon.txt", tmp_path / "tokens.txt", phonemizer)


def test_lexicon_has_one_toned_syllable_per_character(tmp_path: Path) -> None:
    fe = _frontend(tmp_path)
    t2i = fe.token2id
    assert fe.lexicon["你"] == (t2i["ni3"],) and fe.lexicon["吗"] == (t2i["ma5"],)
    units = fe.units("你好今天")
    assert [u.text for u in units] == ["你", "好", "今", "天"]
    assert fe.ids(units) == [t2i[s] for s in ("ni3", "hao3", "jin1", "tian1")]


def test_phrases_match_longest_first(tmp_path: Path) -> None:
    fe = _frontend(tmp_path)
    t2i = fe.token2id
    assert fe.lexicon["行"] == (t2i["xing2"],)
    units = fe.units("银行行长来了")  # 来 is not in the lexicon: skipped
    assert [u.text for u in units] == ["银行行长", "了"]
    assert units[0].ids == tuple(t2i[s] for s in ("yin2", "hang2", "hang2", "zhang3"))
    assert [u.text for u in fe.units("行长行")] == ["行长", "行"]


def test_english_words_get_espeak_phones_and_a_blank_after(tmp_path: Path) -> None:
    fe = _frontend(tmp_path)
    t2i = fe.token2id
    blank = t2i[" "]
    hello = [t2i[t] for t in ipa_to_tokens("həlˈoʊ")]
    python = [t2i[t] for t in ipa_to_tokens("pˈaɪθən")]
    assert ipa_to_tokens("həlˈoʊ") == ["h", "ə", "l", "ˈ", "O"] and ipa_to_tokens("pˈaɪθən")[2] == "I"
    # sherpa-onnx: a blank after every English word that something follows (words, marks, Chinese)
    assert fe.ids(fe.units("Hello Python")) == hello + [blank] + python
    assert fe.ids(fe.units("Hello，你好")) == hello + [blank, t2i[","], t2i["ni3"], t2i["hao3"]]
    assert fe.ids(fe.units("你好 hello")) == [t2i["ni3"], t2i["hao3"]] + hello  # none before, none at the end
    # an unknown word after an English word takes the blank with it (sherpa looks at the skipped word)
    assert fe.ids(fe.units("Hello Zyx 你")) == hello + [t2i["ni3"]]
    # the blank sits between units: a piece ending in an English word has none at its end
    units = fe.units("Hello Python")
    assert fe.ids(units[:1]) == hello and len(fe.ids(units)) == len(hello) + 1 + len(python)


def test_punctuation_is_mapped_and_deduplicated(tmp_path: Path) -> None:
    assert words("你好，，。吗？！  ok") == ["你", "好", ",", "吗", "?", "ok"]
    fe = _frontend(tmp_path)
    units = fe.units("你好，天气不错。")
    assert [u.kind for u in units] == ["zh", "zh", "punct", "zh", "zh", "zh", "zh", "punct"]


def test_a_two_tokens_per_character_lexicon_is_refused(tmp_path: Path) -> None:
    voice_files(tmp_path)
    toks = [line.split()[0] for line in (tmp_path / "tokens.txt").read_text(encoding="utf-8").splitlines()
            if len(line.split()) == 2]
    # initials + finals per character (the zh-baker layout): not what the zh-en model reads
    (tmp_path / "lexicon.txt").write_text("".join(f"{c} {toks[5]} {toks[6]}\n" for c in ZH), encoding="utf-8")
    with pytest.raises(RkvoiceError, match="not in the zh-en format.*2 tokens each"):
        MatchaFrontend.from_files(tmp_path / "lexicon.txt", tmp_path / "tokens.txt")


def test_bad_voice_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(RkvoiceError, match="tokens file .*missing.txt"):
        MatchaFrontend.from_files(tmp_path / "lex.txt", tmp_path / "missing.txt")
    (tmp_path / "t.txt").write_text("a x\n")
    with pytest.raises(RkvoiceError, match="t.txt:1"):
        MatchaFrontend.from_files(tmp_path / "lex.txt", tmp_path / "t.txt")


# ---------------------------------------------------------------- pieces, halves, windows

def _count(units: list[Unit]) -> int:
    return sum(len(u.ids) for u in units)


def test_split_fits_the_largest_bucket_and_cuts_after_punctuation(tmp_path: Path) -> None:
    fe = _frontend(tmp_path)
    text = "今天天气不错，我们出去走走吧。这个时间地点人物事情开始结束，一二三四五六七八九十，是的我们开始。"
    units = fe.units(text)
    pieces = split_units(units, 16, lambda p: len(fe.ids(p)))
    assert len(pieces) >= 3 and all(len(fe.ids(p)) <= 16 for p in pieces)
    assert [u for p in pieces for u in p] == units  # nothing dropped, nothing truncated
    assert sum(p[-1].kind == "punct" for p in pieces[:-1]) >= len(pieces) // 2


def test_split_cuts_an_overlong_word_into_slices() -> None:
    pieces = split_units([Unit("supercalifragilistic", tuple(range(1, 101)), "en")], 64, _count)
    assert [_count(p) for p in pieces] == [64, 36]


def test_halve_prefers_a_mark_near_the_middle_and_splits_single_units() -> None:
    u = [Unit(c, (1,), "zh") for c in "一二三四"] + [Unit(",", (2,), "punct")] + [Unit(c, (1,), "zh") for c in "五六七"]
    a, b = halve(u)
    assert a[-1].text == "," and a + b == u
    left, right = halve([Unit("word", (1, 2, 3, 4, 5), "en", blank_after=True)])
    assert left[0].ids == (1, 2) and right[0].ids == (3, 4, 5) and right[0].blank_after
    with pytest.raises(RkvoiceError, match="one token"):
        halve([Unit("a", (1,), "en")])


def test_vocos_windows() -> None:
    for total in (1, 200, 600, 601, 1000, 2345):
        w = vocos_windows(total, 600, 32)
        assert w[0][1] == 0 and w[-1][2] == total and all(x[2] == y[1] for x, y in zip(w, w[1:]))
        for start, k0, k1 in w:
            assert start <= k0 < k1 <= start + 600 and (k0 - start >= 32 or k0 == 0)
            assert start + 600 - k1 >= 32 or k1 == total
    with pytest.raises(RkvoiceError, match="no centre"):
        vocos_windows(1000, 60, 30)


# ---------------------------------------------------------------- tiny contract graphs

T = helper.make_tensor_value_info
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _save(graph, path: Path, meta: dict[str, str]) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, meta)
    onnx.save(model, str(path))


MATCHA_META = {"sample_rate": "16000", "model_type": "matcha-tts", "voice": "zh en-us", "pad_id": "0",
               "n_speakers": "1", "use_eos_bos": "1"}
VOCOS_META = {"n_fft": "1024", "hop_length": "256", "win_length": "1024", "window_type": "hann", "center": "1",
              "normalized": "0"}


def matcha_graph(path: Path, fpt: float = 4.0, n_mels: int = 80, extra_input: str | None = None,
                 tokens: int | None = None) -> None:
    """The dynamic published-style whole graph (any length); with ``tokens``, its x is fixed [1, tokens]
    like the whole-graph buckets the converter made before the split."""
    W = 4096
    inputs = [T("x", I64, [1, tokens or "N"]), T("x_length", I64, [1]), T("noise_scale", F, [1]),
              T("length_scale", F, [1])]
    if extra_input:
        inputs.append(T(extra_input, F, [1]))
    init = [helper.make_tensor("t", F, [1, 1, W], np.arange(W, dtype=np.float32)),
            helper.make_tensor("k", F, [1], [fpt]), helper.make_tensor("eleven", F, [1], [11.0]),
            helper.make_tensor("zeros", F, [1, n_mels, 1], np.zeros(n_mels, np.float32)),
            helper.make_tensor("zero_f", F, [1], [0.0]), helper.make_tensor("zero_i", I64, [1], [0]),
            helper.make_tensor("ax", I64, [1], [2])]
    nodes = [
        helper.make_node("Cast", ["x_length"], ["lenf"], to=F),
        helper.make_node("Mul", ["lenf", "k"], ["v0"]),
        helper.make_node("Mul", ["v0", "length_scale"], ["frames_f"]),
        helper.make_node("Less", ["t", "frames_f"], ["vb"]),
        helper.make_node("Cast", ["vb"], ["v"], to=F),
        helper.make_node("Mul", ["v", "eleven"], ["s"]),
        helper.make_node("Sub", ["s", "eleven"], ["logmel0"]),  # voiced 0, silent -11
        helper.make_node("Cast", ["x"], ["xf"], to=F),
        helper.make_node("ReduceMin", ["xf"], ["xmin"], keepdims=0),
        helper.make_node("Min", ["xmin", "zero_f"], ["nil"]),  # 0 for valid ids: x is used
        helper.make_node("Add", ["logmel0", "nil"], ["logmel1"]),
        helper.make_node("Add", ["logmel1", "zeros"], ["logmel2"]),
    ]
    last = "logmel2"
    if extra_input:
        nodes.append(helper.make_node("Mul", [extra_input, "zero_f"], ["extra0"]))
        nodes.append(helper.make_node("Add", ["logmel2", "extra0"], ["logmel3"]))
        last = "logmel3"
    nodes += [helper.make_node("Mul", ["noise_scale", "zero_f"], ["ns0"]),
              helper.make_node("Add", [last, "ns0"], ["mel_full"]),
              helper.make_node("Ceil", ["frames_f"], ["fc"]),
              helper.make_node("Cast", ["fc"], ["end"], to=I64),
              helper.make_node("Slice", ["mel_full", "zero_i", "end", "ax"], ["mel"])]
    outputs = [T("mel", F, [1, n_mels, "L"])]
    _save(helper.make_graph(nodes, "fake_matcha", inputs, outputs, initializer=init), path, MATCHA_META)


ENCODER = "matcha-encoder.onnx"
ENCODER_IN = ("x", "x_length", "length_scale")
"""The encoder's inputs, in order (the published graph's noise_scale only reaches the decoder)."""
CHANNELS = 8


def encoder_graph(path: Path, fpt: float = 4.0) -> None:
    """The split voice's CPU half: every token lasts ceil(fpt * length_scale) frames."""
    init = [helper.make_tensor("k", F, [1], [fpt]), helper.make_tensor("zero_f", F, [1], [0.0]),
            helper.make_tensor("one_f", F, [1], [1.0]), helper.make_tensor("four", F, [1], [4.0]),
            helper.make_tensor("axis1", I64, [], [1]), helper.make_tensor("ax2", I64, [1], [2]),
            helper.make_tensor("zeros_c", F, [1, 1, CHANNELS], np.zeros(CHANNELS, np.float32))]
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=F),
        helper.make_node("Mul", ["xf", "zero_f"], ["x0"]),
        helper.make_node("Add", ["x0", "one_f"], ["ones"]),  # [1, N]
        helper.make_node("Mul", ["k", "length_scale"], ["d0"]),
        helper.make_node("Ceil", ["d0"], ["dur"]),
        helper.make_node("Mul", ["ones", "dur"], ["durations"]),
        helper.make_node("CumSum", ["durations", "axis1"], ["cum_durations"]),
        helper.make_node("Unsqueeze", ["ones", "ax2"], ["ones3"]),
        helper.make_node("Add", ["ones3", "zeros_c"], ["mu_x"]),  # [1, N, C]
        helper.make_node("Cast", ["x_length"], ["lenf"], to=F),
        helper.make_node("Mul", ["lenf", "dur"], ["frames_f"]),
        helper.make_node("Cast", ["frames_f"], ["mel_frames"], to=I64),
        helper.make_node("Div", ["frames_f", "four"], ["q"]),
        helper.make_node("Ceil", ["q"], ["qc"]),
        helper.make_node("Mul", ["qc", "four"], ["dec_f"]),
        helper.make_node("Cast", ["dec_f"], ["decoder_frames"], to=I64),
    ]
    inputs = [T("x", I64, [1, "N"]), T("x_length", I64, [1]), T("length_scale", F, [1])]
    outputs = [T("mu_x", F, [1, "N", CHANNELS]), T("cum_durations", F, [1, "N"]), T("mel_frames", I64, [1]),
               T("decoder_frames", I64, [1])]
    _save(helper.make_graph(nodes, "fake_matcha_encoder", inputs, outputs, initializer=init), path, MATCHA_META)


def decoder_graph(path: Path, tokens: int, frames: int, n_mels: int = 80, extra_input: str | None = None,
                  mu_type: int = F, mel_name: str = "mel", **meta: str) -> None:
    """A split voice's decoder bucket for ``tokens`` over a window of ``frames`` (``meta``: metadata changes)."""
    W = frames
    inputs = [T("mu", mu_type, [1, CHANNELS, W]), T("mask", F, [1, 1, W]), T("noise", F, [1, n_mels, W]),
              T("noise_scale", F, [1]), T("decoder_frames", F, [1])]
    if extra_input:
        inputs.append(T(extra_input, F, [1]))
    init = [helper.make_tensor("eleven", F, [1], [11.0]), helper.make_tensor("small", F, [1], [0.01]),
            helper.make_tensor("zeros", F, [1, n_mels, 1], np.zeros(n_mels, np.float32)),
            helper.make_tensor("zero_f", F, [1], [0.0])]
    nodes = [
        helper.make_node("Cast", ["mu"], ["muf"], to=F),
        helper.make_node("ReduceMean", ["muf"], ["m"], axes=[1], keepdims=1),  # [1, 1, W]
        helper.make_node("Mul", ["m", "mask"], ["mm"]),
        helper.make_node("Mul", ["mm", "eleven"], ["s"]),
        helper.make_node("Sub", ["s", "eleven"], ["logmel0"]),  # voiced 0, silent -11
        helper.make_node("Add", ["logmel0", "zeros"], ["logmel1"]),
        helper.make_node("Mul", ["noise", "noise_scale"], ["n1"]),
        helper.make_node("Mul", ["n1", "small"], ["n2"]),
        helper.make_node("Add", ["logmel1", "n2"], ["logmel2"]),
        helper.make_node("Mul", ["decoder_frames", extra_input or "zero_f"], ["d0"]),
        helper.make_node("Mul", ["d0", "zero_f"], ["d1"]),
        helper.make_node("Add", ["logmel2", "d1"], [mel_name]),
    ]
    props = {**MATCHA_META, "rkvoice_tokens": str(tokens), "rkvoice_frames": str(frames),
             "rkvoice_split": "decoder", "rkvoice_encoder": ENCODER, **meta}
    graph = helper.make_graph(nodes, "fake_matcha_decoder", inputs, [T(mel_name, F, [1, n_mels, W])], initializer=init)
    _save(graph, path, props)


def vocos_graph(path: Path, frames: int | None, n_mels: int = 80) -> None:
    fr = frames if frames else "T"
    bins = 513
    spectral = np.zeros((1, bins, 1), np.float32)
    spectral[0, 28, 0] = 60.0  # 28 * 16000 / 1024 = 437.5 Hz
    phase_rate = (np.pi / 2 * (np.arange(bins) % 4)).astype(np.float32).reshape(1, bins, 1)
    init = [helper.make_tensor("spec", F, [1, bins, 1], spectral), helper.make_tensor("rate", F, [1, bins, 1], phase_rate),
            helper.make_tensor("half", F, [1], [-5.5]), helper.make_tensor("zero_f", F, [1], [0.0]),
            helper.make_tensor("idx2", I64, [1], [2]), helper.make_tensor("zero", I64, [], [0]),
            helper.make_tensor("one", I64, [], [1]), helper.make_tensor("four", I64, [], [4]),
            helper.make_tensor("axes01", I64, [2], [0, 1])]
    nodes = [
        helper.make_node("ReduceMean", ["mels"], ["m"], axes=[1], keepdims=1),  # [1,1,T]
        helper.make_node("Greater", ["m", "half"], ["gb"]),
        helper.make_node("Cast", ["gb"], ["gate"], to=F),  # voiced 1, silent 0
        helper.make_node("Mul", ["gate", "spec"], ["mag"]),
        helper.make_node("Shape", ["mels"], ["shp"]),
        helper.make_node("Gather", ["shp", "idx2"], ["tn"], axis=0),
        helper.make_node("Squeeze", ["tn"], ["tn_s"]),
        helper.make_node("Range", ["zero", "tn_s", "one"], ["ti"]),
        helper.make_node("Mod", ["ti", "four"], ["tmod"]),
        helper.make_node("Cast", ["tmod"], ["tf"], to=F),
        helper.make_node("Unsqueeze", ["tf", "axes01"], ["t3"]),
        helper.make_node("Mul", ["rate", "t3"], ["ph0"]),
        helper.make_node("Abs", ["m"], ["am"]),
        helper.make_node("Min", ["am", "zero_f"], ["nil"]),
        helper.make_node("Add", ["ph0", "nil"], ["ph"]),
        helper.make_node("Cos", ["ph"], ["x"]),
        helper.make_node("Sin", ["ph"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "fake_vocos", [T("mels", F, [1, n_mels, fr])],
                              [T("mag", F, [1, bins, fr]), T("x", F, [1, bins, fr]), T("y", F, [1, bins, fr])],
                              initializer=init)
    _save(graph, path, VOCOS_META)


def sidecar(model: Path, kind: str, size: int, window: int, **changes) -> None:
    """The converter's sidecar for an .onnx twin, read from the graph itself (then ``changes``)."""
    m = onnx.load(str(model))

    def specs(values):
        return [{"name": v.name, "shape": [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim],
                 "dtype": onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name} for v in values]

    data = {"model": kind, ("tokens" if kind == "matcha" else "frames"): size, "inputs": specs(m.graph.input),
            "outputs": specs(m.graph.output), "metadata": {p.key: p.value for p in m.metadata_props},
            "toolkit_version": "2.3.2", "target": "rk3576", "snr_vs_original_db": 120.0, "snr_db": 55.0}
    if kind == "matcha":
        data.update(frames=window, encoder=ENCODER)
    data.update(changes)
    model.with_suffix(".json").write_text(json.dumps(data), encoding="utf-8")


BUCKETS = ((16, 160), (32, 320), (64, 600))


def model_dir(tmp_path: Path, buckets=BUCKETS, vocos=(200, 600), fpt: float = 4.0) -> Path:
    d = tmp_path / "board"
    (d / "matcha-rknn").mkdir(parents=True, exist_ok=True)
    (d / "matcha-zh-en").mkdir(exist_ok=True)
    voice_files(d / "matcha-zh-en")
    encoder_graph(d / "matcha-rknn" / ENCODER, fpt)
    for k, w in buckets:
        p = d / "matcha-rknn" / f"matcha-t{k}.onnx"
        decoder_graph(p, k, w)
        sidecar(p, "matcha", k, w)
    for n in vocos:
        p = d / "matcha-rknn" / f"vocos-f{n}.onnx"
        vocos_graph(p, n)
        sidecar(p, "vocos", n, n)
    return d


def engine(d: Path, **matcha) -> MatchaTts:
    mc = replace(MatchaConfig(), dir=str(d), **{"runtime": "onnx", **matcha})
    return MatchaTts(Config(tts=TtsConfig(matcha=mc), models=ModelsConfig(dir=str(d.parent))), phonemizer=fake_ipa)


class Spy:
    """Records the feeds and outputs of a bucket's model (or of the engine's ``encoder``)."""

    def __init__(self, owner, attr: str = "model") -> None:
        self.model = getattr(owner, attr)
        self.calls: list[tuple[list[np.ndarray], list[np.ndarray]]] = []
        setattr(owner, attr, self)

    def __getattr__(self, k):
        return getattr(self.model, k)

    def run(self, inputs):
        outs = self.model.run(inputs)
        self.calls.append(([np.asarray(a).copy() for a in inputs], [np.asarray(o).copy() for o in outs]))
        return outs


def frontend(tts: MatchaTts) -> MatchaFrontend:
    """The loaded engine's frontend."""
    assert tts.frontend is not None, "load() the engine first"
    return tts.frontend


def spies(tts: MatchaTts) -> dict[str, Spy]:
    found = {b.label: Spy(b) for b in tts.acoustic} | {"v" + v.label: Spy(v) for v in tts.vocoders}
    return found | ({"encoder": Spy(tts, "encoder")} if tts.encoder is not None else {})


# ---------------------------------------------------------------- the engine on the buckets

def test_finds_every_bucket_and_lists_its_files(tmp_path: Path) -> None:
    tts = engine(model_dir(tmp_path))
    files = tts.files()
    assert {p.name for p in files.values()} >= {"matcha-t16.onnx", "matcha-t32.onnx", "matcha-t64.onnx",
                                                "vocos-f200.onnx", "vocos-f600.onnx", "lexicon.txt", "tokens.txt"}
    assert files["acoustic encoder"].name == ENCODER  # named by the decoders' sidecars
    tts.load()
    assert [(b.size, b.window) for b in tts.acoustic] == list(BUCKETS)
    assert all(b.encoder == files["acoustic encoder"] for b in tts.acoustic) and tts.encoder is not None
    assert [v.size for v in tts.vocoders] == [200, 600]
    assert tts.sample_rate == 16000 and tts.stft.hop_length == HOP and tts.max_tokens == 64


def test_each_piece_runs_in_the_smallest_window_and_is_cut_at_its_true_frames(tmp_path: Path) -> None:
    tts = engine(model_dir(tmp_path, fpt=3.0))  # 3 frames a token: T is not a multiple of 4, T' is
    tts.load()
    s = spies(tts)
    text = "你好。"
    with MatchaStats(tts) as timed:  # bench/board_report.py's bucket times
        audio, rate = tts.generate(text)
    (efeeds, eouts), = s["encoder"].calls  # the CPU encoder: the piece's own tokens, unpadded
    n = tts.count(frontend(tts).units(text))
    x, x_length, _ = efeeds
    assert x.shape == (1, n) and int(x_length[0]) == n
    frames, dec_frames = int(eouts[2][0]), int(eouts[3][0])
    assert frames == n * 3 and dec_frames == -(-frames // 4) * 4 > frames
    (feeds, _), = s["t16"].calls  # the smallest window holding T'
    assert not s["t32"].calls and not s["t64"].calls
    mu, mask, _, _, dec = feeds
    assert mu.shape == (1, 8, 160) and mask.shape == (1, 1, 160) and int(dec[0]) == dec_frames
    assert (mask[0, 0, :frames] == 1).all() and (mask[0, 0, frames:] == 0).all()  # aligned in numpy up to T
    assert (mu[0, :, :frames] == 1).all() and (mu[0, :, frames:] == 0).all()
    (vfeeds, _), = s["vf200"].calls  # the smallest Vocos bucket holding the cut mel
    assert vfeeds[0].shape == (1, 80, 200) and not s["vf600"].calls
    assert (vfeeds[0][0, :, frames:] == 0).all()  # cut at T, padded with zeros (what Vocos's own conv padding sees)
    assert len(audio) == HOP * (frames - 1) and rate == 16000  # exactly the true frames, no tail trim
    tone = audio[len(audio) // 4 : len(audio) // 4 + 1024]
    spec = np.abs(np.fft.rfft(tone * np.hanning(len(tone))))
    assert len(tone) == 1024 and abs(np.argmax(spec) * 16000 / len(tone) - 437.5) < 20
    stats = timed.report()
    assert stats["matcha"]["t16"]["calls"] == 1 and stats["vocos"]["f200"]["calls"] == 1
    assert stats["matcha"]["t64"]["calls"] == 0 and stats["matcha"]["t16"]["mean_ms"] > 0
    assert stats["stages"]["encoder_cpu"]["calls"] == stats["stages"]["align"]["calls"] == 1
    assert stats["overflows"]["count"] == 0


def test_noise_is_seeded_standard_normal_of_the_models_shape(tmp_path: Path) -> None:
    tts = engine(model_dir(tmp_path))
    tts.load()
    s = spies(tts)
    a, _ = tts.generate("今天天气不错，我们出去走走吧。")
    b, _ = tts.generate("今天天气不错，我们出去走走吧。")
    first, second = s["t16"].calls
    noise = first[0][2]
    assert noise.shape == (1, 80, 160) and noise.dtype == np.float32
    assert abs(float(noise.mean())) < 0.02 and abs(float(noise.std()) - 1) < 0.02
    np.testing.assert_array_equal(noise, second[0][2])  # same text, same noise, same audio
    np.testing.assert_array_equal(a, b)
    other = engine(tmp_path / "board", seed=7)
    other.load()
    s2 = spies(other)
    other.generate("今天天气不错，我们出去走走吧。")
    assert not np.array_equal(s2["t16"].calls[0][0][2], noise)


def test_speed_feeds_length_scale(tmp_path: Path) -> None:
    tts = engine(model_dir(tmp_path))
    tts.load()
    s = spies(tts)
    slow, _ = tts.generate("今天天气不错。", speed=0.5)
    fast, _ = tts.generate("今天天气不错。", speed=2.0)
    scale = ENCODER_IN.index("length_scale")
    assert sorted(float(c[0][scale][0]) for c in s["encoder"].calls) == [0.5, 2.0]
    assert len(slow) > 3 * len(fast)
    with pytest.raises(RkvoiceError, match="speed"):
        tts.generate("你好", speed=0)


def test_long_text_is_split_into_bucket_pieces_never_truncated(tmp_path: Path) -> None:
    tts = engine(model_dir(tmp_path))
    tts.load()
    s = spies(tts)
    text = "今天天气不错，我们出去走走吧。这个时间地点人物事情开始结束，一二三四五六七八九十，是的我们开始。" * 3
    units = frontend(tts).units(text)
    audio, _ = tts.generate(text)
    enc = s["encoder"].calls
    assert len(enc) >= 2 and all(int(f[1][0]) <= tts.max_tokens for f, _ in enc)
    assert sum(int(f[1][0]) for f, _ in enc) == tts.count(units)  # every token spoken once
    windows = [f[0].shape[2] for k in ("t16", "t32", "t64") for f, _ in s[k].calls]
    smallest = [min(w for _, w in BUCKETS if w >= int(o[3][0])) for _, o in enc]  # holding each piece's T'
    assert sorted(windows) == sorted(smallest)
    frames = [int(o[2][0]) for _, o in enc]
    assert len(audio) == sum(HOP * (f - 1) for f in frames)


def test_a_piece_goes_to_the_smallest_window_holding_its_frames(tmp_path: Path) -> None:
    # 8 frames a token: 14 tokens need 112 frames; t16's window holds only 100 -> straight to t32
    d = model_dir(tmp_path, buckets=((16, 100), (32, 320)), fpt=8.0)
    tts = engine(d)
    tts.load()
    s = spies(tts)
    text = "今天天气不错我们出去走走吧是"
    n = tts.count(frontend(tts).units(text))
    assert 12 < n <= 16
    audio, _ = tts.generate(text)
    # the CPU encoder gave the frame count before any decoder call: no wasted call in t16
    assert not s["t16"].calls and len(s["t32"].calls) == 1 and tts.overflows == 0
    assert len(audio) == HOP * (n * 8 - 1)
    again, _ = tts.generate(text)
    assert not s["t16"].calls and len(s["t32"].calls) == 2
    np.testing.assert_array_equal(again, audio)
    # ... while a piece that fits t16's window runs there
    short = "你好"
    tts.generate(short)
    assert len(s["t16"].calls) == 1


def test_frames_past_every_window_split_the_piece_in_two(tmp_path: Path) -> None:
    # 30 frames a token: a 14-token piece needs 420 frames; the only window holds 320
    d = model_dir(tmp_path, buckets=((16, 320),), fpt=30.0)
    tts = engine(d)
    tts.load()
    s = spies(tts)
    text = "今天天气不错，我们出去走走吧。"
    n = tts.count(frontend(tts).units(text))
    assert n * 30 > 320
    audio, _ = tts.generate(text)
    enc = s["encoder"].calls
    spoken = [int(f[1][0]) for f, o in enc if int(o[3][0]) <= 320]
    assert sum(spoken) == n and len(spoken) >= 2  # both halves, nothing lost
    # the overflow cost an encoder call, never a decoder call: each decoder call made audio
    assert len(s["t16"].calls) == len(spoken) and tts.overflows == len(enc) - len(spoken) >= 1
    assert len(audio) == sum(HOP * (k * 30 - 1) for k in spoken)


def test_long_mel_runs_through_the_largest_vocos_in_windows_like_one_whole_run(tmp_path: Path) -> None:
    d = model_dir(tmp_path, buckets=((64, 900),), vocos=(200,), fpt=12.0)
    tts = engine(d)
    tts.load()
    s = spies(tts)
    text = "今天天气不错，我们出去走走吧。这个时间地点人物事情开始结束，一二三四五六七八九十"
    windowed, _ = tts.generate(text)
    assert len(windowed) > HOP * 400
    assert len(s["vf200"].calls) >= 3
    vocos_graph(d / "matcha-rknn" / "whole.onnx", None)
    whole_tts = engine(d, vocoder="matcha-rknn/whole.onnx")
    whole_tts.load()
    whole, _ = whole_tts.generate(text)
    assert len(windowed) == len(whole)
    np.testing.assert_allclose(windowed, whole, atol=1e-4)


def test_published_dynamic_graphs_run_directly(tmp_path: Path) -> None:
    d = tmp_path / "board"
    (d / "matcha-zh-en").mkdir(parents=True)
    voice_files(d / "matcha-zh-en")
    matcha_graph(d / "matcha-zh-en" / "model-steps-3.onnx")
    vocos_graph(d / "matcha-zh-en" / "vocos-16khz-univ.onnx", None)
    tts = engine(d, acoustic="matcha-zh-en/model-steps-3.onnx", vocoder="matcha-zh-en/vocos-16khz-univ.onnx")
    tts.load()
    assert tts.acoustic[0].dynamic and tts.vocoders[0].dynamic and tts.encoder is None
    s = spies(tts)
    audio, _ = tts.generate("Hello Python，你好。")
    (feeds, outs), = s["dynamic"].calls
    n = int(feeds[1][0])
    assert feeds[0].shape == (1, n) and len(feeds) == 4  # no padding, no noise input
    assert outs[0].shape[-1] == n * 4 and len(audio) == HOP * (n * 4 - 1)


def test_piece_lengths_for_matcha_default_to_the_seeds(tmp_path: Path) -> None:
    cfg = load_config()
    assert (cfg.tts.matcha.first_chars, cfg.tts.matcha.chunk_chars) == (24, 40)
    tts = engine(model_dir(tmp_path))
    assert piece_chars(cfg, tts) == (24, 40)
    assert piece_chars(cfg, object()) == (cfg.tts.first_chars, cfg.tts.chunk_chars)
    assert piece_chars(cfg, engine(tmp_path / "board", first_chars=10, chunk_chars=30)) == (10, 30)
    with pytest.raises(RkvoiceError, match="first_chars"):
        MatchaConfig(first_chars=0)


# ---------------------------------------------------------------- load-time checks

def _load_error(d: Path, **matcha) -> str:
    with pytest.raises(RkvoiceError) as err:
        engine(d, **matcha).load()
    assert err.value.code in ("bad-model", "missing-model")
    return str(err.value)


def test_a_model_wanting_an_input_the_engine_cannot_feed_is_refused(tmp_path: Path) -> None:
    d = model_dir(tmp_path, buckets=((16, 160),))
    p = d / "matcha-rknn" / "matcha-t16.onnx"
    decoder_graph(p, 16, 160, extra_input="speaker_embedding")
    sidecar(p, "matcha", 16, 160)
    assert "speaker_embedding" in _load_error(d) and "mu, mask, noise" in _load_error(d)
    matcha_graph(d / "matcha-zh-en" / "spk.onnx", extra_input="speaker_embedding")
    msg = _load_error(d, acoustic="matcha-zh-en/spk.onnx")
    assert "speaker_embedding" in msg and "x, x_length" in msg


def test_a_sidecar_disagreeing_with_its_model_is_refused(tmp_path: Path) -> None:
    d = model_dir(tmp_path, buckets=((16, 160),))
    p = d / "matcha-rknn" / "matcha-t16.onnx"
    data = json.loads(p.with_suffix(".json").read_text())
    data["inputs"][0]["shape"] = [1, 8, 320]
    p.with_suffix(".json").write_text(json.dumps(data))
    assert "sidecar's inputs" in _load_error(d) and "mu float32 [1, 8, 320]" in _load_error(d)
    sidecar(p, "matcha", 16, 320)  # I/O agree, the window does not
    assert "the sidecar says frames 320 but the model takes 160 frames" in _load_error(d)
    sidecar(p, "vocos", 16, 160)
    assert "describes a 'vocos' model" in _load_error(d)


def test_misnamed_files_and_incomplete_decoders_are_refused(tmp_path: Path) -> None:
    d = model_dir(tmp_path, buckets=((16, 160),))
    p = d / "matcha-rknn" / "matcha-t16.onnx"
    decoder_graph(p, 32, 160)
    sidecar(p, "matcha", 32, 160)
    assert "named for 16 tokens but the model takes 32" in _load_error(d)
    decoder_graph(p, 16, 160, mel_name="out")
    sidecar(p, "matcha", 16, 160)
    assert "not a Matcha decoder the engine can feed" in _load_error(d) and "-> mel" in _load_error(d)
    decoder_graph(p, 16, 160, mu_type=I64)
    sidecar(p, "matcha", 16, 160)
    assert "input mu int64 [1, 8, 160] should be float32" in _load_error(d)
    decoder_graph(p, 16, 160, rkvoice_tokens="")
    sidecar(p, "matcha", 16, 160, tokens=None)
    assert "without its token bucket" in _load_error(d)
    decoder_graph(p, 16, 160, n_mels=100)
    sidecar(p, "matcha", 16, 160)
    assert "makes 100 mel bins but vocos-f200.onnx takes 80" in _load_error(d)


def test_a_whole_graph_bucket_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what the converter made before the split: one graph taking x [1, K] (no CPU encoder)
    d = _rknn_dir(tmp_path, monkeypatch)
    (d / "matcha-rknn" / ENCODER).unlink()
    for k, w in ((16, 160), (32, 320)):
        p = d / "matcha-rknn" / f"matcha-t{k}.onnx"
        matcha_graph(p, tokens=k)
        sidecar(p, "matcha", k, w, encoder=None)
    for runtime in ("onnx", "rknn"):
        msg = _load_error(d, runtime=runtime)
        assert f"matcha-t16.{runtime}: input x int64 [1, 16]: a whole-graph Matcha bucket, which rkvoice no " \
               "longer runs; rebuild the voice with ./install.sh --profile board (models/convert_rknn.py matcha)" in msg


def test_a_dynamic_graph_wanting_noise_is_refused(tmp_path: Path) -> None:
    d = model_dir(tmp_path, buckets=())
    matcha_graph(d / "matcha-zh-en" / "noisy.onnx", extra_input="noise")
    msg = _load_error(d, acoustic="matcha-zh-en/noisy.onnx")
    assert "dynamic-shape Matcha with input noise" in msg and "model-steps-3.onnx" in msg


def test_a_vocoder_in_the_acoustic_place_is_refused(tmp_path: Path) -> None:
    d = model_dir(tmp_path, buckets=((16, 160),))
    p = d / "matcha-rknn" / "matcha-t16.onnx"
    vocos_graph(p, 160)
    p.with_suffix(".json").unlink()
    assert "not a Matcha acoustic model the engine can feed: inputs mels" in _load_error(d)


def test_missing_buckets_and_files_are_named_with_the_fix(tmp_path: Path) -> None:
    cfg = Config(tts=TtsConfig(matcha=replace(MatchaConfig(), dir=str(tmp_path / "none"), runtime="onnx")))
    with pytest.raises(RkvoiceError, match=r"acoustic .*matcha-rknn/matcha-t\*\.onnx.*install.sh --profile board") as e:
        MatchaTts(cfg).load()
    assert e.value.code == "missing-model"


def test_generate_before_load_and_unspeakable_text(tmp_path: Path) -> None:
    d = model_dir(tmp_path)
    with pytest.raises(RkvoiceError, match="load"):
        engine(d).generate("你好")
    tts = engine(d)
    tts.load()
    audio, rate = tts.generate("☃☃")
    assert len(audio) == 0 and rate == 16000


# ---------------------------------------------------------------- the .rknn path (RKNNLite faked)

class FakeLite:
    """RKNNLite stand-in: 'runs' a .rknn by running its .onnx twin; reports I/O like RKNNRuntime."""

    NPU_CORE_AUTO = 0
    rename: ClassVar[dict[str, str]] = {}

    def __init__(self, verbose: bool = False) -> None:
        self.rknn_runtime: _FakeRuntime | None = None

    def load_rknn(self, path: str) -> int:
        import onnxruntime as ort

        self.sess = ort.InferenceSession(str(Path(path).with_suffix(".onnx")), providers=["CPUExecutionProvider"])
        return 0

    def init_runtime(self, core_mask=0) -> int:
        self.rknn_runtime = _FakeRuntime(self.sess, self.rename)
        return 0

    def inference(self, inputs):
        return self.sess.run(None, {i.name: a for i, a in zip(self.sess.get_inputs(), inputs)})

    def release(self) -> None:
        self.rknn_runtime = None


class _Attr:
    def __init__(self, name: str, shape: list[int]) -> None:
        self.name, self.n_dims, self.dims, self.type = name.encode(), len(shape), shape + [0] * (16 - len(shape)), 1


class _FakeRuntime:
    def __init__(self, sess, rename: dict[str, str]) -> None:
        self.sess, self.rename = sess, rename

    def get_in_out_num(self):
        return len(self.sess.get_inputs()), len(self.sess.get_outputs())

    def get_tensor_attr(self, index: int, is_output: bool = False):
        arg = (self.sess.get_outputs() if is_output else self.sess.get_inputs())[index]
        return _Attr(self.rename.get(arg.name, arg.name), list(arg.shape))


def _rknn_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = model_dir(tmp_path, buckets=((16, 160), (32, 320)), vocos=(200,))
    for onnx_file in (d / "matcha-rknn").glob("*.onnx"):
        if onnx_file.name != ENCODER:  # the encoder stays on the CPU
            onnx_file.with_suffix(".rknn").write_bytes(b"RKNN fake")
    monkeypatch.setattr(npu_runtime, "_lite_api", lambda: FakeLite)
    return d


def test_rknn_buckets_are_fed_from_their_sidecars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _rknn_dir(tmp_path, monkeypatch)
    tts = engine(d, runtime="rknn")
    files = tts.files()
    assert files.pop("acoustic encoder").name == ENCODER  # the CPU half: onnxruntime
    assert {p.suffix for k, p in files.items() if k.startswith(("acoustic", "vocoder"))} == {".rknn", ".json"}
    tts.load()
    assert all(b.path.suffix == ".rknn" for b in tts.acoustic + tts.vocoders)
    audio, _ = tts.generate("今天天气不错。")
    n = tts.count(frontend(tts).units("今天天气不错。"))
    assert len(audio) == HOP * (n * 4 - 1)


def test_rknn_without_sidecar_or_disagreeing_with_it_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _rknn_dir(tmp_path, monkeypatch)
    monkeypatch.setattr(FakeLite, "rename", {"noise": "noise_in"})
    assert "reports inputs" in _load_error(d, runtime="rknn") and "noise_in" in _load_error(d, runtime="rknn")
    monkeypatch.setattr(FakeLite, "rename", {})
    (d / "matcha-rknn" / "matcha-t32.json").unlink()
    msg = _load_error(d, runtime="rknn")
    assert "missing: acoustic matcha-t32 sidecar" in msg and "matcha-t32.json" in msg
    from rkvoice.tts.matcha_buckets import load_bucket

    with pytest.raises(RkvoiceError, match="matcha-t32.rknn has no sidecar matcha-t32.json.*convert_rknn.py"):
        load_bucket(d / "matcha-rknn" / "matcha-t32.rknn", "matcha")


# ---------------------------------------------------------------- the same graphs through rknn-toolkit2

def test_contract_graphs_build_for_rk3576_and_simulate_like_onnxruntime(tmp_path: Path) -> None:
    import os
    import subprocess

    from rkvoice.config import ROOT

    py = Path(os.environ.get("RKNN_TOOLKIT_VENV", "/tmp/rknn-tk-venv")) / "bin" / "python"
    if not py.exists():
        pytest.skip(f"rknn-toolkit2 venv not found at {py.parent.parent}: create it with "
                    "`python3 models/convert_rknn.py setup-venv --python python3.11` (1.5 GB)")
    decoder_graph(tmp_path / "a.onnx", 64, 600)
    vocos_graph(tmp_path / "v.onnx", 600)
    mu, mask = np.zeros((1, CHANNELS, 600), np.float32), np.zeros((1, 1, 600), np.float32)
    mu[..., :120] = mask[..., :120] = 1.0  # 30 tokens of 4 frames, aligned
    feeds: dict[str, np.ndarray] = {"mu": mu, "mask": mask,
             "noise": np.random.default_rng(0).standard_normal((1, 80, 600), dtype=np.float32),
             "noise_scale": np.array([0.667], np.float32), "decoder_frames": np.array([120], np.float32)}
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
    mel = np.full((1, 80, 600), -11.0, np.float32)
    mel[:, :, :120] = 0.0
    np.save(tmp_path / "mels.npy", mel)

    def convert(model, shapes, names):
        cmd = [str(py), str(ROOT / "models" / "convert_rknn.py"), "generic", "--onnx", str(tmp_path / model),
               "--out", str(tmp_path / (model + ".rknn")), "--simulate", "--json"]
        for n, shp in shapes.items():
            cmd += ["--shape", f"{n}={shp}"]
        for n in names:
            cmd += ["--feed", f"{n}={tmp_path / (n + '.npy')}"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
        assert res.returncode == 0, res.stderr[-2000:]
        return json.loads(next(line for line in res.stdout.splitlines() if line.startswith("{")))

    a = convert("a.onnx", {"mu": f"1,{CHANNELS},600", "mask": "1,1,600", "noise": "1,80,600", "noise_scale": "1",
                           "decoder_frames": "1"}, feeds)
    assert a["snr_db"]["mel"] >= 40, a
    v = convert("v.onnx", {"mels": "1,80,600"}, ["mels"])
    assert set(v["snr_db"]) == {"mag", "x", "y"} and min(v["snr_db"].values()) >= 40, v


# ---------------------------------------------------------------- assistant.py --check (matcha part)

def test_check_lists_buckets_and_refuses_a_sidecar_of_another_toolkit(tmp_path: Path, monkeypatch) -> None:
    from rkvoice.board import versions
    from rkvoice.cli import check

    models = tmp_path / "models"
    d = models / "board"
    (d / "matcha-rknn").mkdir(parents=True)
    (d / "matcha-zh-en").mkdir()
    voice_files(d / "matcha-zh-en")
    for stem, built in (("matcha-t32", "2.3.2"), ("matcha-t64", "2.3.2"), ("vocos-f600", "2.5.0")):
        (d / "matcha-rknn" / f"{stem}.rknn").write_bytes(b"RKNN")
        (d / "matcha-rknn" / f"{stem}.json").write_text(json.dumps({"toolkit_version": built}))
    rt = tmp_path / "librknnrt.so"
    rt.write_bytes(b"\x00librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)\x00")
    monkeypatch.setattr(versions, "LIBRKNNRT_PATHS", (rt,))
    monkeypatch.setattr(versions, "package_version", lambda d: {"rknn-toolkit-lite2": "2.3.2"}.get(d))
    cfg = Config(models=ModelsConfig(dir=str(models), profile="board"))
    st = check.check_stage(cfg, "tts", "matcha", Path("/nonexistent-manifest"))
    assert any("buckets: matcha-t32, matcha-t64, vocos-f600" in n for n in st.notes), st.notes
    assert [p for p in st.problems if "version mismatch" in p] == [
        ("version mismatch: vocos-f600.json says its model was built by rknn-toolkit2 2.5.0 but librknnrt is 2.3.2; "
         "rebuild it (./install.sh --profile board converts with 2.3.2)")]
    (d / "matcha-rknn" / "vocos-f600.json").write_text("not json")
    st = check.check_stage(cfg, "tts", "matcha", Path("/nonexistent-manifest"))
    assert any("vocos-f600.json is not a readable sidecar" in p for p in st.problems)


def test_rknn_files_open_through_the_runtime_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # tests/npu_sim.py swaps rkvoice.npu.runtime.open_model to run .rknn files in the simulator
    d = _rknn_dir(tmp_path, monkeypatch)
    opened: list[str] = []
    real = npu_runtime.open_model

    def spy(path, **kw):
        opened.append(Path(path).name)
        return real(path, **kw)

    monkeypatch.setattr(npu_runtime, "open_model", spy)
    engine(d, runtime="rknn").load()
    assert sorted(opened) == ["matcha-t16.rknn", "matcha-t32.rknn", "vocos-f200.rknn"]


def test_runtime_choice_between_rknn_files_and_their_onnx_twins(tmp_path: Path, monkeypatch) -> None:
    from rkvoice.tts import matcha_buckets as mb

    d = tmp_path / "m"
    d.mkdir()
    for stem in ("matcha-t32", "matcha-t64"):
        for suffix in (".rknn", ".onnx"):
            (d / (stem + suffix)).write_bytes(b"x")
    names = lambda runtime: [p.name for p in mb.find_models(d, "matcha-t*", runtime)]  # noqa: E731
    monkeypatch.setattr(mb, "module_found", lambda name: False)
    assert names("auto") == ["matcha-t32.onnx", "matcha-t64.onnx"]  # off the board: the twins
    assert names("rknn") == ["matcha-t32.rknn", "matcha-t64.rknn"]
    monkeypatch.setattr(mb, "module_found", lambda name: name == "rknnlite")
    assert names("auto") == ["matcha-t32.rknn", "matcha-t64.rknn"]  # the board: the NPU files
    assert names("onnx") == ["matcha-t32.onnx", "matcha-t64.onnx"]
    for p in d.glob("*.onnx"):
        p.unlink()
    monkeypatch.setattr(mb, "module_found", lambda name: False)
    assert names("auto") == ["matcha-t32.rknn", "matcha-t64.rknn"]  # only .rknn: load says what is missing
    missing = mb.voice_files(tmp_path, replace(MatchaConfig(), acoustic="x/matcha-t*", runtime="auto"))
    assert missing["acoustic"].name == "matcha-t*.rknn"  # named as the board install builds it
    assert [p.name for p in mb.find_models(d, "matcha-t64.rknn")] == ["matcha-t64.rknn"]
    with pytest.raises(RkvoiceError, match="auto, rknn, onnx"):
        MatchaConfig(runtime="npu")


def test_the_speaker_cuts_matcha_text_into_its_own_piece_lengths() -> None:
    from fakes import RuledSpeaker

    from rkvoice.audio.sinks import NullPlayer
    from rkvoice.turn import Turn

    class Voice:  # what the speaker sees of MatchaTts: a TtsEngine with piece_chars
        name, sample_rate, piece_chars = "matcha", 16000, (24, 40)
        languages: tuple[str, ...] = ("zh", "en")

        def load(self) -> None:
            pass

        def generate(self, text: str, sid: int = 0, speed: float = 1.0) -> tuple[np.ndarray, int]:
            return np.full(1600, 0.2, np.float32), 16000

    calls: list[tuple[int, int]] = []

    def split(text: str, first: int, chunk: int) -> list[str]:
        calls.append((first, chunk))
        return [text]

    cfg = Config()
    sp = RuledSpeaker(Voice(), NullPlayer(cfg), cfg, split=split)  # real clock: 0.2 s of audio plays out
    sp.load()
    turn = Turn()
    sp.start(turn)
    for piece in ("今天天气不错，", "我们出去走走吧。"):
        sp.say(turn, piece)
    sp.end(turn)
    assert sp.wait(turn, 10)
    sp.close()
    assert not turn.cancelled and turn.exception is None
    assert calls[-2:] == [(24, 40), (40, 40)] and (cfg.tts.first_chars, cfg.tts.chunk_chars) == (12, 40)
