"""rkvoice as an ESPHome voice device of the REAL Home Assistant 2026.2.3 (tests/ha_home.py: zh-Hans, a light
客厅灯 in area 客厅 with alias 大灯), its esphome integration loaded from the test venv. One HA for the
module, two devices in it (tests/support/esphome_home.py): ``plain`` (no key, as the daemon runs it: the
local assistant answers while HA is away) and ``keyed`` (satellite.esphome.key, HA's flow asks for the
key). Both are added by HA's esphome config flow over REST; rkvoice's Wyoming services are the pipeline's
speech-to-text and text-to-speech, HA's own agent answers. Requests are SPOKEN by the portable voice into
the device's microphone in real time and woken on the board by the portable wake engine; states are read
back from HA.

Covered: a light switched by voice (plain and keyed), a wrong key refused on both sides, announce of a
file HA serves, ask_question and start_conversation (the keyed device on a pipeline whose agent is
rkvoice-handle) answered without the wake phrase, the wake word chosen in HA, play_media and a timer
ended by the stop word, an announcement through the media player, HA stopped and started again.

The wake-word test gives the plain device a second phrase to offer (你好小智: the product offers
hear.wake_phrase alone): HA's select switches to it, the device keeps the choice and its next request
carries it. The last test stops HA and starts it again (HA reconnects by itself). Skips (saying why)
without the HA venv (or one built without the esphome integration) or the models.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import wait_until

from tests.ha_home import HA_VENV, HOME, HomeHa, home_ha, require_ha_venv
from tests.support import cer
from tests.support.esphome_home import EsphomeHome, add_esphome, esphome_home
from tests.support.satellite_home import RATE, spoken

KEY = "mYC2sMTuW9t2Cq8P4Cv2RM+aqJ9u7HcvW3C4vRwzBNE="
"""satellite.esphome.key of the keyed device (base64 of 32 bytes)."""
WRONG_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
SECOND_WAKE = ("nihaoxiaozhi", "你好小智")
STOP = "别说了"
"""(停 alone, a 0.6 s segment, Whisper base often hears as nothing while the timer sound plays.)"""
MUSIC_S = 60.0
STOP_WITHIN_S = 4.0
"""The stop word's end -> the sound stopped, on this loaded 2-core machine (the product's goal, 300 ms, is
bench/stop_word.py's on the board)."""
ANNOUNCEMENT = "晚饭做好了"
ANSWER = "好的，开灯吧"
"""Said to ask_question (a short 好的 alone, 0.7 s with its silence, Whisper base sometimes hears as nothing)."""


def require_esphome() -> None:
    require_ha_venv()
    manifest = next((HA_VENV / "lib").glob("python3*/site-packages/homeassistant/components/esphome/manifest.json"),
                    None)
    aioesphomeapi = next((HA_VENV / "lib").glob("python3*/site-packages/aioesphomeapi"), None)
    if manifest is None or aioesphomeapi is None:
        pytest.skip(f"the Home Assistant venv at {HA_VENV} cannot load the esphome integration (no aioesphomeapi): "
                    "build it again with `py312/bin/python tests/test_ha_e2e.py --build-venv`")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return Path(tmp_path_factory.mktemp("esphome_e2e"))


@pytest.fixture(scope="module")
def ha(work, hear_voice) -> Iterator[HomeHa]:
    """HA with a www/ folder holding the announcement and some music (served as /local/announce.wav and
    /local/music.wav)."""
    import soundfile as sf

    require_esphome()
    www = work / "ha" / "config" / "www"
    www.mkdir(parents=True)
    sf.write(www / "announce.wav", spoken(hear_voice, ANNOUNCEMENT), RATE)
    t = np.arange(int(MUSIC_S * 22050)) / 22050
    chord = sum(np.sin(2 * np.pi * f * t) for f in (262.0, 330.0, 392.0)) * 0.1
    sf.write(www / "music.wav", np.stack([chord, chord], axis=1), 22050)  # stereo 22.05 kHz: resampled on the board
    with home_ha(work / "ha") as ha:
        yield ha


@pytest.fixture(scope="module")
def plain(ha, work, hear_asr, hear_voice) -> Iterator[EsphomeHome]:
    from tests.fakes import RecordingPlayer

    def paced(cfg: Any) -> RecordingPlayer:  # real time, as a sound card: music and rings last as long as they sound
        return RecordingPlayer(cfg, max_ahead_s=0.25)

    with esphome_home(work / "plain", hear_asr, hear_voice, ha=ha, local=True, player=paced,
                      wake_phrases=dict([SECOND_WAKE])) as home:
        yield home


