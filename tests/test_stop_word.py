"""The satellite's stop word (rkvoice.satellite.stop_word) with the real portable models: the portable
voice says 停 or 别说了 while a reply plays, and the core clears the playback within 300 ms of the
word's end in audio time; other speech while it plays does not; nothing is heard for it while nothing
plays. The phrase match itself is a pure test."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import wait_until

from rkvoice.config import load_config
from rkvoice.hear.sources import to_mono_16k
from rkvoice.hear.vad import vad_model_path
from rkvoice.satellite.media import MediaPlayer, MediaState
from rkvoice.satellite.stop_word import StopPhrases, StopWordSettings, stop_word
from tests.support.media_site import KeepingPlayer, encoded, serving
from tests.support.stop_rig import StopRig, silence, word_end_s

DEADLINE_S = 0.3


@pytest.mark.parametrize("text, phrase", [("停", "停"), ("停。", "停"), ("别说了", "别说了"), ("别说了！", "别说了"),
                                          ("别说啦", "别说了"), ("好了别说了", "别说了"), ("Stop!", "stop"),
                                          ("停下", None), ("挺好的。", None), ("别说了再讲一个", None),
                                          ("stop it", None), ("今天天气怎么样", None), ("", None)])
def test_a_stop_phrase_counts_only_said_alone(text, phrase):
    found = StopPhrases(["停", "别说了", "Stop"]).match(text)
    assert (found[0] if found else None) == phrase


def test_no_phrase_is_refused():
    with pytest.raises(ValueError, match="no stop phrase"):
        StopPhrases(["!!", ""])


@pytest.fixture(scope="module")
def engines(hear_asr):
    cfg = load_config()
    if not vad_model_path(cfg).is_file():
        pytest.skip("silero VAD model is absent (run ./install.sh)")
    return cfg, hear_asr


@pytest.fixture(scope="module")
def say(hear_voice):
    def speak(text: str) -> np.ndarray:
        audio, rate = hear_voice.generate(text)
        return to_mono_16k(audio, rate)

    return speak


@pytest.fixture
def rig(engines):
    rig = StopRig(*engines)
    yield rig
    rig.close()


@pytest.mark.parametrize("phrase", ["停", "别说了"])
def test_a_stop_phrase_clears_the_reply_within_300_ms_of_its_end(rig, say, phrase):
    stream = rig.play_reply()
    speech = say(phrase)
    at = rig.hear(np.concatenate([silence(0.8), speech, silence(1.5)]))
    assert len(rig.stops) == 1, rig.engine.last_text
    end = at + 0.8 + word_end_s(speech)
    assert 0 < rig.stops[0] - end <= DEADLINE_S, (rig.stops[0], end)
    assert stream.cut
    assert not rig.mic.wakes


@pytest.mark.parametrize("text", ["今天天气怎么样", "给我讲一个笑话", "好的", "我们明天一起去公园散步吧"])
def test_other_speech_while_a_reply_plays_does_not_stop_it(rig, say, text):
    stream = rig.play_reply()
    rig.hear(np.concatenate([silence(0.8), say(text), silence(1.5)]))
    assert rig.stops == [] and not stream.cut
    assert rig.engine.frames > 0  # it was listening


def test_the_wake_phrase_while_a_reply_plays_barges_in_and_is_no_stop(rig, say):
    stream = rig.play_reply()
    rig.core.running.clear()  # HA does not run the satellite: the wake clears the reply, asks nothing
    rig.hear(np.concatenate([silence(0.8), say("小智小智"), silence(1.5)]))
    assert [hit.text for hit in rig.mic.wakes] and rig.stops == [] and stream.cut
    assert rig.engine.primed == 0  # the stop word did not hold the wake up with its second look


def test_nothing_is_heard_for_the_stop_word_while_nothing_plays(rig, say):
    rig.hear(np.concatenate([silence(0.8), say("停"), silence(1.5)]))
    assert rig.stops == [] and rig.engine.frames == 0
    stream = rig.play_reply()  # then a reply plays: it listens from there on
    rig.hear(np.concatenate([silence(0.5), say("别说了"), silence(1.5)]))
    assert len(rig.stops) == 1 and stream.cut


def test_a_stop_phrase_ends_the_music(engines, say):
    """Music from the media player plays (real time): 别说了 clears it and the link's part (the media
    player's stop) ends the track: nothing more is played."""
    cfg, asr = engines
    with serving({"music.wav": encoded("wav", 30.0)}) as (_site, url):
        player = KeepingPlayer()
        rig = StopRig(cfg, asr, player)
        media = MediaPlayer(rig.playback)
        rig.also_on_stop.append(media.stop)
        try:
            media.play(f"{url}/music.wav")
            assert wait_until(lambda: len(player.blocks) > 10)
            rig.hear(np.concatenate([silence(0.8), say("别说了"), silence(1.5)]))
            assert len(rig.stops) == 1 and media.state is MediaState.IDLE
            assert wait_until(lambda: not rig.playback.playing)
            played = len(player.blocks)
            assert not wait_until(lambda: len(player.blocks) > played, 0.4)
            assert played * player.rate // 50 < 30 * player.rate  # well before the music's end
        finally:
            media.close()
            rig.close()


def test_a_stop_word_without_asr_or_phrases_is_none(engines):
    cfg, asr = engines
    assert stop_word(cfg, None) is None
    assert stop_word(cfg, asr, StopWordSettings(phrases=())) is None


def test_the_stop_phrases_come_from_satellite_stop_words(engines):
    _, asr = engines
    cfg = load_config([{"satellite": {"stop_words": "够了， 停下 ,"}}])
    assert cfg.satellite.stop_phrases == ("够了", "停下")
    made = stop_word(cfg, asr)
    assert made is not None
    heard = made.engine.stop_phrases.match
    assert heard("够了。") and heard("停下") and not heard("停") and not heard("别说了")
    assert stop_word(load_config([{"satellite": {"stop_words": " "}}]), asr) is None  # empty: no stop word


def test_a_stop_word_with_nothing_to_say_is_a_config_error_naming_the_fix():
    from rkvoice.errors import RkvoiceError

    with pytest.raises(RkvoiceError, match=r"satellite.stop_words: '!!' has no word to say.*停,别说了,stop"):
        load_config([{"satellite": {"stop_words": "停,!!"}}])
