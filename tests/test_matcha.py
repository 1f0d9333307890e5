"""Matcha engine: frontend, frame estimate, bucket splitting, and the whole path on tiny fake graphs.

The fake acoustic model has the real interface (x int64 [1,64], x_length, noise_scale,
length_scale -> mel [1,80,599]) and renders x_length*FRAMES_PER_TOKEN*length_scale voiced
frames followed by silence and, like the real fixed-shape model, a noise burst at the very end.
The fake vocoder maps mel [1,80,600] to mag/x/y [1,513,600]: a 437.5 Hz tone where the mel is
voiced, nothing where it is silent.
"""

from dataclasses import replace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package builds the tiny test graphs")
from onnx import TensorProto, helper  # noqa: E402

from rkvoice.config import Config, MatchaConfig, ModelsConfig, TtsConfig  # noqa: E402
from rkvoice.errors import RkvoiceError  # noqa: E402
from rkvoice.tts.matcha_engine import MatchaTts  # noqa: E402
from rkvoice.tts.matcha_frames import Bucket, FrameEstimator, choose_bucket, naive_frames, split_units  # noqa: E402
from rkvoice.tts.matcha_frontend import MatchaFrontend, Unit, ids_of, ipa_to_tokens, token_count  # noqa: E402

ZH = "你好今天天气不错我们出去走走吧是的这个那个时间地点人物事情开始结束一二三四五六七八九十"
TOKENS_EN = list("həlˈoʊpaɪθnɛkstwɹdmAIOWɡ")
FRAMES_PER_TOKEN = 4  # fake acoustic: voiced frames per real token