@pytest.fixture(scope="module")
def keyed(ha, plain, work, hear_asr, hear_voice) -> Iterator[EsphomeHome]:
    with esphome_home(work / "keyed", hear_asr, hear_voice, ha=ha, key=KEY, services=False,
                      name="rkvoice-keyed") as home:
        yield home


def call(ha: HomeHa, service: str, body: dict[str, Any], response: bool = False) -> Any:
    return ha.rest("POST", f"/api/services/{service}" + ("?return_response" if response else ""), body)


def test_a_spoken_request_to_the_plain_device_turns_the_light_on(plain):
    ha = plain.ha
    ha.rest("POST", "/api/services/light/turn_off", {"entity_id": ha.light})
    ha.wait_state(ha.light, "off")
    run = plain.ask(f"打开{HOME.alias}")
    assert HOME.alias in (run.transcript or ""), run.transcript
    ha.wait_state(ha.light, "on")
    assert run.reply.kind == "reply" and run.reply.audio_s > 0.3 and not run.reply.cut
    assert plain.player.samples / plain.player.rate >= run.reply.audio_s - 0.05  # played on the board
    request = plain.requests()[-1]
    assert request.wake_word_phrase == "小智小智"
    assert wait_until(lambda: ha.state(plain.entities["assist_satellite"])["state"] == "idle", 10), \
        ha.state(plain.entities["assist_satellite"])  # AnnounceFinished after the reply: not left "responding"


def test_a_spoken_request_to_the_keyed_device_turns_the_light_off(keyed):
    ha = keyed.ha
    ha.rest("POST", "/api/services/light/turn_on", {"entity_id": ha.light})
    ha.wait_state(ha.light, "on")
    conns = [c for c in keyed.link.server.connections if c.client]
    assert conns and all(c.frames.encrypted for c in conns), [(c.peer, c.frames) for c in conns]
    run = keyed.ask(f"关闭{HOME.area}的灯")
    assert ha.wait_state(ha.light, "off")["state"] == "off", (run.transcript, ha.log())
    assert run.reply.kind == "reply" and run.reply.audio_s > 0.3


def test_a_wrong_key_is_refused_by_the_device_and_by_home_assistants_flow(keyed, caplog):
    ha = keyed.ha
    flow = ha.rest("POST", "/api/config/config_entries/flow", {"handler": "esphome"})
    url = f"/api/config/config_entries/flow/{flow['flow_id']}"
    try:
        got = ha.rest("POST", url, {"host": "127.0.0.1", "port": keyed.link.port})
        assert got.get("step_id") == "encryption_key", got  # the device needs a key: HA asks for it
        caplog.clear()
        caplog.set_level(logging.INFO, logger="rkvoice.esphome")
        got = ha.rest("POST", url, {"noise_psk": WRONG_KEY})
        assert got.get("type") == "form" and got.get("errors") == {"base": "invalid_psk"}, got
        lines = [r.getMessage() for r in caplog.records if r.name.startswith("rkvoice.esphome")]
        refused = [ln for ln in lines if "Noise handshake" in ln]
        assert len(refused) == 1 and "key" in refused[0], lines
    finally:
        ha.rest("DELETE", url)
    assert keyed.link.running.is_set()  # the device goes on serving HA


def test_an_announcement_of_a_file_home_assistant_serves_plays_on_the_board(plain):
    ha, playback = plain.ha, plain.satellite.playback
    before, finished = len(playback.streams), len([m for m in plain.sent if type(m).__name__ ==
                                                   "VoiceAssistantAnnounceFinished"])
    t0 = time.monotonic()
    call(ha, "assist_satellite/announce", {"entity_id": plain.entities["assist_satellite"],
                                           "media_id": "/local/announce.wav"})
    took = time.monotonic() - t0
    streams = playback.streams[before:]
    assert [s.kind for s in streams] == ["announce", "announce"], streams  # HA's chime, then the file
    wav_s = len(spoken(plain.voice, ANNOUNCEMENT)) / RATE
    assert streams[-1].ended.is_set() and abs(streams[-1].audio_s - wav_s) < 0.3, (streams[-1].audio_s, wav_s)
    assert took >= sum(s.audio_s for s in streams) - 0.2  # the action returned once the board had played it
    sent = [m for m in plain.sent if type(m).__name__ == "VoiceAssistantAnnounceFinished"]
    assert len(sent) == finished + 1


