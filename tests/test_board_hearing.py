"""The board's hearing without a board: sherpa-onnx 2.0.1 KWS + Paraformer on the stand-in models.

The stand-ins (made by models/standins/make_hearing.py, built once per builder into
.cache/standins/hearing-<key>/ by models/standins/hearing_cache.py, never committed) are the real
architectures with random weights: a streaming zipformer2 transducer keyword spotter and an offline
Paraformer, int8, with the published I/O names and metadata. ``kws-wake`` emits the tokens of
你好小智 whatever it hears; ``paraformer-rigged`` transcribes every utterance as 几点. Everything here
skips, naming the command that builds them, where the stand-ins are neither built nor buildable (no
stand-in venv); with the portable install and that venv (.ci/run makes both) nothing skips.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fakes import Stillness

from models.prepare_piper import with_onnx_metadata
from models.standins import hearing_cache
from rkvoice.cli import entry as cli
from rkvoice.config import ROOT, load_config, parse_override
from rkvoice.errors import RkvoiceError
from rkvoice.hear.kws import KwsWake, check_kws, model_files
from rkvoice.hear.paraformer_asr import ParaformerAsr, check_paraformer
from rkvoice.hear.session import HearSession
from rkvoice.hear.sources import WavFileSource
from rkvoice.hear.vad import Segmenter, vad_model_path
from rkvoice.timeline import Ev
from rkvoice.tts.vits import read_onnx_metadata
from rkvoice.turn import Turn
from rkvoice.turn_loop import TurnLoop
from tests.support import ManualClock, SteppedSource

FIXTURES = ROOT / "tests" / "fixtures"
STANDINS = hearing_cache.built_dir()
RECORD = FIXTURES / "board-hearing" / "standins.json"  # what the script made on the machine that recorded it
BOARD_CONFIG = FIXTURES / "board-hearing.yaml"
PHRASE, TOKEN = "你好小智", "几点"
PHRASE_TOKENS = ["n", "ǐ", "h", "ǎo", "x", "iǎo", "zh", "ì"]
PY = sys.executable

pytestmark = pytest.mark.usefixtures("hearing_standins")


def cfg(*items: str):
    return load_config([parse_override(i) for i in items], files=[ROOT / "config.yaml", BOARD_CONFIG])


def rigged() -> list[str]:
    return [f"hear.kws_dir={STANDINS / 'kws-wake'}", f"hear.paraformer_dir={STANDINS / 'paraformer-rigged'}"]


def random_models() -> list[str]:
    return [f"hear.kws_dir={STANDINS / 'kws'}", f"hear.paraformer_dir={STANDINS / 'paraformer'}"]


@pytest.fixture(scope="module")
def vad_ok():
    path = vad_model_path(load_config())
    if not path.is_file():
        pytest.skip(f"silero VAD model {path} is absent (run ./install.sh)")


def feed(wake: KwsWake, audio: np.ndarray, frame: int = 512) -> list[float]:
    hits = [wake.accept(audio[i : i + frame]) for i in range(0, len(audio), frame)]
    return [h.at_s for h in hits if h is not None]


# --- the stand-ins are what the script made ---------------------------------------------------


def test_the_built_standins_are_the_scripts_record():
    """The cache holds what the script wrote (its standins.json: every file's size and sha256), and
    that matches the record committed with the script: the same phrase, tokens, versions, files,
    sizes and token lists. The ONNX files are compared by size only: some of their floats come
    from the CPU's math libraries (torch's sin/cos for a positional-encoding table computed at
    export, the least-squares solve that rigs the wake joiner) and differ in the last bit between
    CPU models, so their bytes match the record only on the kind of CPU that made it."""
    built = json.loads((STANDINS / "standins.json").read_text(encoding="utf-8"))
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    assert built["phrase"] == PHRASE and built["phrase_tokens"] == PHRASE_TOKENS and built["token"] == TOKEN
    assert {k: v for k, v in built.items() if k != "files"} == {k: v for k, v in record.items() if k != "files"}
    assert built["files"].keys() == record["files"].keys()
    for rel, info in built["files"].items():
        data = (STANDINS / rel).read_bytes()
        assert len(data) == info["bytes"] and hashlib.sha256(data).hexdigest() == info["sha256"], rel
        assert info["bytes"] == record["files"][rel]["bytes"], rel
        if not rel.endswith(".onnx"):
            assert info["sha256"] == record["files"][rel]["sha256"], rel


def test_standins_carry_the_published_io_and_metadata():
    import onnxruntime as ort

    files = model_files(STANDINS / "kws")
    enc = ort.InferenceSession(str(files["encoder"]))
    assert enc.get_inputs()[0].name == "x" and enc.get_outputs()[0].name == "encoder_out"
    meta = read_onnx_metadata(files["encoder"])
    assert meta["model_type"] == "zipformer2" and meta["decode_chunk_len"] == "32" and meta["T"] == "45"
    assert read_onnx_metadata(files["decoder"])["context_size"] == "2"
    para = STANDINS / "paraformer" / "model.int8.onnx"
    sess = ort.InferenceSession(str(para))
    assert [i.name for i in sess.get_inputs()] == ["speech", "speech_lengths"]
    assert [o.name for o in sess.get_outputs()] == ["logits", "token_num"]
    pmeta = read_onnx_metadata(para)
    assert pmeta["lfr_window_size"] == "7" and pmeta["lfr_window_shift"] == "6"
    assert len(pmeta["neg_mean"].split(",")) == 560 == len(pmeta["inv_stddev"].split(","))
    assert any(n.op_type == "MatMulInteger" or "Integer" in n.op_type for n in _onnx_nodes(para))  # int8


def _onnx_nodes(path: Path):
    import onnx

    return onnx.load(str(path)).graph.node


# --- the keyword spotter ----------------------------------------------------------------------


def test_rigged_kws_detects_resets_and_detects_again(caplog):
    wake = KwsWake(cfg(*rigged()))
    wake.load()
    try:
        with caplog.at_level(logging.INFO, logger="rkvoice.hear.kws"):
            hits = feed(wake, np.zeros(3 * 16000, np.float32))
        # first detection after 0.8 s of audio, then one per 0.64 s: each detection resets the stream
        assert hits[:3] == pytest.approx([0.8, 1.44, 2.08], abs=0.04)
        wake.restart(10 * 16000)  # a new stream starting at stream time 10 s: the same latency again
        assert feed(wake, np.zeros(16000, np.float32))[0] == pytest.approx(10.8, abs=0.04)
        assert not any("is not the wake phrase" in r.getMessage() for r in caplog.records)
    finally:
        wake.close()


def test_random_kws_runs_on_speech_noise_and_silence_without_a_crash():
    wake = KwsWake(cfg(*random_models(), "hear.wake_phrase=小智小智"))
    wake.load()
    rng = np.random.default_rng(3)
    for audio in (np.zeros(16000, np.float32), (rng.standard_normal(32000) * 0.3).astype(np.float32)):
        assert isinstance(feed(wake, audio), list)
    wake.flush()  # decodes the tail of the stream
    with pytest.raises(RkvoiceError, match="mono"):
        wake.accept(np.zeros((512, 2), np.float32))
    wake.close()


class _Result:
    def __init__(self, keyword: str) -> None:
        self.keyword = keyword
        self.tokens: list[str] = []
        self.timestamps: list[float] = []


class _Spotter:
    """A KeywordSpotter whose stream also holds another keyword (create_stream adds, not replaces)."""

    def __init__(self, keywords: list[str]) -> None:
        self.keywords = keywords
        self.resets = 0
        self.keyword_spotter = self

    def is_ready(self, _s):
        return bool(self.keywords)

    def decode_stream(self, _s):
        pass

    def get_result(self, _s):
        return _Result(self.keywords.pop(0))

    def reset_stream(self, _s):
        self.resets += 1


def test_only_the_configured_phrase_counts(caplog):
    wake = KwsWake(cfg(*rigged()))
    wake._kws, wake._stream = _Spotter(["小智小智", "", PHRASE]), object()
    with caplog.at_level(logging.INFO, logger="rkvoice.hear.kws"):
        hit = wake._decode()
    assert hit is not None and hit.text == PHRASE and wake._kws.resets == 2
    assert [r.getMessage() for r in caplog.records if "not the wake phrase" in r.getMessage()] == [
        f"keyword '小智小智' is not the wake phrase {PHRASE!r}: ignored"]


def test_the_stream_keywords_add_to_the_file_and_results_clear_when_read():
    """The two sherpa-onnx facts kws.py relies on, on the real library."""
    import sherpa_onnx

    files = model_files(STANDINS / "kws-wake")
    line = check_kws(cfg(*rigged()))[0]
    assert line == " ".join(PHRASE_TOKENS) + f" @{PHRASE}"
    spotter = sherpa_onnx.KeywordSpotter(
        tokens=str(files["tokens"]), encoder=str(files["encoder"]), decoder=str(files["decoder"]),
        joiner=str(files["joiner"]), keywords_file=str(_tmp_keywords(line)), num_threads=1,
    )
    stream = spotter.create_stream("q ù @去")  # an extra keyword: the file's phrase still fires
    stream.accept_waveform(16000, np.zeros(16000, np.float32))
    seen = []
    while spotter.is_ready(stream):
        spotter.decode_stream(stream)
        first = spotter.keyword_spotter.get_result(stream)
        if first.keyword:
            seen.append((first.keyword, list(first.tokens), spotter.keyword_spotter.get_result(stream).keyword))
            spotter.reset_stream(stream)
    assert seen and seen[0] == (PHRASE, PHRASE_TOKENS, "")  # read once: a second read is empty


def _tmp_keywords(line: str) -> Path:
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".txt")
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(line + "\n")
    return Path(name)


# --- Paraformer -------------------------------------------------------------------------------


def test_rigged_paraformer_transcribes_any_utterance_as_its_token():
    asr = ParaformerAsr(cfg(*rigged()))
    asr.load()
    rng = np.random.default_rng(5)
    for seconds in (0.1, 1.0, 4.0):
        assert asr.transcribe((rng.standard_normal(int(seconds * 16000)) * 0.1).astype(np.float32)) == TOKEN


def test_paraformer_edges_never_crash(tmp_path):
    asr = ParaformerAsr(cfg(*random_models()))
    asr.load()
    assert asr.transcribe(np.zeros(400, np.float32)) == ""  # 25 ms: no speech
    assert asr.transcribe(np.zeros(0, np.float32)) == ""
    assert isinstance(asr.transcribe(np.zeros(3 * 16000, np.float32)), str)  # silence
    with pytest.raises(RkvoiceError, match="mono"):
        asr.transcribe(np.zeros((16000, 2), np.float32))
    with pytest.raises(RkvoiceError, match="NaN"):
        asr.transcribe(np.full(16000, np.nan, np.float32))


# --- what sherpa-onnx exits on: shown in a subprocess, refused by us ----------------------------

KWS_SCRIPT = """
import sys, sherpa_onnx
d, line = sys.argv[1], sys.argv[2]
open(d + '/kw.txt', 'w', encoding='utf-8').write(line + '\\n')
import glob
g = lambda s: sorted(glob.glob(d + '/' + s + '*.onnx'))[0]
sherpa_onnx.KeywordSpotter(tokens=d + '/tokens.txt', encoder=g('encoder'), decoder=g('decoder'),
                           joiner=g('joiner'), keywords_file=d + '/kw.txt', num_threads=1)
