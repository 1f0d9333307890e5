"""The end-of-turn decision (rkvoice.hear.turn_end.TurnEnd) on scripted engines in audio time: a
scripted VAD closes speech at the short silence, a scripted model answers (and takes time on a
FakeClock). Ends at the short silence when judged finished, waits through a pause when not (the
speech that resumes joins the request), ends after max_silence_ms all the same, falls back to
hear.trailing_silence_ms when the model fails or is slow (one warning), and the loop's --file replay
and live paths end requests through it, with each judgement on the timeline."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
from fakes import FRAME, ListSource, ScriptedAsr, ScriptedSegmenter, ScriptedWake

from rkvoice.config import Config, load_config, parse_override
from rkvoice.hear.ahead import same_speech
from rkvoice.hear.session import HearSession, Mode, Request
from rkvoice.hear.turn_end import RecentAudio, TurnEnd, request_end
from rkvoice.hear.vad import SAMPLE_RATE, Segment, Segmenter, Verdict
from rkvoice.timeline import Ev
from rkvoice.turn import Turn
from rkvoice.turn_loop import TurnLoop
from tests.support import FakeClock

FRAME_S = FRAME / SAMPLE_RATE


def config(**endpoint: object) -> Config:
    return load_config([parse_override(f"hear.endpoint.{k}={v}") for k, v in endpoint.items()])


class ScriptedJudge:
    """Answers ``script[utterance]`` in turn for each look at the utterance the held speech starts with
    (the scripted VAD's samples carry its index), the last answer repeated; each look takes ``ms`` on
    the clock. An answer of None raises."""

    def __init__(self, script: dict[int, list[float | None]], clock: FakeClock, ms: float = 50.0) -> None:
        self.script = script
        self.clock = clock
        self.ms = ms
        self.calls: list[tuple[int, int]] = []  # (utterance, samples judged)

    def load(self) -> None:
        pass

    def probability(self, samples: np.ndarray) -> float:
        first = int(samples[0])
        answers = self.script[first]
        n = sum(1 for u, _ in self.calls if u == first)
        self.calls.append((first, len(samples)))
        self.clock.sleep(self.ms / 1000.0)
        p = answers[min(n, len(answers) - 1)]
        if p is None:
            raise RuntimeError("scripted failure")
        return p


def decision(spans: list[tuple[float, float]], script: dict[int, list[float | None]], ms: float = 50.0,
             **endpoint: object) -> tuple[TurnEnd, ScriptedJudge]:
    endpoint = {"threshold": 0.5, "recheck_ms": 300, **endpoint}
    clock = FakeClock()
    judge = ScriptedJudge(script, clock, ms)
    vad = ScriptedSegmenter(spans, silence_s=config(**endpoint).hear.endpoint.short_silence_ms / 1000.0)
    dec = TurnEnd(config(**endpoint), vad=vad, judge=judge, clock=clock)  # type: ignore[arg-type]
    dec.load()
    dec.restart(0)
    return dec, judge


def run(dec: TurnEnd, seconds: float) -> list[Segment]:
    out: list[Segment] = []
    for _ in range(int(seconds * SAMPLE_RATE / FRAME)):
        out += dec.accept(np.zeros(FRAME, np.float32))
    return out


def test_a_request_judged_finished_ends_at_the_short_silence():
    dec, judge = decision([(1.0, 2.0)], {0: [0.9]})
    (seg,) = run(dec, 4.0)
    assert (seg.start_s, seg.end_s) == (1.0, 2.0)
    assert 0.2 <= seg.decided_s - seg.end_s < 0.2 + FRAME_S
    (j,) = seg.judgements
    assert j.verdict is Verdict.COMPLETE and j.probability == 0.9 and j.ms == 50.0 and 200 <= j.silence_ms < 233
    assert len(judge.calls) == 1


def test_a_request_judged_unfinished_waits_through_the_pause_and_joins_what_follows():
    # "帮我把" ... 0.6 s ... "客厅灯打开": judged unfinished at 200 ms and at 500 ms, the speech resumes
    dec, judge = decision([(1.0, 2.0), (2.6, 3.5)], {0: [0.1, 0.2, 0.95]})
    (seg,) = run(dec, 6.0)
    assert (seg.start_s, seg.end_s) == (1.0, 3.5)
    assert abs(len(seg.samples) - 2.5 * SAMPLE_RATE) <= 1  # the pause is kept inside the request
    assert np.all(seg.samples[: SAMPLE_RATE] == 0) and np.all(seg.samples[-int(0.89 * SAMPLE_RATE):] == 1)
    assert [j.verdict for j in seg.judgements] == [Verdict.WAIT, Verdict.WAIT, Verdict.COMPLETE]
    assert [round(j.silence_ms / 100) for j in seg.judgements] == [2, 5, 2]
    assert 0.2 <= seg.decided_s - 3.5 < 0.2 + FRAME_S


def test_an_unfinished_request_ends_after_max_silence_all_the_same():
    dec, judge = decision([(1.0, 2.0)], {0: [0.1]}, max_silence_ms=1500, recheck_ms=300)
    (seg,) = run(dec, 5.0)
    assert 1.5 <= seg.decided_s - seg.end_s < 1.5 + FRAME_S
    verdicts = [j.verdict for j in seg.judgements]
    assert verdicts == [Verdict.WAIT] * 5 + [Verdict.MAX_SILENCE]
    assert [round(j.silence_ms / 100) for j in seg.judgements[:5]] == [2, 5, 8, 11, 14]


def test_judged_once_per_pause_with_recheck_0():
    dec, judge = decision([(1.0, 2.0), (2.6, 3.5)], {0: [0.1, 0.1]}, recheck_ms=0, max_silence_ms=1200)
    (seg,) = run(dec, 6.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.WAIT, Verdict.WAIT, Verdict.MAX_SILENCE]
    assert len(judge.calls) == 2  # at each pause's short silence only
    assert 1.2 <= seg.decided_s - 3.5 < 1.2 + FRAME_S


def test_in_speech_holds_while_a_request_is_waited_for():
    dec, _ = decision([(1.0, 2.0)], {0: [0.1]}, max_silence_ms=1000)
    run(dec, 2.5)
    assert dec.in_speech  # the session's listen timeout must not fire on a held request
    run(dec, 1.0)
    assert not dec.in_speech


@pytest.mark.parametrize("ms, answer, verdict", [(600.0, 0.99, Verdict.SLOW), (50.0, None, Verdict.FAILED)])
def test_a_slow_or_failing_model_ends_requests_by_silence_with_one_warning(caplog, ms, answer, verdict):
    spans = [(1.0 + 3 * i, 2.0 + 3 * i) for i in range(5)]
    dec, judge = decision(spans, {i: [answer] for i in range(5)}, ms=ms, budget_ms=400)
    with caplog.at_level(logging.INFO, logger="rkvoice.hear.turn_end"):
        segs = run(dec, 16.0)
    assert len(segs) == 5
    for seg in segs:
        assert 0.5 <= seg.decided_s - seg.end_s < 0.5 + FRAME_S  # hear.trailing_silence_ms, as mode: silence
        assert seg.judgements[-1].verdict is Verdict.SILENCE
    assert [s.judgements[0].verdict for s in segs[:3]] == [verdict] * 3
    assert len(judge.calls) == 3  # three faults in a row: the model is left out
    assert [[j.verdict for j in s.judgements] for s in segs[3:]] == [[Verdict.SILENCE]] * 2  # not judged
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_a_judgement_not_back_within_the_budget_is_not_waited_for(caplog):
    dec, judge = decision([(1.0, 2.0), (4.0, 5.0)], {0: [0.99], 1: [0.99]}, budget_ms=50)
    release = threading.Event()
    real = judge.probability

    def stuck(samples: np.ndarray) -> float:
        release.wait(5.0)  # real time: the model's thread is wedged
        return real(samples)

    judge.probability = stuck  # type: ignore[method-assign]
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="rkvoice.hear.turn_end"):
        (first,) = run(dec, 3.0)
        (second,) = run(dec, 3.0)  # the first judgement still runs: none is started beside it
    assert time.monotonic() - t0 < 2.0
    release.set()
    for seg in (first, second):
        assert [j.verdict for j in seg.judgements] == [Verdict.SLOW, Verdict.SILENCE]
        assert 0.5 <= seg.decided_s - seg.end_s < 0.5 + FRAME_S
    assert len(caplog.records) == 1


def test_one_slow_judgement_is_that_request_only():
    dec, judge = decision([(1.0, 2.0), (4.0, 5.0)], {0: [0.9], 1: [0.9]}, budget_ms=400)
    judge.ms = 500.0
    first = run(dec, 3.0)
    judge.ms = 50.0
    second = run(dec, 3.0)
    assert first[0].judgements[0].verdict is Verdict.SLOW and 0.5 <= first[0].decided_s - 2.0 < 0.55
    assert second[0].judgements[-1].verdict is Verdict.COMPLETE and second[0].decided_s - 5.0 < 0.25


def test_the_speech_so_far_is_handed_on_before_the_judgement_and_is_the_request():
    dec, judge = decision([(1.0, 2.0), (2.5, 3.0)], {0: [0.1, 0.9]})
    paused: list[np.ndarray] = []
    dec.on_pause = lambda samples: paused.append(samples) or None  # type: ignore[func-returns-value]
    (seg,) = run(dec, 5.0)
    assert len(paused) == 2  # at each pause: the first (1 s) and the joined request (2 s)
    assert not same_speech(paused[0], seg.samples)  # the speaker went on: the early transcript is not used
    assert same_speech(paused[1], seg.samples)


class Transcripts:
    """``on_pause`` as rkvoice.hear.ahead gives it: a Future per pause, its text set when the test says
    (``ready``: at once), in the order of ``texts``; None: the decode failed."""

    def __init__(self, texts: list[str | None], ready: bool = True) -> None:
        self.texts, self.ready = list(texts), ready
        self.made: list[Future[str]] = []

    def __call__(self, samples: np.ndarray) -> Future[str]:
        made: Future[str] = Future()
        self.made.append(made)
        if self.ready:
            self.finish(len(self.made) - 1)
        return made

    def finish(self, i: int) -> None:
        text = self.texts[i]
        if text is None:
            self.made[i].set_exception(RuntimeError("decode failed"))
        else:
            self.made[i].set_result(text)


def test_a_request_judged_finished_whose_words_stop_on_a_coverb_waits_and_joins_what_follows():
    # "帮我把" ... 0.6 s ... "客厅灯打开": the model says finished at the pause, the words say 把 needs more
    dec, judge = decision([(1.0, 2.0), (2.6, 3.5)], {0: [0.95, 0.95]})
    dec.on_pause = Transcripts(["帮我把。", "帮我把客厅灯打开。"])
    (seg,) = run(dec, 6.0)
    assert (seg.start_s, seg.end_s) == (1.0, 3.5)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE, Verdict.UNFINISHED, Verdict.COMPLETE]
    assert 0.2 <= seg.decided_s - 3.5 < 0.2 + FRAME_S


def test_a_request_that_stops_on_an_unfinished_word_ends_after_max_silence():
    dec, judge = decision([(1.0, 2.0)], {0: [0.95]}, max_silence_ms=1200)
    dec.on_pause = Transcripts(["空调调到"])
    (seg,) = run(dec, 4.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE, Verdict.UNFINISHED, Verdict.MAX_SILENCE]
    assert 1.2 <= seg.decided_s - 2.0 < 1.2 + FRAME_S
    assert len(judge.calls) == 1  # the model is not asked again: the words decided


def test_a_request_judged_finished_ends_when_its_transcript_is_known():
    dec, _ = decision([(1.0, 2.0)], {0: [0.95]})
    words = Transcripts(["打开客厅灯"], ready=False)
    dec.on_pause = words
    assert run(dec, 2.4) == [] and len(words.made) == 1  # judged at 2.2 s, its transcript not known yet
    words.finish(0)
    (seg,) = run(dec, FRAME_S)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE] and 0.4 <= seg.decided_s - 2.0 < 0.4 + 2 * FRAME_S


def test_words_not_known_by_the_fallback_silence_are_not_waited_for():
    dec, _ = decision([(1.0, 2.0)], {0: [0.95]})
    dec.on_pause = Transcripts(["帮我把"], ready=False)  # (they would have said wait)
    (seg,) = run(dec, 3.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE]
    assert 0.5 <= seg.decided_s - 2.0 < 0.5 + FRAME_S  # hear.trailing_silence_ms: no later than mode silence


@pytest.mark.parametrize("texts, endpoint", [([None], {}), (["帮我把"], {"words": "false"})])
def test_a_failed_decode_or_words_off_end_the_request_as_judged(texts, endpoint):
    dec, _ = decision([(1.0, 2.0)], {0: [0.95]}, **endpoint)
    dec.on_pause = Transcripts(texts)
    (seg,) = run(dec, 4.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE] and 0.2 <= seg.decided_s - 2.0 < 0.2 + FRAME_S


def test_a_request_judged_unfinished_whose_words_close_a_question_ends_when_they_are_known():
    # 明天会下雨吗: the model hears a rising pitch and says wait; the words end it
    dec, judge = decision([(1.0, 2.0)], {0: [0.1]}, recheck_ms=0, max_silence_ms=1500)
    words = Transcripts(["明天会下雨吗？"], ready=False)
    dec.on_pause = words
    assert run(dec, 2.5) == []  # judged at 2.2 s, its words not known yet
    words.finish(0)
    (seg,) = run(dec, FRAME_S)
    assert [j.verdict for j in seg.judgements] == [Verdict.WAIT, Verdict.FINISHED]
    assert 0.5 <= seg.decided_s - 2.0 < 0.5 + 2 * FRAME_S and len(judge.calls) == 1


def test_words_known_at_the_judgement_end_a_closed_question_at_the_short_silence():
    dec, _ = decision([(1.0, 2.0)], {0: [0.1]}, recheck_ms=0)
    dec.on_pause = Transcripts(["今天星期几"])
    (seg,) = run(dec, 3.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.WAIT, Verdict.FINISHED]
    assert 0.2 <= seg.decided_s - 2.0 < 0.2 + FRAME_S


@pytest.mark.parametrize("text", ["帮我把", "打开客厅的灯", "几点"])
def test_words_that_close_no_question_leave_the_model_s_wait(text):
    dec, _ = decision([(1.0, 2.0)], {0: [0.1]}, recheck_ms=0, max_silence_ms=1200)
    dec.on_pause = Transcripts([text])
    (seg,) = run(dec, 4.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.WAIT, Verdict.MAX_SILENCE]


def test_a_topic_alone_judged_finished_is_waited_for_like_unfinished_words():
    # 我的iPhone ... and the speaker says no more: ended after max_silence_ms, not at the short silence
    dec, _ = decision([(1.0, 2.0)], {0: [0.95]}, max_silence_ms=1200)
    dec.on_pause = Transcripts(["我的 iPhone。"])
    (seg,) = run(dec, 4.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE, Verdict.TOPIC, Verdict.MAX_SILENCE]
    assert 1.2 <= seg.decided_s - 2.0 < 1.2 + FRAME_S


def test_a_terse_request_for_what_the_assistant_reports_ends_at_the_short_silence():
    dec, _ = decision([(1.0, 2.0)], {0: [0.95]})
    dec.on_pause = Transcripts(["北京明天的天气。"])
    (seg,) = run(dec, 4.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE]
    assert 0.2 <= seg.decided_s - 2.0 < 0.2 + FRAME_S


def test_a_topic_the_speaker_goes_on_from_joins_what_follows():
    # 我的iPhone ... 0.8 s (longer than mode silence) ... 没电了怎么办
    dec, _ = decision([(1.0, 2.0), (2.8, 3.9)], {0: [0.95, 0.95]})
    dec.on_pause = Transcripts(["我的iPhone", "我的iPhone没电了怎么办"])
    (seg,) = run(dec, 6.0)
    assert (seg.start_s, seg.end_s) == (1.0, 3.9)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE, Verdict.TOPIC, Verdict.COMPLETE]
    assert 0.2 <= seg.decided_s - 3.9 < 0.2 + FRAME_S


def wake_decision(spans: list[tuple[float, float]], script: dict[int, list[float | None]],
                  words: Transcripts | None) -> tuple[TurnEnd, ScriptedJudge]:
    """The wake's segmenter (rkvoice.hear.wake.phrase_segmenter) on a scripted VAD and model: a
    transcript holds a request when it goes on after 小智小智."""
    dec, judge = decision([], script)
    dec.vad = ScriptedSegmenter(spans, silence_s=0.2)
    dec.holds_request = lambda text: text.startswith("小智小智") and len(text.strip("。")) > 4
    dec.pass_max_s = 2.5
    dec.on_pause = words
    dec.restart(0)
    return dec, judge


def test_the_wake_phrase_alone_ends_at_its_pause_unjudged_once_its_transcript_is_known():
    words = Transcripts(["小智小智。"], ready=False)
    dec, judge = wake_decision([(1.0, 2.0)], {0: [0.1]}, words)
    assert run(dec, 2.5) == []  # the wake's check needs the transcript anyway
    words.finish(0)
    (seg,) = run(dec, FRAME_S)
    assert [j.verdict for j in seg.judgements] == [Verdict.NO_REQUEST] and judge.calls == []


def test_the_phrase_and_a_request_in_one_breath_end_by_the_decision():
    dec, judge = wake_decision([(1.0, 2.5)], {0: [0.95]}, Transcripts(["小智小智现在几点。"]))
    (seg,) = run(dec, 4.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE] and len(judge.calls) == 1
    assert 0.2 <= seg.decided_s - 2.5 < 0.2 + FRAME_S


def test_a_one_breath_request_that_stops_on_a_coverb_waits_for_the_rest():
    # "小智小智帮我把" ... 0.6 s ... "客厅灯打开": held through the pause, heard as one request
    dec, _ = wake_decision([(1.0, 2.5), (3.1, 4.0)], {0: [0.95, 0.95]},
                           Transcripts(["小智小智帮我把。", "小智小智帮我把客厅灯打开。"]))
    (seg,) = run(dec, 6.0)
    assert (seg.start_s, seg.end_s) == (1.0, 4.0)
    assert [j.verdict for j in seg.judgements] == [Verdict.COMPLETE, Verdict.UNFINISHED, Verdict.COMPLETE]


def test_the_phrase_alone_is_not_joined_to_the_request_said_while_its_transcript_is_made():
    # 小智小智 (1.0-2.0 s), a 1 s pause, 打开大灯 (3.0-4.2 s); the phrase's transcript comes at 3.5 s
    words = Transcripts(["小智小智。", "打开大灯。"], ready=False)
    dec, judge = wake_decision([(1.0, 2.0), (3.0, 4.2)], {0: [0.1], 1: [0.95]}, words)
    assert run(dec, 3.5) == []
    words.finish(0)
    (phrase,) = run(dec, FRAME_S)
    assert (phrase.start_s, phrase.end_s) == (1.0, 2.0) and phrase.judgements[-1].verdict is Verdict.NO_REQUEST
    assert judge.calls == []


def test_speech_that_closes_before_the_phrase_s_transcript_is_known_ends_it_unjoined():
    words = Transcripts(["小智小智。", "打开大灯。"], ready=False)
    dec, _ = wake_decision([(1.0, 2.0), (2.5, 3.0)], {0: [0.1], 1: [0.95]}, words)
    (phrase,) = run(dec, 3.3)  # the second speech closed at 3.2 s: the first one ends, alone
    assert (phrase.start_s, phrase.end_s) == (1.0, 2.0) and phrase.judgements[-1].verdict is Verdict.NO_REQUEST
    assert len(words.made) == 2  # the second is a segment of its own, its transcript asked for


def test_the_wake_s_speech_without_a_transcript_ends_at_its_pause_when_short_else_is_judged():
    dec, judge = wake_decision([(1.0, 2.0), (4.0, 7.0)], {0: [0.1], 1: [0.95]}, None)
    first, second = run(dec, 9.0)
    assert [j.verdict for j in first.judgements] == [Verdict.NO_REQUEST]
    assert [j.verdict for j in second.judgements] == [Verdict.COMPLETE] and [u for u, _ in judge.calls] == [1]


def test_a_request_held_past_the_longest_request_is_cut():
    dec, _ = decision([(1.0, 7.0), (7.5, 13.5)], {0: [0.1]}, max_silence_ms=2000)
    (seg,) = run(dec, 15.0)
    assert seg.truncated and seg.judgements[-1].verdict is Verdict.CUT


def test_the_end_of_the_stream_ends_what_is_held():
    dec, _ = decision([(1.0, 2.0)], {0: [0.1]})
    assert run(dec, 2.5) == []
    (seg,) = dec.flush()
    assert seg.judgements[-1].verdict is Verdict.END_OF_STREAM


def test_recent_audio_is_bounded():
    recent = RecentAudio(1.0)
    for i in range(200):
        recent.add(np.full(FRAME, i, np.float32))
    assert recent._n <= SAMPLE_RATE + FRAME
    assert np.all(recent.slice(recent.end - FRAME, recent.end) == 199)
    assert len(recent.slice(0, 10)) == 0


def test_the_mode_picks_the_segmenter_that_ends_requests():
    assert isinstance(request_end(config(mode="smart")), TurnEnd)
    plain = request_end(config(mode="silence"), early_silence_s=0.15)
    assert type(plain) is Segmenter and plain.trailing_silence_s == 0.5 and plain.early_silence_s > 0


# ------------------------------------------------------------------ through the loop


class Echo:
    def respond(self, turn: Turn) -> str:
        return turn.text


def file_turns(tmp_path: Path, dec: TurnEnd, texts: list[str], seconds: float) -> list[Turn]:
    session = HearSession(dec.cfg, ScriptedAsr(texts), ScriptedWake(), dec, clock=dec.clock)  # type: ignore[arg-type]
    loop = TurnLoop(session, Echo(), clock=dec.clock)
    return loop.run_file(ListSource(seconds))


def test_file_replay_ends_requests_through_the_decision_and_records_each_judgement(tmp_path):
    # a complete request, then one with a pause the model judges unfinished
    dec, _ = decision([(0.5, 1.5), (3.0, 3.8), (4.4, 5.2)], {0: [0.97], 1: [0.05, 0.05, 0.9]})
    turns = file_turns(tmp_path, dec, ["现在几点", "帮我把客厅灯打开", "客厅灯打开"], 8.0)
    assert [t.text for t in turns] == ["现在几点", "帮我把客厅灯打开"]
    first, second = (t.timeline.find(Ev.SPEECH_END)[0] for t in turns)
    assert first.get("ended_by") == "complete" and 200 <= first.get("silence_ms") < 233
    assert [j["verdict"] for j in first.get("judged")] == ["complete"]
    assert first.get("judged")[0]["p"] == 0.97 and first.get("judged")[0]["ms"] == 50.0
    assert [j["verdict"] for j in second.get("judged")] == ["wait", "wait", "complete"]
    assert second.get("audio_s") == 5.2


def test_silence_mode_keeps_the_plain_segmenter_and_its_timeline(tmp_path):
    cfg = config(mode="silence")
    session = HearSession(cfg, ScriptedAsr(["现在几点"]), ScriptedWake(), ScriptedSegmenter([(0.5, 1.5)]))  # type: ignore[arg-type]
    loop = TurnLoop(session, Echo(), clock=FakeClock())
    (turn,) = loop.run_file(ListSource(3.0))
    ev = turn.timeline.find(Ev.SPEECH_END)[0]
    assert ev.get("silence_ms") == 500.0 and ev.get("judged") is None


def test_the_live_loop_ends_requests_after_a_wake_and_a_barge_in_through_the_decision():
    # wake at 0.6 s; a request with a pause (judged unfinished, then finished); while it is answered
    # the wake again (a barge-in) and a second request, judged finished at once
    dec, judge = decision([(1.0, 1.8), (2.3, 3.0), (5.0, 6.0)], {0: [0.1, 0.95], 2: [0.97]})
    release = threading.Event()

    class Slow(Echo):
        def respond(self, turn: Turn) -> str:
            if turn.text == "帮我把客厅灯打开":  # still answering when the barge-in comes
                release.wait(5.0)
            return turn.text

    wake = ScriptedWake([(0.6, ""), (4.5, "")], end_lag_s=0.0)
    session = HearSession(dec.cfg, ScriptedAsr(["帮我把客厅灯打开", "", "现在几点"]), wake, dec,  # type: ignore[arg-type]
                          clock=dec.clock)
    loop = TurnLoop(session, Slow(), clock=dec.clock)
    turns = loop.run_live(ListSource(8.0))
    release.set()
    assert [t.text for t in turns] == ["帮我把客厅灯打开", "现在几点"]
    first, second = (t.timeline.find(Ev.SPEECH_END)[0] for t in turns)
    assert [j["verdict"] for j in first.get("judged")] == ["wait", "complete"] and first.get("audio_s") == 3.0
    assert [j["verdict"] for j in second.get("judged")] == ["complete"]
    assert turns[0].cancelled and turns[1].timeline.find(Ev.WAKE)[0].get("barge_in") is True


def test_a_request_begun_before_the_loop_saw_the_last_turn_end_is_heard_whole():
    """The soak's lost request (load 6-9): the answer is over and the next request starts, but the hear
    thread takes the turn's end (TurnOver) only after the request's first words; those went to the
    wake engine (busy: barge-in only), and the follow-up segmenter began after them: the request was
    never heard. Here the worker is held after reporting the turn until the next request is under way."""
    dec, _ = decision([(0.5, 1.0), (1.5, 2.5)], {0: [0.95], 1: [0.95]})
    loop: TurnLoop

    def late(turn: Turn) -> None:  # the worker descheduled between its report and TurnOver
        if turn.text == "现在几点":
            deadline = time.monotonic() + 5.0
            while loop.session.samples < 2.0 * SAMPLE_RATE and time.monotonic() < deadline:
                time.sleep(0.001)

    asr, wake = ScriptedAsr(["现在几点", "今天几号"]), ScriptedWake([(0.3, "")], end_lag_s=0.0)
    session = HearSession(dec.cfg, asr, wake, dec, clock=dec.clock)  # type: ignore[arg-type]
    loop = TurnLoop(session, Echo(), clock=dec.clock, on_turn=late)
    turns = loop.run_live(ListSource(5.0))
    assert [t.text for t in turns] == ["现在几点", "今天几号"]
    assert turns[1].timeline.find(Ev.SPEECH_END)[0].get("audio_s") == 2.5


def test_a_turn_cancelled_without_a_barge_in_leaves_the_wake_engine_hearing():
    dec, _ = decision([], {})
    wake = ScriptedWake()
    session = HearSession(dec.cfg, ScriptedAsr([]), wake, dec)  # type: ignore[arg-type]
    session.start(Mode.BUSY)
    restarts = wake.restarts
    session.accept(np.zeros(FRAME, np.float32))
    assert session.turn_done(cancelled=True) == []
    assert session.mode is Mode.IDLE and wake.restarts == restarts  # what it was hearing is kept


def test_the_follow_up_hears_from_where_the_answer_was_over():
    dec, _ = decision([(0.2, 0.8)], {0: [0.95]})
    session = HearSession(dec.cfg, ScriptedAsr(["今天几号"]), ScriptedWake(), dec, clock=dec.clock)  # type: ignore[arg-type]
    session.start(Mode.BUSY)
    for _ in range(int(0.5 * SAMPLE_RATE / FRAME)):  # the request begins while the loop thinks it busy
        assert session.accept(np.zeros(FRAME, np.float32)) == []
    assert session.turn_done(since=int(0.1 * SAMPLE_RATE)) == []
    events = []
    for _ in range(int(1.0 * SAMPLE_RATE / FRAME)):
        events += session.accept(np.zeros(FRAME, np.float32))
    (request,) = events
    assert isinstance(request, Request) and request.text == "今天几号"


def test_the_satellite_ends_the_request_home_assistant_receives_through_the_decision():
    """On the satellite (the board's side of HA's pipeline): after the wake, "帮我把" … 0.5 s … "客厅灯打开".
    The first pause is judged unfinished, so the audio goes on to HA; ``audio-stop`` follows the short
    silence after the second part, when the request is judged finished, and not a frame earlier."""
    from test_satellite_core import SentLink

    from rkvoice.satellite.mic import SatelliteMic

    dec, judge = decision([(1.0, 1.8), (2.3, 3.0)], {0: [0.1, 0.95]})
    link = SentLink()
    mic = SatelliteMic(ScriptedWake([(0.6, "")], end_lag_s=0.0), link, link.playback, segmenter=dec)  # type: ignore[arg-type]
    stopped_at: list[float] = []
    for k in range(int(5.0 * SAMPLE_RATE / FRAME)):
        mic.accept(np.zeros(FRAME, np.float32))
        if not stopped_at and any(e.type == "audio-stop" for e in link.sent):
            stopped_at.append((k + 1) * FRAME_S)
    assert [e.type for e in link.sent].count("run-pipeline") == 1
    assert len(stopped_at) == 1 and 3.2 <= stopped_at[0] < 3.2 + FRAME_S, stopped_at
    assert [n for _, n in judge.calls] and len(judge.calls) == 2  # once at each pause


def test_the_satellite_s_board_vad_is_the_one_decision():
    from rkvoice.satellite.run import board_vad

    assert isinstance(board_vad(config(mode="smart")), TurnEnd)
    plain = board_vad(config(mode="silence"))
    assert type(plain) is Segmenter and plain.trailing_silence_s == 0.5


def test_the_satellite_s_decision_takes_the_words_of_the_asr_that_transcribes_ahead():
    """Without them the model alone decides the request HA receives: on the turn-end set it cut off
    about a third of the pauses (bench.turn_end, words off)."""
    from rkvoice.hear.ahead import TranscribeAhead
    from rkvoice.satellite.run import board_vad

    ahead = TranscribeAhead(ScriptedAsr(["明天会下雨吗"]))
    try:
        dec = board_vad(config(mode="smart"), ahead)
        assert isinstance(dec, TurnEnd) and dec.on_pause == ahead.ahead
        assert board_vad(config(mode="smart"), object()).on_pause is None  # an ASR that does not transcribe ahead
    finally:
        ahead.close()