def test_ask_question_hears_the_answer_without_the_wake_phrase(plain):
    ha, core = plain.ha, plain.link.core
    before = len(core.runs)
    answer: dict[str, Any] = {}

    def ask() -> None:
        try:
            answer["got"] = call(ha, "assist_satellite/ask_question",
                                 {"entity_id": plain.entities["assist_satellite"], "question": "要开灯吗"},
                                 response=True)
        except AssertionError as exc:
            answer["error"] = str(exc)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    assert wait_until(lambda: len(core.runs) > before, 60), f"the device did not listen after the question\n{ha.log()}"
    plain.mic.say(np.concatenate([spoken(plain.voice, ANSWER), np.zeros(RATE, np.float32)]))
    asking.join(60)
    assert "got" in answer, (answer, ha.log())
    said = answer["got"]["service_response"]
    assert cer(ANSWER, said["sentence"]) <= 0.34, said
    request = plain.requests()[-1]
    assert request.wake_word_phrase == "", request  # the follow-up: no wake phrase
    run = core.runs[before]
    assert run.transcript == said["sentence"]


def test_start_conversation_with_rkvoice_as_the_agent_listens_without_the_wake_phrase(keyed):
    """HA refuses start_conversation for its own agent: the keyed device's pipeline is one whose agent is
    rkvoice-handle (the Wyoming services' conversation entity); the follow-up is answered by its tools."""
    ha, core, select = keyed.ha, keyed.link.core, keyed.select("pipeline")
    with ha.ws() as sock:
        agent = next(e["entity_id"] for e in sock.call("config/entity_registry/list")
                     if e["platform"] == "wyoming" and e["entity_id"].startswith("conversation."))
        listed = sock.call("assist_pipeline/pipeline/list")
        preferred = next(p for p in listed["pipelines"] if p["id"] == listed["preferred_pipeline"])
        fields = {k: v for k, v in preferred.items() if k != "id"}
        sock.call("assist_pipeline/pipeline/create", **{**fields, "name": "rkvoice agent", "conversation_engine": agent})
    call(ha, "select/select_option", {"entity_id": select, "option": "rkvoice agent"})
    try:
        before = len(core.runs)
        t0 = time.monotonic()
        call(ha, "assist_satellite/start_conversation", {"entity_id": keyed.entities["assist_satellite"],
                                                         "start_message": "要我做什么", "preannounce": False})
        took = time.monotonic() - t0
        streams = [s for s in keyed.satellite.playback.streams if s.kind == "announce"]
        assert streams and took >= streams[-1].audio_s - 0.1  # the action returned once the board had said it
        assert wait_until(lambda: len(core.runs) > before, 10), f"the device did not listen\n{ha.log()}"
        keyed.mic.say(np.concatenate([spoken(keyed.voice, "现在几点"), np.zeros(RATE, np.float32)]))
        run = core.runs[before]
        assert wait_until(lambda: run.reply is not None and run.reply.ended.is_set(), 60), \
            (run.transcript, run.error, ha.log())
        assert "几点" in (run.transcript or ""), run.transcript
        assert run.reply.audio_s > 0.5  # rkvoice's answer (the time), said on the board
        assert keyed.requests()[-1].wake_word_phrase == ""
    finally:
        call(ha, "select/select_option", {"entity_id": select, "option": preferred["name"]})


def test_the_wake_word_chosen_in_home_assistant_takes_effect_on_the_device(plain, work):
    ha, select = plain.ha, plain.select("wake_word")
    configured = next(iter(plain.link.wake_words.phrases))  # hear.wake_phrase's id
    options = ha.state(select)["attributes"]["options"]
    assert "小智小智" in options and SECOND_WAKE[1] in options, options
    assert ha.state(select)["state"] == "小智小智"
    call(ha, "select/select_option", {"entity_id": select, "option": SECOND_WAKE[1]})
    assert wait_until(lambda: plain.link.wake_words.active == [SECOND_WAKE[0]], 10), plain.link.device
    state = work / "plain" / "state" / "esphome.json"  # kept across restarts (written once it is chosen)
    assert wait_until(lambda: json.loads(state.read_text())["active_wake_words"] == [SECOND_WAKE[0]], 5), \
        state.read_text()
    try:
        ha.rest("POST", "/api/services/light/turn_off", {"entity_id": ha.light})
        ha.wait_state(ha.light, "off")
        plain.ask(f"打开{HOME.alias}")
        ha.wait_state(ha.light, "on")
        assert plain.requests()[-1].wake_word_phrase == SECOND_WAKE[1]
    finally:
        call(ha, "select/select_option", {"entity_id": select, "option": "小智小智"})
    assert wait_until(lambda: plain.link.wake_words.active == [configured], 10)


