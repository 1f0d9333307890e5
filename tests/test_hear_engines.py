"""ASR and wake engine registries, model-file checks, and the board engines (skipped without their models)."""

from __future__ import annotations

import numpy as np
import pytest

from rkvoice.config import load_config, parse_override
from rkvoice.errors import RkvoiceError
from rkvoice.hear.asr import ASR, asr_name, create_asr
from rkvoice.hear.kws import KwsWake, keywords_line, kws_dir, phrase_tokens
from rkvoice.hear.paraformer_asr import ParaformerAsr, paraformer_dir
from rkvoice.hear.sources import read_wav
from rkvoice.hear.wake import AsrMatchWake
from rkvoice.hear.wake_registry import WAKE, create_wake, wake_name
from rkvoice.hear.whisper_asr import WhisperAsr, simplify
from tests.support import cer


def cfg(*items: str):
    return load_config([parse_override(i) for i in items])


def test_auto_picks_engines_by_profile():
    assert asr_name(cfg("models.profile=portable")) == "whisper"
    assert asr_name(cfg("models.profile=board")) == "paraformer"
    assert wake_name(cfg("models.profile=portable")) == "asr-match"
    assert wake_name(cfg("models.profile=board")) == "kws"
    assert asr_name(cfg("hear.asr=paraformer")) == "paraformer"
    assert set(ASR.names()) == {"paraformer", "whisper"} and set(WAKE.names()) == {"asr-match", "kws"}


def test_unknown_engines_name_the_choices():
    with pytest.raises(RkvoiceError, match="choose one of: paraformer, whisper"):
        create_asr(cfg("hear.asr=vosk"))
    with pytest.raises(RkvoiceError, match="choose one of: asr-match, kws"):
        create_wake(cfg("hear.wake=porcupine"), asr=object())
    assert isinstance(create_wake(cfg("hear.wake=asr-match"), asr=object()), AsrMatchWake)


def test_missing_model_files_are_clear_errors(tmp_path):
    with pytest.raises(RkvoiceError) as err:
        WhisperAsr(cfg(f"models.dir={tmp_path}")).load()
    assert err.value.code == "missing-model" and "model.bin" in str(err.value) and "install.sh" in str(err.value)
    with pytest.raises(RkvoiceError, match="model.int8.onnx and tokens.txt"):
        ParaformerAsr(cfg(f"hear.paraformer_dir={tmp_path}")).load()
    with pytest.raises(RkvoiceError, match=r"encoder\*\.onnx"):
        KwsWake(cfg(f"hear.kws_dir={tmp_path}")).load()


def test_simplify_converts_traditional_and_drops_the_prompt_echo():
    assert simplify("現在幾點了？") == "现在几点了？"
    assert simplify("以下是普通话的句子。小誌") == "小志"


def test_keyword_line_is_the_phrase_in_model_tokens(tmp_path):
    assert phrase_tokens("小智小智") == ["x", "iǎo", "zh", "ì"] * 2
    tokens = tmp_path / "tokens.txt"  # named in the errors; check_kws reads it into the table
    known = {t: i for i, t in enumerate(["<blk>", "x", "iǎo", "zh", "ì", "n", "ǐ"])}
    assert keywords_line("小智小智", tokens, known) == "x iǎo zh ì x iǎo zh ì @小智小智"
    with pytest.raises(RkvoiceError, match="unknown: h ǎo"):
        keywords_line("你好", tokens, known)
    # spaces and punctuation are not spoken; Latin letters and digits would silently drop out
    assert keywords_line("小智，小智 ", tokens, known) == "x iǎo zh ì x iǎo zh ì @小智小智"
    for phrase, why in (("Hey小智", "cannot spell: H e y"), ("小智2", "cannot spell: 2"), ("！", "no characters")):
        with pytest.raises(RkvoiceError, match=why):
            keywords_line(phrase, tokens, known)


def _require(path, what):
    if not path.is_file():
        pytest.skip(f"{what} {path} is absent: board profile model (./install.sh --profile board)")


def test_paraformer_transcribes(hear_fixtures):
    c = cfg()
    _require(paraformer_dir(c) / "tokens.txt", "Paraformer")
    asr = ParaformerAsr(c)
    asr.load()
    text = asr.transcribe(read_wav(hear_fixtures["req_weather"][0]))
    assert cer("今天天气怎么样", text) <= 0.15, text


def test_kws_spots_the_phrase_and_nothing_else(hear_fixtures):
    c = cfg()
    _require(kws_dir(c) / "tokens.txt", "keyword spotter")
    kws = KwsWake(c)
    kws.load()

    def spot(name):
        kws.restart(0)
        audio = read_wav(hear_fixtures[name][0])
        hits = [kws.accept(audio[i : i + 512]) for i in range(0, len(audio), 512)] + [kws.flush()]
        return [h for h in hits if h is not None]

    assert len(spot("wake_alone")) == 1
    assert spot("req_weather") == [] and spot("noise") == []
    kws.close()


def test_hear_config_ranges_are_checked():
    with pytest.raises(RkvoiceError, match="hear.max_request_s: 0.5 is out of range"):
        cfg("hear.max_request_s=0.5")
    with pytest.raises(RkvoiceError, match="hear.ack"):
        cfg("hear.ack=beep")
    with pytest.raises(RkvoiceError, match="unknown config key 'hear.wakeword'"):
        cfg("hear.wakeword=你好")


class LengthAsr:
    """Says the wake phrase (or not) and records how much audio each call got."""

    name = "lengths"

    def __init__(self, wake_at_start: bool) -> None:
        self.wake_at_start = wake_at_start
        self.seconds: list[float] = []

    def transcribe(self, samples):
        self.seconds.append(len(samples) / 16000)
        head = "小智小智" if self.wake_at_start else "今天的新闻"
        return head + ("，帮我关灯" if len(samples) > 40000 else "")


def _segment(seconds: float):
    from rkvoice.hear.vad import Segment

    return Segment(np.zeros(int(seconds * 16000), np.float32), 1.0, 1.0 + seconds, 1.5 + seconds)


def test_long_unrelated_speech_costs_one_short_probe():
    asr = LengthAsr(wake_at_start=False)
    wake = AsrMatchWake(cfg(), asr)
    assert wake.check_segment(_segment(9.0)) is None
    assert asr.seconds == [2.5]


def test_long_wake_segment_is_probed_then_transcribed_whole():
    asr = LengthAsr(wake_at_start=True)
    hit = AsrMatchWake(cfg(), asr).check_segment(_segment(6.0))
    assert asr.seconds == [2.5, 6.0]
    assert hit is not None and hit.request == "帮我关灯" and hit.end_s == 7.0


def test_short_segments_and_probe_off_transcribe_whole_once():
    asr = LengthAsr(wake_at_start=True)
    AsrMatchWake(cfg(), asr).check_segment(_segment(3.5))
    AsrMatchWake(cfg("hear.wake_probe_s=0"), asr).check_segment(_segment(9.0))
    assert asr.seconds == [3.5, 9.0]


def test_native_decode_failures_become_asr_errors():
    class Broken:
        def transcribe(self, *a, **k):
            raise RuntimeError("ctranslate2 out of memory")

    asr = WhisperAsr(cfg())
    asr._model = Broken()
    with pytest.raises(RkvoiceError) as err:
        asr.transcribe(np.zeros(16000, np.float32))
    assert err.value.stage == "asr" and err.value.code == "decode-failed" and "out of memory" in str(err.value)