print('created')
"""

PARA_SCRIPT = """
import sys, sherpa_onnx
d = sys.argv[1]
sherpa_onnx.OfflineRecognizer.from_paraformer(paraformer=d + '/model.int8.onnx', tokens=d + '/tokens.txt')
print('created')
"""


def _copy(src: str, tmp_path: Path) -> Path:
    dst = tmp_path / src
    shutil.copytree(STANDINS / src, dst)
    return dst


def _drop_meta(path: Path, key: str) -> None:
    meta = read_onnx_metadata(path)
    del meta[key]
    path.write_bytes(with_onnx_metadata(path.read_bytes(), meta))


def _rename_token(tokens: Path, old: str, new: str) -> None:
    lines = tokens.read_text(encoding="utf-8").splitlines()
    tokens.write_text("\n".join(new + line[len(old):] if line.startswith(old + " ") else line for line in lines) + "\n",
                      encoding="utf-8")


def _sherpa(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-c", script, *args], check=False, capture_output=True, text=True, timeout=120)


def test_a_wake_token_outside_tokens_txt_kills_sherpa_but_not_us(tmp_path):
    d = _copy("kws-wake", tmp_path)
    _rename_token(d / "tokens.txt", "ǐ", "i3")  # this model's token set has no ǐ
    run = _sherpa(KWS_SCRIPT, str(d), " ".join(PHRASE_TOKENS) + f" @{PHRASE}")
    assert run.returncode == 255 and "created" not in run.stdout, run.stderr[-300:]
    with pytest.raises(RkvoiceError) as err:
        KwsWake(cfg(f"hear.kws_dir={d}")).load()
    assert err.value.code == "bad-phrase" and "unknown: ǐ" in str(err.value) and "hear.wake_phrase" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("part", "key", "code"), [("encoder", "T", 255), ("decoder", "context_size", 255),
                                                   ("encoder", "model_type", -11)])
def test_kws_metadata_sherpa_dies_on_is_refused_first(tmp_path, part, key, code):
    d = _copy("kws-wake", tmp_path)
    _drop_meta(model_files(d)[part], key)
    run = _sherpa(KWS_SCRIPT, str(d), " ".join(PHRASE_TOKENS) + f" @{PHRASE}")
    assert run.returncode == code and "created" not in run.stdout, run.stderr[-300:]
    with pytest.raises(RkvoiceError, match=key):
        KwsWake(cfg(f"hear.kws_dir={d}")).load()


@pytest.mark.parametrize("key", ["neg_mean", "lfr_window_size"])
def test_paraformer_metadata_sherpa_dies_on_is_refused_first(tmp_path, key):
    d = _copy("paraformer", tmp_path)
    _drop_meta(d / "model.int8.onnx", key)
    run = _sherpa(PARA_SCRIPT, str(d))
    assert run.returncode == 255 and "created" not in run.stdout, run.stderr[-300:]
    with pytest.raises(RkvoiceError, match=key) as err:
        ParaformerAsr(cfg(f"hear.paraformer_dir={d}")).load()
    assert err.value.stage == "asr" and "paraformer_dir" in str(err.value)


def test_bad_tokens_and_files_are_named(tmp_path):
    d = _copy("paraformer", tmp_path)
    text = (d / "tokens.txt").read_text(encoding="utf-8")
    (d / "tokens.txt").write_text(text.replace(" ", "\t"), encoding="utf-8")  # tab-separated: still fine
    assert check_paraformer(cfg(f"hear.paraformer_dir={d}"))[1] == d / "tokens.txt"
    (d / "tokens.txt").write_text(text.replace("</s> 2\n", "</S> 2\n"), encoding="utf-8")
    with pytest.raises(RkvoiceError, match="no '</s>'"):
        check_paraformer(cfg(f"hear.paraformer_dir={d}"))
    (d / "tokens.txt").write_text("\n".join(text.splitlines()[:50]) + "\n", encoding="utf-8")
    with pytest.raises(RkvoiceError, match="another model"):
        check_paraformer(cfg(f"hear.paraformer_dir={d}"))
    model = d / "model.int8.onnx"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    with pytest.raises(RkvoiceError, match="not a complete ONNX model"):
        check_paraformer(cfg(f"hear.paraformer_dir={d}"))
    k = _copy("kws", tmp_path)
    next(k.glob("joiner*")).unlink()
    with pytest.raises(RkvoiceError, match=r"joiner\*\.onnx"):
        check_kws(cfg(f"hear.kws_dir={k}"))


# --- the CLI: --check and --file on the board engines -----------------------------------------


def test_check_reports_the_standins_usable(capsys):
    code = cli.main(["--check", "--config", str(BOARD_CONFIG)])
    out = capsys.readouterr().out
    assert "[ok  ] wake  kws" in out and "[ok  ] asr   paraformer" in out, out
    assert f"keywords: {' '.join(PHRASE_TOKENS)} @{PHRASE}" in out
    assert code == 0 and "pipeline can run" in out, out


def test_check_and_start_up_name_a_bad_wake_token(tmp_path, capsys):
    d = _copy("kws-wake", tmp_path)
    _rename_token(d / "tokens.txt", "ǐ", "i3")
    assert cli.main(["--check", "--config", str(BOARD_CONFIG), "--set", f"hear.kws_dir={d}"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] wake  kws" in out and "unknown: ǐ" in out
    wav = tmp_path / "r.wav"
    sf.write(wav, np.zeros(16000, np.float32), 16000)
    run = subprocess.run([PY, str(ROOT / "assistant.py"), "--file", str(wav), "--require-wake", "--no-play",
                          "--config", str(BOARD_CONFIG), "--set", f"hear.kws_dir={d}"],
                         check=False, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip().count("\n") == 0 and "unknown: ǐ" in run.stderr, run.stderr


@pytest.fixture(scope="module")
def request_wav(hear_voice, tmp_path_factory):
    """"你好小智，现在几点" spoken by the portable voice, with 0.5 s before and 1 s after."""
    from rkvoice.hear.sources import to_mono_16k

    audio, rate = hear_voice.generate(f"{PHRASE}，现在几点")
    speech = to_mono_16k(audio, rate)
    path = tmp_path_factory.mktemp("board_hearing") / "request.wav"
    sf.write(path, np.concatenate([np.zeros(8000, np.float32), speech, np.zeros(16000, np.float32)]), 16000)
    return path


def _file_run(wav: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    metrics = tmp_path / "m.json"
    run = subprocess.run([PY, str(ROOT / "assistant.py"), "--file", str(wav), "--require-wake", "--no-play",
                          "--config", str(BOARD_CONFIG), "--metrics", str(metrics)],
                         check=False, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return run, json.loads(metrics.read_text(encoding="utf-8"))


def test_file_goes_kws_wake_vad_paraformer_answer_speech(vad_ok, request_wav, tmp_path):
    run, data = _file_run(request_wav, tmp_path)
    lines = run.stdout.splitlines()
    assert "wake: yes" in lines and f"heard: {TOKEN}" in lines
    answer = next(line for line in lines if line.startswith("answer: "))
    assert "点" in answer and answer != "answer: (none)"  # the clock tool answered 几点
    (wake,) = data["wakes"]
    assert wake["text"] == PHRASE and 0.5 <= wake["audio_s"] <= 1.5  # the KWS decided inside the phrase
    names = [e["name"] for e in data["events"]]
    order = ["wake", "speech_end", "asr_done", "answer_first_text", "audio_first", "play_end"]
    assert [names.index(n) for n in order] == sorted(names.index(n) for n in order), names
    asr = next(e for e in data["events"] if e["name"] == "asr_done")
    assert asr["text"] == TOKEN and asr["woke"] is True
    summary = data["summary"]
    # one summary for --file and --text, and one spelling of the route in the summary and the route event
    assert summary["transcript"] == TOKEN and summary["route"] == "tool:time" and summary["woke"] is True
    assert next(e for e in data["events"] if e["name"] == "route")["route"] == "tool:time"
    assert 0 < summary["end_to_first_audio_ms"] < 30000


@pytest.mark.parametrize(("rate", "channels"), [(8000, 1), (44100, 1), (16000, 2)])
def test_file_at_other_rates_and_stereo(vad_ok, request_wav, tmp_path, rate, channels):
    import soxr

    audio, _ = sf.read(request_wav, dtype="float32")
    converted = soxr.resample(audio, 16000, rate) if rate != 16000 else audio
    if channels == 2:
        converted = np.stack([converted, converted * 0.5], axis=1)
    wav = tmp_path / f"r{rate}x{channels}.wav"
    sf.write(wav, converted, rate)
    run, data = _file_run(wav, tmp_path)
    assert "wake: yes" in run.stdout and data["summary"]["transcript"] == TOKEN


# --- the live loop on a fed microphone stream (controlled clock) ----------------------------------


class HoldUntilBargeIn:
    """Answers by 'speaking' until the turn is cancelled: each KWS detection during the answer is a barge-in."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.asked: list[str] = []

    def respond(self, turn: Turn) -> str:
        self.asked.append(turn.text)
        turn.timeline.mark(Ev.AUDIO_FIRST)
        cancelled = threading.Event()
        turn.on_cancel(lambda _turn: cancelled.set())
        turn.timeline.mark(Ev.ANSWER, text="…")  # all said: the microphone may go on (tests/fakes.Stillness)
        self.clock.wait(cancelled, 30.0)  # a guard: the rigged spotter fires within a second of audio
        return "…"