def say_stop(home: EsphomeHome) -> None:
    home.mic.say(np.concatenate([spoken(home.voice, STOP), np.zeros(RATE, np.float32)]))


def test_play_media_of_a_file_home_assistant_serves_plays_until_the_stop_word(plain):
    ha, player, media = plain.ha, plain.player, plain.select("media_player")
    t0 = time.monotonic()
    call(ha, "media_player/play_media", {"entity_id": media, "media_content_id": "/local/music.wav",
                                         "media_content_type": "music"})
    ha.wait_state(media, "playing", 15)
    before = player.samples
    assert wait_until(lambda: player.samples - before >= 2 * player.rate, 10), "the music did not reach the speaker"
    say_stop(plain)
    ha.wait_state(media, "idle", 15)
    assert time.monotonic() - t0 < MUSIC_S - 10  # ended by the word, not by its end
    stopped_after = player.segments[-1][1] - plain.mic.speech_end_at
    print(f"music: stop word's end -> the music stopped {1000 * stopped_after:.0f} ms")
    assert stopped_after <= STOP_WITHIN_S, stopped_after
    quiet = player.samples
    time.sleep(1.0)
    assert player.samples == quiet  # nothing more of it


def test_an_announcement_through_the_media_player_plays_on_the_board(plain, caplog):
    """``media_player.play_media`` with ``announce``: HA sends it through its ffmpeg proxy as the WAV the
    device lists (written to a pipe: a header that does not say its length)."""
    ha, player, media = plain.ha, plain.player, plain.select("media_player")
    before = player.samples
    call(ha, "media_player/play_media", {"entity_id": media, "media_content_id": "/local/announce.wav",
                                         "media_content_type": "music", "announce": True})
    wav_s = len(spoken(plain.voice, ANNOUNCEMENT)) / RATE
    assert wait_until(lambda: (player.samples - before) / player.rate >= wav_s - 0.05, 20), \
        ((player.samples - before) / player.rate, wav_s, plain.ha.log())  # all of it (HA's proxy may pad)
    ha.wait_state(media, "idle", 15)
    bad = [r.getMessage() for r in caplog.records if r.name.startswith("rkvoice") and r.levelno >= logging.WARNING]
    assert not bad, bad  # (when it was FLAC, libsndfile failed on it after its first read: the end lost)


def test_a_timer_set_by_voice_rings_until_the_stop_word(plain):
    satellite, ringer = plain.satellite, plain.link.core.ringer
    asked = time.monotonic()
    run = plain.ask("设置定时十秒")  # zh-CN HassStartTimer, as test_satellite_e2e says it
    assert "定时" in (run.transcript or ""), run.transcript
    assert wait_until(lambda: ringer.ringing, 30), f"HA's timer did not finish on the board\n{plain.ha.log()}"
    assert time.monotonic() - asked >= 8.0  # HA's 10 s timer, started by the request
    try:
        assert wait_until(lambda: ringer.last.rings >= 2, 10)  # it rings on (no one stopped it yet)
        say_stop(plain)
        assert wait_until(lambda: not ringer.ringing, 10), "the stop word did not end the ring"
    finally:
        ringer.stop("the test's end")  # (a ring left on would stop at the next test's wake)
    stopped_after = time.monotonic() - plain.mic.speech_end_at
    print(f"timer: stop word's end -> the ring stopped <= {1000 * stopped_after:.0f} ms")
    assert stopped_after <= STOP_WITHIN_S, stopped_after
    assert satellite.timers.ids() == []


def test_while_home_assistant_is_stopped_the_board_answers_locally_then_home_assistant_again(plain, keyed):
    from tests.test_satellite_away_e2e import away_and_back

    away_and_back(plain)
    assert wait_until(lambda: keyed.link.running.is_set(), 60), "HA did not reconnect the keyed device"


def test_the_flow_of_a_device_that_is_not_there_fails(ha):
    from tests.support.net import free_port

    got = add_esphome(ha, free_port())
    assert got.get("type") == "form" and got.get("errors") == {"base": "connection_error"}, got
