"""End to end with the real models: ``assistant.py --file`` and the live loop, fed frame by frame.

The live test feeds one stream through a SteppedSource on a ManualClock (no sound card): "小智小智，现在几点"
-> a long spoken answer -> "小智小智，今天天气怎么样" while it plays -> the answer stops, a new turn answers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakes import RecordingPlayer, Stillness

from rkvoice.cli.entry import main
from rkvoice.config import load_config
from rkvoice.hear.session import HearSession
from rkvoice.hear.sources import to_mono_16k
from rkvoice.hear.vad import Segmenter, vad_model_path
from rkvoice.hear.wake import AsrMatchWake
from rkvoice.timeline import Ev
from rkvoice.turn import Turn
from rkvoice.turn_loop import TurnLoop, player_cue
from tests.support import ManualClock, SteppedSource, cer


@pytest.fixture(scope="module")
def vad_ok():
    path = vad_model_path(load_config())
    if not path.is_file():
        pytest.skip(f"silero VAD model {path} is absent (run ./install.sh)")


def test_cli_file_prints_transcript_and_answer_and_writes_latency(vad_ok, hear_asr, hear_fixtures, tmp_path, capsys):
    wav = hear_fixtures["wake_request"][0]
    metrics = tmp_path / "m.json"
    code = main(["--file", str(wav), "--require-wake", "--no-play", "--metrics", str(metrics)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "wake: yes" in out
    heard = next(line for line in out.splitlines() if line.startswith("heard: "))[len("heard: "):]
    assert cer("现在几点", heard) <= 0.15
    assert "answer: " in out and "answer: (none)" not in out
    summary = json.loads(metrics.read_text(encoding="utf-8"))["summary"]
    assert summary["transcript"] == heard and summary["woke"] is True
    assert 0 < summary["end_to_first_audio_ms"] < 30000
    names = [e["name"] for e in json.loads(metrics.read_text(encoding="utf-8"))["events"]]
    assert names.index("speech_end") < names.index("asr_done") < names.index("audio_first")
    assert "wake" in names


def test_cli_file_rejects_a_non_audio_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "x.wav"
    bad.write_bytes(b"RIFF....garbage")
    assert main(["--file", str(bad), "--no-play"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a readable audio file" in err[0]


def test_require_wake_needs_file(capsys):
    assert main(["--require-wake", "--say", "你好"]) == 2
    assert "--require-wake only applies to --file" in capsys.readouterr().err


LONG_ANSWER = (
    "从前有一座山，山上有一座庙，庙里住着一个老和尚和一个小和尚。"
    "每天早上，老和尚都会给小和尚讲一个故事，故事的开头总是这样的。"
    "从前有一座山，山上有一座庙，庙里住着一个老和尚和一个小和尚。"
)


def test_live_loop_wake_answer_and_barge_in(vad_ok, hear_asr, hear_voice, hear_fixtures):
    """The live loop, the real speaker and voice, a player that keeps 0.25 s ahead, all on a ManualClock
    that only the microphone (SteppedSource) moves, one frame at a time, once the loop, the speaker and
    the player are still (tests/fakes.Stillness). Whisper, the wake match and synthesis take none of its
    time, so every run hears and plays the same audio, and the timings asserted (the speech silent
    within 200 ms of the barge-in, the cue within 100 ms of it) measure the product's scheduling on that
    clock, not the machine's speed. (On the real clock the hear thread ran a Whisper decode late, 5-8 s
    on a loaded 2-core machine: the barge-in came late or after the long answer had played out.)"""
    from rkvoice.speaker import Speaker

    cfg = load_config()
    clock = ManualClock(100.0)

    def clip(text: str) -> np.ndarray:
        audio, rate = hear_voice.generate(text)
        return to_mono_16k(audio, rate)

    first, second = clip("小智小智，现在几点"), clip("小智小智，今天天气怎么样")
    at_second = 8.0  # seconds into the stream: the first answer is playing by then
    stream = np.zeros(int((at_second + 0.5 + 1.0) * 16000) + len(second), np.float32)  # 1 s of silence after
    stream[8000 : 8000 + len(first)] = first
    stream[int(at_second * 16000) : int(at_second * 16000) + len(second)] = second

    still = Stillness(clock, lambda: loop, lambda: source.delivered, lambda: speaker, lambda: player)
    player = RecordingPlayer(cfg, clock, max_ahead_s=0.25)
    speaker = Speaker(hear_voice, player, cfg, clock)
    speaker.load()
    cancels: list[float] = []

    class Responder:
        """A long answer first, a short one next, spoken by the real speaker."""

        def respond(self, turn: Turn) -> str:
            text = LONG_ANSWER if not asked else "今天晴天。"
            asked.append(turn.text)
            turn.on_cancel(lambda t: cancels.append(clock.now()))
            speaker.start(turn)
            speaker.say(turn, text)
            speaker.end(turn)
            turn.timeline.mark(Ev.ANSWER, text=text)  # all said (as rkvoice.answer.respond marks it)
            speaker.wait(turn)
            turn.raise_if_failed()
            return text

    asked: list[str] = []
    responder = Responder()
    wake = AsrMatchWake(cfg, hear_asr)
    wake.load()
    seg = Segmenter(cfg)
    seg.load()
    cues: list[int] = []
    play_cue = player_cue(player)
    loop = TurnLoop(
        HearSession(cfg, hear_asr, wake, seg),
        responder,
        cue=np.full(1600, 0.1, np.float32),
        cue_out=lambda s: (cues.append(len(s)), play_cue(s)),
        clock=clock,
        busy=still.busy,
    )

    def settle() -> None:
        if not still.settle(source.closed):
            source.close()
            loop.interrupt("stuck")

    # the stream, then silence until every turn is over (the last answer plays out)
    source = SteppedSource(clock, settle, stream, until=lambda _tick: all(t.done.is_set() for t in loop.turns))
    try:
        turns = loop.run_live(source)
    finally:
        speaker.cancel_all("shutdown")
        speaker.close(timeout=2.0)
    assert still.stuck is None, f"the loop did not go still within {still.limit_s:g} s: {still.stuck}"

    assert len(turns) == 2, [t.text for t in turns]
    one, two = turns
    assert cer("现在几点", one.text) <= 0.15 and one.timeline.find(Ev.ASR_DONE)[0].get("woke")
    assert cer("今天天气怎么样", two.text) <= 0.15 and two.timeline.find(Ev.ASR_DONE)[0].get("woke")
    assert len(cues) == 2  # one cue per wake
    names = [e.name for e in one.timeline.events]
    for name in ("speech_end", "wake", "asr_done", "audio_first", "barge_in", "cancelled"):
        assert name in names, names
    assert "play_end" not in names  # the long answer never finished
    assert one.cancelled and one.reason == "barge-in" and not two.cancelled
    (barge,) = one.timeline.find(Ev.BARGE_IN)
    assert barge.get("cancel_ms") <= 200
    # the player fell silent within 200 ms of the wake decision
    (t_cancel,) = cancels
    before = [s for s in player.segments if s[0] < t_cancel]
    assert before and max(end for _start, end in before) <= t_cancel + 0.2
    # and the wake cue started playing within 100 ms of the wake decision, and played whole (the
    # cancelled turn's last block no longer clears it)
    cue_s = cues[-1] / player.rate
    assert any(t_cancel <= start <= t_cancel + 0.1 and end - start >= cue_s - 1e-9 for start, end in player.segments)
    two_names = [e.name for e in two.timeline.events]
    assert "audio_first" in two_names and "play_end" in two_names
    # hearing and synthesis take none of the clock's time: the answer's first audio is handed over the
    # instant the request's end was decided (the product itself waits for nothing in between)
    assert two.timeline.summary()["end_to_first_audio_ms"] == 0
    print(f"barge-in at {t_cancel - 100.0:.3f} s; played (s from the start): "
          f"{[(round(a - 100.0, 3), round(b - 100.0, 3)) for a, b in player.segments]}")