def test_live_loop_runs_the_board_engines_on_a_fed_microphone(vad_ok, request_wav):
    """On a ManualClock that only the microphone (SteppedSource) moves, a frame once the loop is still
    (tests/fakes.Stillness): the responder's guard runs on that clock, so however slow the machine, a
    turn ends by a barge-in, never by the guard running out in real time."""
    c = cfg(*rigged())
    wake = KwsWake(c)
    asr = ParaformerAsr(c)
    seg = Segmenter(c)
    for engine in (wake, asr, seg):
        engine.load()
    speech = WavFileSource(request_wav).samples
    stream = np.concatenate([speech, np.zeros(8000, np.float32), speech, np.zeros(32000, np.float32)])
    clock = ManualClock()
    responder = HoldUntilBargeIn(clock)
    still = Stillness(clock, lambda: loop, lambda: source.delivered)
    loop = TurnLoop(HearSession(c, asr, wake, seg), responder, clock=clock, busy=still.busy)

    def settle() -> None:
        if not still.settle(source.closed):
            source.close()
            loop.interrupt("stuck")

    # the stream and 2 s of silence, then silence until every turn is over
    source = SteppedSource(clock, settle, stream, until=lambda _tick: all(t.done.is_set() for t in loop.turns))
    done = threading.Event()
    result: list[Turn] = []

    def run() -> None:
        result.extend(loop.run_live(source))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(300), "live loop did not finish"
    wake.close()
    assert still.stuck is None, f"the loop did not go still within {still.limit_s:g} s: {still.stuck}"
    wakes = list(loop.wakes)
    print(f"wakes at {[(round(w.hit.at_s, 3), w.barge_in) for w in wakes]}, turns {[t.reason for t in result]}")
    # detection -> stream reset -> next detection: the first wakes from idle, the rest barge in
    assert len(wakes) >= 3 and not wakes[0].barge_in and all(w.barge_in for w in wakes[1:3])
    assert all(w.hit.text == PHRASE for w in wakes)
    assert wakes[0].hit.at_s == pytest.approx(0.8, abs=0.05)
    turns = result
    assert len(turns) >= 2 and all(t.text == TOKEN and t.timeline.find(Ev.ASR_DONE)[0].get("woke") for t in turns[:2])
    assert responder.asked[:2] == [TOKEN, TOKEN]
    first = [e.name for e in turns[0].timeline.events]
    for name in (Ev.WAKE, Ev.SPEECH_END, Ev.ASR_DONE, Ev.AUDIO_FIRST, Ev.BARGE_IN):
        assert name in first, first
    assert turns[0].cancelled and turns[0].reason == "barge-in"