def _voice_files(d):
    toks = ["_", " "] + [f"p{i}" for i in range(60)] + [",", ".", "?", "!"] + TOKENS_EN
    toks = list(dict.fromkeys(toks))
    (d / "tokens.txt").write_text("".join(f"{t} {i}\n" if t != " " else f"  {i}\n" for i, t in enumerate(toks)),
                                  encoding="utf-8")
    lines = [f"{c} p{(2 * i) % 60} p{(2 * i + 1) % 60}" for i, c in enumerate(ZH)]
    lines += ["你好 p1 p2 p3 p4", "天气 p5 p6 p7 p8", "ok p9 p10"]
    (d / "lexicon.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _frontend(tmp_path, phonemizer=None):
    _voice_files(tmp_path)
    return MatchaFrontend.from_files(tmp_path / "lexicon.txt", tmp_path / "tokens.txt", phonemizer)


def fake_ipa(word):
    return {"hello": "həlˈoʊ", "python": "pˈaɪθən", "next": "nˈɛkst"}.get(word.lower(), "")


# ---------------------------------------------------------------- frontend

def test_frontend_longest_match_punct_and_english(tmp_path):
    fe = _frontend(tmp_path, fake_ipa)
    units = fe.units("你好，天气不错。Hello Python！")
    assert [u.text for u in units] == ["你好", ",", "天气", "不", "错", ".", "Hello", "Python", "!"]
    assert [u.kind for u in units] == ["zh", "punct", "zh", "zh", "zh", "punct", "en", "en", "punct"]
    t2i = fe.token2id
    # espeak IPA goes through the zh-en replacements: oʊ -> O, aɪ -> I; a blank joins English words
    assert units[6].ids == tuple(t2i[t] for t in ipa_to_tokens("həlˈoʊ")) + (t2i[" "],)
    assert ipa_to_tokens("həlˈoʊ") == ["h", "ə", "l", "ˈ", "O"]
    assert ipa_to_tokens("pˈaɪθən") == ["p", "ˈ", "I", "θ", "ə", "n"]


def test_frontend_lexicon_english_and_oov_skipped(tmp_path):
    fe = _frontend(tmp_path, None)
    units = fe.units("OK 你好 Zebra ☃ 吗")
    assert [u.text for u in units] == ["OK", "你好"]  # ok from the lexicon; Zebra/☃/吗 unknown
    assert ids_of(units) == list(units[0].ids + units[1].ids)
    assert ids_of(units, add_blank=True, pad_id=0)[::2] == [0] * (token_count(units) + 1)
    assert token_count(units, add_blank=True) == 2 * token_count(units) + 1


def test_frontend_bad_files_are_named(tmp_path):
    with pytest.raises(RkvoiceError, match="tokens file .*missing.txt"):
        MatchaFrontend.from_files(tmp_path / "lex.txt", tmp_path / "missing.txt")
    (tmp_path / "t.txt").write_text("a x\n")
    with pytest.raises(RkvoiceError, match="t.txt:1"):
        MatchaFrontend.from_files(tmp_path / "lex.txt", tmp_path / "t.txt")


# ---------------------------------------------------------------- frame estimate and buckets

def _zh_units(n):
    return [Unit(ZH[i % len(ZH)], (1, 2), "zh") for i in range(n)]


def test_estimate_corrects_chinese_overestimate_by_30_to_40_percent_before_margin():
    est = FrameEstimator(margin=1.0)
    b = Bucket(64, 599)
    # two tokens (initial + final) per syllable: the naive token-linear estimate is 30-40 % over
    for n in (16, 24, 31):
        units = _zh_units(n)
        naive = naive_frames(units, b)
        ours = est.frames(units)
        assert 1.25 <= naive / ours <= 1.45, (n, naive, ours)


def test_estimate_grows_with_text_and_shrinks_with_speed():
    est = FrameEstimator()
    f = [est.frames(_zh_units(n)) for n in (1, 5, 10, 20)]
    assert f == sorted(f) and len(set(f)) == 4
    u = _zh_units(10)
    assert est.frames(u, speed=2.0) < est.frames(u) < est.frames(u, speed=0.5)
    assert abs(est.frames(u, speed=2.0) * 2 - est.frames(u)) <= 2


def test_estimate_depends_on_language():
    est = FrameEstimator(margin=1.0)
    zh = [Unit("你", (1, 2), "zh")]
    en = [Unit("hi", (1, 2), "en")]
    # one Chinese syllable (two tokens) lasts longer than two English phones
    assert est.frames(zh) > est.frames(en)
    pause = [Unit(",", (3,), "punct")]
    assert est.frames(zh + pause) > est.frames(zh)


def test_bucket_parse_and_choice():
    assert Bucket.parse("64x599") == Bucket(64, 599) == Bucket.parse(" 64:599 ")
    with pytest.raises(RkvoiceError, match="TOKENSxFRAMES"):
        Bucket.parse("64")
    bs = [Bucket(64, 599), Bucket(32, 300)]
    assert choose_bucket(bs, 20, 200) == Bucket(32, 300)
    assert choose_bucket(bs, 20, 400) == Bucket(64, 599)
    assert choose_bucket(bs, 40, 100) == Bucket(64, 599)


def test_split_respects_bucket_and_cuts_after_punctuation(tmp_path):
    fe = _frontend(tmp_path)
    text = "今天天气不错，我们出去走走吧。这个时间地点人物事情开始结束，一二三四五六七八九十，是的我们开始。"
    units = fe.units(text)
    assert token_count(units) > 64
    pieces = split_units(units, [Bucket(64, 599)], FrameEstimator())
    assert len(pieces) >= 2
    assert all(token_count(p) <= 64 for p in pieces)
    assert [u for p in pieces for u in p if u.kind != "punct"] == [u for u in units if u.kind != "punct"]
    assert all(p[-1].kind == "punct" for p in pieces[:-1])  # every cut is at a clause end here


def test_split_without_punctuation_cuts_between_words_and_by_frames():
    units = [Unit("你好", (1,) * 4, "zh")] * 40
    pieces = split_units(units, [Bucket(64, 599)], FrameEstimator())
    assert all(token_count(p) <= 64 for p in pieces) and sum(len(p) for p in pieces) == 40
    # frames bind before tokens when the bucket is short in frames
    est = FrameEstimator()
    small = split_units(_zh_units(30), [Bucket(64, 200)], est)
    assert len(small) > 1 and all(est.frames(p) <= 200 for p in small)


def test_split_cuts_an_overlong_word_into_token_slices():
    units = [Unit("supercalifragilistic", tuple(range(100)), "en")]
    pieces = split_units(units, [Bucket(64, 5990)], FrameEstimator())
    assert [token_count(p) for p in pieces] == [64, 36]


# ---------------------------------------------------------------- whole engine on fake graphs

def _save(graph, path, meta=None):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if meta:
        helper.set_model_props(model, meta)
    onnx.save(model, str(path))


def _fake_acoustic(path, tokens=64, frames=599, dynamic=False):
    T = helper.make_tensor_value_info
    f = TensorProto.FLOAT
    inputs = [T("x", TensorProto.INT64, [1, "N" if dynamic else tokens]), T("x_length", TensorProto.INT64, [1]),
              T("noise_scale", f, [1]), T("length_scale", f, [1])]
    out = T("mel", f, [1, 80, "F" if dynamic else frames])
    init = [helper.make_tensor("t", f, [1, 1, frames], np.arange(frames, dtype=np.float32)),
            helper.make_tensor("k", f, [1], [float(FRAMES_PER_TOKEN)]),
            helper.make_tensor("zeros80", f, [1, 80, 1], np.zeros(80, np.float32)),
            helper.make_tensor("burst", f, [1, 1, frames],
                               np.r_[np.zeros(frames - 6), np.ones(6)].astype(np.float32)),
            helper.make_tensor("two", f, [1], [2.0]), helper.make_tensor("eleven", f, [1], [11.0]),
            helper.make_tensor("zero_f", f, [1], [0.0])]
    nodes = [
        helper.make_node("Cast", ["x_length"], ["lenf"], to=f),
        helper.make_node("Mul", ["lenf", "k"], ["v0"]),
        helper.make_node("Mul", ["v0", "length_scale"], ["voiced_n"]),
        helper.make_node("Less", ["t", "voiced_n"], ["vb"]),
        helper.make_node("Cast", ["vb"], ["v"], to=f),
        helper.make_node("Max", ["v", "burst"], ["vv"]),            # noise burst in the last frames
        helper.make_node("Mul", ["vv", "eleven"], ["s"]),
        helper.make_node("Sub", ["s", "eleven"], ["logmel0"]),     # voiced 0, silent -11
        # x and noise_scale feed a term that is 0 for valid inputs (ids >= 0), so no input is unused
        helper.make_node("Cast", ["x"], ["xf"], to=f),
        helper.make_node("ReduceMin", ["xf"], ["xmin"], keepdims=0),
        helper.make_node("Abs", ["noise_scale"], ["ns"]),
        helper.make_node("Add", ["xmin", "ns"], ["xn"]),
        helper.make_node("Min", ["xn", "zero_f"], ["nil"]),
        helper.make_node("Add", ["logmel0", "nil"], ["logmel"]),
        helper.make_node("Add", ["logmel", "zeros80"], ["mel"]),
    ]
    if dynamic:  # output only as many frames as x has tokens * k (like the real ONNX Matcha)
        nodes[-1] = helper.make_node("Add", ["logmel", "zeros80"], ["mel_full"])
        init += [helper.make_tensor("zero_i", TensorProto.INT64, [1], [0]),
                 helper.make_tensor("ax", TensorProto.INT64, [1], [2])]
        nodes += [helper.make_node("Ceil", ["voiced_n"], ["vc"]),
                  helper.make_node("Cast", ["vc"], ["end"], to=TensorProto.INT64),
                  helper.make_node("Slice", ["mel_full", "zero_i", "end", "ax"], ["mel"])]
    _save(helper.make_graph(nodes, "fake_matcha", inputs, [out], initializer=init), path,
          {"sample_rate": "16000", "model_type": "matcha-tts"})


def _fake_vocos(path, frames=600):
    T = helper.make_tensor_value_info
    f = TensorProto.FLOAT
    fr = frames if frames else "T"
    bins = 513
    spectral = np.zeros((1, bins, 1), np.float32)
    spectral[0, 28, 0] = 60.0  # 28 * 16000 / 1024 = 437.5 Hz
    # phase advance per frame of bin k is 2*pi*k*hop/n_fft = k*pi/2; kept small (mod 2*pi, frame
    # index mod 4) so fp16 on the NPU represents it
    phase_rate = (np.pi / 2 * (np.arange(bins) % 4)).astype(np.float32).reshape(1, bins, 1)
    init = [helper.make_tensor("spec", f, [1, bins, 1], spectral),
            helper.make_tensor("rate", f, [1, bins, 1], phase_rate),
            helper.make_tensor("eleven", f, [1], [11.0]),
            helper.make_tensor("ones", f, [1, bins, 1], np.ones(bins, np.float32)),
            helper.make_tensor("zero_f", f, [1], [0.0])]
    nodes = [
        helper.make_node("ReduceMean", ["mels"], ["m"], axes=[1], keepdims=1),  # [1,1,T]
        helper.make_node("Add", ["m", "eleven"], ["m1"]),
        helper.make_node("Div", ["m1", "eleven"], ["gate"]),                   # voiced 1, silent 0
        helper.make_node("Mul", ["gate", "spec"], ["mag"]),
        helper.make_node("Shape", ["mels"], ["shp"]),
        helper.make_node("Gather", ["shp", "idx2"], ["tn"], axis=0),
        helper.make_node("Range", ["zero", "tn_s", "one"], ["ti"]),
        helper.make_node("Mod", ["ti", "four"], ["tmod"]),
        helper.make_node("Cast", ["tmod"], ["tf"], to=f),
        helper.make_node("Unsqueeze", ["tf", "axes01"], ["t3"]),                # [1,1,T]
        helper.make_node("Mul", ["rate", "t3"], ["ph0"]),
        # a term that is always 0 but depends on the input keeps x/y from being constant-folded
        helper.make_node("Abs", ["m"], ["am"]),
        helper.make_node("Min", ["am", "zero_f"], ["nil"]),
        helper.make_node("Add", ["ph0", "nil"], ["ph"]),
        helper.make_node("Cos", ["ph"], ["x"]),
        helper.make_node("Sin", ["ph"], ["y"]),
    ]
    init += [helper.make_tensor("idx2", TensorProto.INT64, [1], [2]),
             helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("four", TensorProto.INT64, [], [4]),
             helper.make_tensor("axes01", TensorProto.INT64, [2], [0, 1])]
    nodes.insert(6, helper.make_node("Squeeze", ["tn"], ["tn_s"]))
    graph = helper.make_graph(nodes, "fake_vocos", [T("mels", f, [1, 80, fr])],
                              [T("mag", f, [1, bins, fr]), T("x", f, [1, bins, fr]), T("y", f, [1, bins, fr])],
                              initializer=init)
    _save(graph, path, {"n_fft": "1024", "hop_length": "256", "win_length": "1024", "window_type": "hann",
                        "center": "1", "normalized": "0"})


def _engine(tmp_path, dynamic=False, **matcha):
    d = tmp_path / "matcha"
    d.mkdir(exist_ok=True)
    _voice_files(d)
    _fake_acoustic(d / "matcha.onnx", dynamic=dynamic)
    _fake_vocos(d / "vocos.onnx", frames=0 if dynamic else 600)
    mc = replace(MatchaConfig(), dir=str(d), acoustic="matcha.onnx", vocoder="vocos.onnx", lexicon="lexicon.txt",
                 tokens="tokens.txt", **matcha)
    cfg = Config(tts=TtsConfig(matcha=mc), models=ModelsConfig(dir=str(tmp_path)))
    return MatchaTts(cfg, phonemizer=fake_ipa)


class _Spy:
    def __init__(self, rt):
        self.rt, self.calls = rt, []

    def __getattr__(self, k):
        return getattr(self.rt, k)

    def run(self, inputs):
        self.calls.append([np.asarray(a).copy() for a in inputs])
        return self.rt.run(inputs)


def test_engine_pads_to_bucket_cuts_at_estimate_and_trims(tmp_path):
    tts = _engine(tmp_path)
    tts.load()
    assert tts.sample_rate == 16000 and tts.stft.hop_length == 256
    tts.acoustic = _Spy(tts.acoustic)
    tts.vocoder = _Spy(tts.vocoder)
    text = "今天天气不错，我们出去走走吧。"
    audio, rate = tts.generate(text)
    assert rate == 16000 and audio.dtype == np.float32
    (call,) = tts.acoustic.calls
    x, xlen = call[0], int(call[1][0])
    units = tts.frontend.units(text)
    assert x.shape == (1, 64) and xlen == token_count(units) and (x[0, xlen:] == 0).all()
    (vcall,) = tts.vocoder.calls
    assert vcall[0].shape == (1, 80, 600)  # mel padded to the vocoder's fixed length
    est = tts.estimator.frames(units)
    voiced = xlen * FRAMES_PER_TOKEN
    # audio is cut at the estimate (never the full 599-frame window, so no end-burst) ...
    assert len(audio) <= 256 * est
    assert len(audio) < 256 * 599 // 2
    # ... and keeps the whole voiced part, the trim leaving at most 150 ms after it
    assert 256 * (voiced - 4) <= len(audio) <= 256 * voiced + 0.15 * 16000 + 1600
    tone = audio[2000:4000]
    spec = np.abs(np.fft.rfft(tone * np.hanning(len(tone))))
    assert abs(np.argmax(spec) * 16000 / len(tone) - 437.5) < 10
    assert np.sqrt(np.mean(tone ** 2)) > 0.01


def test_engine_tail_trim_removes_the_end_burst_when_the_estimate_reaches_it(tmp_path):
    # The fake model's burst sits in frames 593-598 (like the real fixed window's end noise).
    # Choose the margin so the estimate is 597 frames: the ISTFT then renders the burst and
    # the tail trim must remove it (a short loud run after silence).
    text = "今天天气不错。"
    probe = _engine(tmp_path)
    probe.load()
    units = probe.frontend.units(text)
    margin = 596.5 / (probe.estimator.seconds(units) * probe.estimator.frame_rate)
    tts = _engine(tmp_path, frame_margin=margin)
    tts.load()
    assert tts.estimator.frames(units) == 597
    tts.vocoder = _Spy(tts.vocoder)
    audio, _ = tts.generate(text)
    mel = tts.vocoder.calls[0][0]
    assert (mel[0, :, 593:597] == 0).all()  # the burst went into the vocoder ...
    voiced = token_count(units) * FRAMES_PER_TOKEN
    assert 256 * (voiced - 4) <= len(audio) <= 256 * voiced + 0.15 * 16000 + 1600  # ... and was trimmed


def test_engine_splits_long_text_into_bucket_pieces(tmp_path):
    tts = _engine(tmp_path)
    tts.load()
    tts.acoustic = _Spy(tts.acoustic)
    text = "今天天气不错，我们出去走走吧。这个时间地点人物事情开始结束，一二三四五六七八九十，是的我们开始。"
    audio, _ = tts.generate(text)
    assert len(tts.acoustic.calls) >= 2
    assert all(c[0].shape == (1, 64) and int(c[1][0]) <= 64 for c in tts.acoustic.calls)
    total_voiced = sum(int(c[1][0]) for c in tts.acoustic.calls) * FRAMES_PER_TOKEN
    assert len(audio) >= 256 * (total_voiced - 8 * len(tts.acoustic.calls))


def test_engine_speed_feeds_length_scale(tmp_path):
    tts = _engine(tmp_path)
    tts.load()
    tts.acoustic = _Spy(tts.acoustic)
    slow, _ = tts.generate("今天天气不错。", speed=0.5)
    fast, _ = tts.generate("今天天气不错。", speed=2.0)
    assert float(tts.acoustic.calls[0][3][0]) == pytest.approx(2.0)
    assert float(tts.acoustic.calls[1][3][0]) == pytest.approx(0.5)
    assert len(slow) > 2 * len(fast)
    with pytest.raises(RkvoiceError, match="speed"):
        tts.generate("你好", speed=0)


def test_engine_dynamic_onnx_uses_the_true_frame_count(tmp_path):
    tts = _engine(tmp_path, dynamic=True)
    tts.load()
    tts.acoustic = _Spy(tts.acoustic)
    audio, _ = tts.generate("Hello Python，你好。")
    (call,) = tts.acoustic.calls
    n = int(call[1][0])
    assert call[0].shape == (1, n)  # no padding for a dynamic model
    assert abs(len(audio) - 256 * (n * FRAMES_PER_TOKEN - 1)) <= 256 * 2


def test_engine_english_tokens_come_from_espeak_phonemes(tmp_path):
    tts = _engine(tmp_path)
    tts.load()
    units = tts.frontend.units("Hello 你好")
    t2i = tts.frontend.token2id
    assert units[0].ids == tuple(t2i[t] for t in ["h", "ə", "l", "ˈ", "O"])


def test_engine_missing_files_named_with_fix(tmp_path):
    cfg = Config(tts=TtsConfig(matcha=replace(MatchaConfig(), dir=str(tmp_path / "none"))))
    with pytest.raises(RkvoiceError, match=r"acoustic .*matcha-rknn/matcha-s64.rknn.*install.sh --profile board") as e:
        MatchaTts(cfg).load()
    assert e.value.code == "missing-model"


def test_engine_generate_before_load(tmp_path):
    with pytest.raises(RkvoiceError, match="load"):
        _engine(tmp_path).generate("你好")


def test_empty_or_unspeakable_text_gives_no_audio(tmp_path):
    tts = _engine(tmp_path)
    tts.load()
    audio, rate = tts.generate("☃☃")
    assert len(audio) == 0 and rate == 16000


# ---------------------------------------------------------------- the same graphs through rknn-toolkit2

def test_fake_matcha_and_vocos_build_for_rk3576_and_simulate_like_onnxruntime(tmp_path):
    import json
    import os
    import subprocess
    from pathlib import Path

    from rkvoice.config import ROOT

    py = Path(os.environ.get("RKNN_TOOLKIT_VENV", "/tmp/rknn-tk-venv")) / "bin" / "python"
    if not py.exists():
        pytest.skip(f"rknn-toolkit2 venv not found at {py.parent.parent}: create it with "
                    "`python3 models/convert_rknn.py setup-venv --python python3.11` (1.5 GB)")
    _fake_acoustic(tmp_path / "a.onnx")
    _fake_vocos(tmp_path / "v.onnx")
    x = np.zeros((1, 64), np.int64)
    x[0, :30] = np.arange(1, 31)
    feeds = {"x": x, "x_length": np.array([30], np.int64), "noise_scale": np.array([0.667], np.float32),
             "length_scale": np.array([1.0], np.float32)}
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
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-2000:]
        return json.loads(next(line for line in res.stdout.splitlines() if line.startswith("{")))

    a = convert("a.onnx", {"x": "1,64", "x_length": "1", "noise_scale": "1", "length_scale": "1"}, feeds)
    assert a["snr_db"]["mel"] >= 40, a
    v = convert("v.onnx", {"mels": "1,80,600"}, ["mels"])
    assert set(v["snr_db"]) == {"mag", "x", "y"} and min(v["snr_db"].values()) >= 40, v


def test_engine_rejects_a_graph_that_is_not_matcha(tmp_path):
    tts = _engine(tmp_path)
    _fake_vocos(tmp_path / "matcha" / "matcha.onnx")  # a vocoder where the acoustic model belongs
    with pytest.raises(RkvoiceError, match="not a Matcha acoustic model: inputs mels"):
        tts.load()