# --- the daemon under systemd: a wake phrase the model cannot spell never kills it ------------------


def _notify_socket(tmp_path: Path):
    import socket

    addr = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(addr)
    sock.settimeout(120)
    return addr, sock


def _until(sock, want: str) -> None:
    while want not in sock.recv(4096).decode().split("\n"):
        pass


def _board_yaml() -> str:
    """The board-hearing config with this session's stand-in folders spelled out."""
    linked = f"{hearing_cache.CURRENT.relative_to(ROOT)}/"
    text = BOARD_CONFIG.read_text(encoding="utf-8")
    assert linked in text
    return text.replace(linked, f"{STANDINS}/")


def _daemon(config: Path, addr: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, NOTIFY_SOCKET=addr, WATCHDOG_USEC="2000000", XDG_STATE_HOME=str(tmp_path))
    env.pop("WATCHDOG_PID", None)
    env.pop("RKVOICE_CONFIG", None)
    return subprocess.Popen([PY, "assistant.py", "--no-play", "--config", str(config), "--set", "audio.input=arecord",
                             "--set", "audio.input_device=rkvoice-test-no-such-device"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)


def test_daemon_keeps_supervising_when_a_reload_brings_a_bad_wake_phrase(vad_ok, tmp_path):
    import signal

    llm = load_config().models.path / "portable" / "llm" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    if not llm.is_file():
        pytest.skip(f"the portable LLM {llm} is absent (run ./install.sh): the daemon loads it")
    bad = _copy("kws-wake", tmp_path)
    _rename_token(bad / "tokens.txt", "ǐ", "i3")
    config = tmp_path / "board.yaml"
    good_text = _board_yaml()
    config.write_text(good_text, encoding="utf-8")
    addr, sock = _notify_socket(tmp_path)
    proc = _daemon(config, addr, tmp_path)
    stderr = proc.stderr
    assert stderr is not None  # _daemon pipes it
    try:
        _until(sock, "READY=1")
        config.write_text(good_text.replace(f"{STANDINS}/kws-wake", str(bad)), encoding="utf-8")
        proc.send_signal(signal.SIGHUP)
        _until(sock, "READY=1")  # the reload failed, the previous engines are back
        _until(sock, "WATCHDOG=1")  # and supervision goes on
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        err = stderr.read()
        assert "unknown: ǐ" in err and "restoring the previous config" in err, err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        stderr.close()
        sock.close()


def test_daemon_start_up_with_a_bad_wake_phrase_is_one_clear_line(tmp_path):
    bad = _copy("kws-wake", tmp_path)
    _rename_token(bad / "tokens.txt", "ǐ", "i3")
    config = tmp_path / "board.yaml"
    config.write_text(_board_yaml().replace(f"{STANDINS}/kws-wake", str(bad)), encoding="utf-8")
    addr, sock = _notify_socket(tmp_path)
    proc = _daemon(config, addr, tmp_path)
    stderr = proc.stderr
    assert stderr is not None  # _daemon pipes it
    try:
        code = proc.wait(120)
        err = stderr.read()
        assert code not in (0, 255, -11) and "unknown: ǐ" in err, (code, err[-2000:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        stderr.close()
        sock.close()
