"""The satellite as an ESPHome voice-assistant device: the adapter between Home Assistant's ESPHome
integration (rkvoice.esphome.server) and the one satellite core (rkvoice.satellite.core), on one event
loop, as the Wyoming adapter (rkvoice.satellite.link) is.

A connection that subscribes to the voice assistant (SubscribeVoiceAssistantRequest) runs the
satellite (the core's ``connect`` + ``run_satellite``; the mute switch pauses it); when it leaves, the
core is told (``disconnect``: the daemon's local assistant answers meanwhile).

A turn, as the core asks for it (``SatellitePort``):

- ``ask`` -> VoiceAssistantRequest(start, wake_word_phrase: the active phrase; none when the
  conversation continues); ``audio`` -> VoiceAssistantAudio (16 kHz s16le mono); ``stop_audio`` ->
  VoiceAssistantAudio(end) when the request's speech ended, VoiceAssistantRequest(start=False) when the
  run was abandoned (a mute, a disconnect, a new run).
- Home Assistant's events back: STT_START -> ``pipeline_started``, STT_VAD_END -> ``speech_ended``,
  STT_END -> ``heard``, INTENT_END -> whether the conversation continues, TTS_START -> ``answering``,
  TTS_END's URL (or RUN_START's, as soon as INTENT_PROGRESS says the TTS streams) -> played through the
  core as it arrives (rkvoice.esphome.reply_stream), ERROR -> ``failed``. A pipeline with no speech-to-text sends no event at
  all: with none within ``event_wait_s`` of the request, the run fails (one line).
- Once a reply has played (``played``), VoiceAssistantAnnounceFinished (without it HA's satellite stays
  "responding"); a run that ends without a reply sends it at RUN_END. When the conversation continues,
  a new run starts then (the microphone reopens after the reply, never during it), without a wake phrase.

VoiceAssistantAnnounceRequest (announce, start_conversation, ask_question): the chime and the media are
played as they arrive, then AnnounceFinished; with ``start_conversation`` a run starts as above. Timer
events keep the timer table; a finished timer rings (the core's ``ring``). The media player entity
(rkvoice.esphome.media_entity) is held while the satellite hears or speaks; the stop word ends it.

A URL that fails or is not audio: one line, what arrived played, AnnounceFinished all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from aioesphomeapi.api_pb2 import (  # type: ignore[attr-defined]
    VoiceAssistantAnnounceFinished,
    VoiceAssistantAnnounceRequest,
    VoiceAssistantAudio,
    VoiceAssistantAudioSettings,
    VoiceAssistantEventResponse,
    VoiceAssistantRequest,
    VoiceAssistantResponse,
    VoiceAssistantTimerEventResponse,
)
from aioesphomeapi.model import VoiceAssistantEventType as Ev, VoiceAssistantTimerEventType as TimerEv
from google.protobuf.message import Message

from rkvoice import __version__
from rkvoice.clock import Clock, MonotonicClock
from rkvoice.config import Config
from rkvoice.endpoint import parse_uri
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.satellite.core import SatelliteCore
from rkvoice.satellite.feed import loop_event
from rkvoice.satellite.info import wake_word
from rkvoice.satellite.playback import Playback, Stream
from rkvoice.satellite.state import RATE, Run
from rkvoice.satellite.timers import TimerTable

from .announce import announcer
from .entities import Entity, MuteSwitch, WakeWords
from .identity import KeyStore, load_state
from .media_entity import MediaPlayerEntity
from .reply_stream import ReplyStreamer
from .server import ApiConnection, ApiServer, DeviceInfo
from .turns import ABANDONED, Finish, Turn

log = logging.getLogger(__name__)

EVENT_WAIT_S = 5.0
"""After a request: how long Home Assistant may stay silent before the run fails (a pipeline with no
speech-to-text answers the request and then sends nothing)."""
MUTE_KEY = 1
class EsphomeLink:
    """The ESPHome adapter over its ``core``: ``serve(stop, ready)`` runs the loop on the calling thread
    (blocking). ``entities``: more entities to list; the mute switch is key 1, the media player 2."""

    def __init__(self, cfg: Config, playback: Playback, timers: TimerTable, clock: Clock | None = None,
                 uri: str = "", entities: Sequence[Entity] = (), state_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.host = parse_uri(uri or cfg.satellite.uri).host
        self.port = cfg.satellite.esphome.port
        self.playback = playback
        self.timers = timers
        self.clock = clock or MonotonicClock()
        self.core = SatelliteCore(self, playback, self.clock)
        self.running = self.core.running
        self.connected = threading.Event()
        """A client runs the voice assistant (subscribed)."""
        self.connections = 0
        self.event_wait_s = EVENT_WAIT_S
        self.device = load_state(cfg, state_dir)
        self.keys = KeyStore(cfg, state_dir)
        self.wake_words = WakeWords({wake_word(cfg): cfg.hear.wake_phrase}, self.device)
        self.mute = MuteSwitch(MUTE_KEY, lambda: self.device.muted, self._set_muted)
        self.media = MediaPlayerEntity(playback, self.entity_changed)
        self.core.on_state, self.core.on_stop = self.media.player.follow, self.media.player.stop
        info = DeviceInfo(self.device.name, cfg.satellite.name, self.device.mac,
                          __version__, cfg.satellite.area)
        self.server = ApiServer(info, self.keys, [self.mute, self.media, *entities], self.wake_words, self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._peer: ApiConnection | None = None
        self._turn: Turn | None = None
        self._continuing = False  # the next ask continues the conversation (no wake phrase)
        self._conversation_id = ""
        self._finishes: dict[int, Finish] = {}  # stream id -> what follows once it has played
        self._tasks: set[asyncio.Task[None]] = set()

    # -- serving ---------------------------------------------------------------------------------

    def serve(self, stop: threading.Event, ready: Callable[[EsphomeLink], None] | None = None) -> None:
        """Listen until ``stop`` is set; ``ready(link)`` once bound. A port that cannot be bound is an
        RkvoiceError naming the key to change."""
        asyncio.run(self._serve(stop, ready))

    async def _serve(self, stop: threading.Event, ready: Callable[[EsphomeLink], None] | None) -> None:
        loop = self._loop = asyncio.get_running_loop()
        done = loop_event(stop, "esphome-stop")
        try:
            server = await asyncio.start_server(self._accept, host=self.host, port=self.port)
        except OSError as exc:
            raise RkvoiceError(Stage.WYOMING, "bind-failed", f"esphome: cannot listen on {self.host}:{self.port}: "
                               f"{exc.strerror or exc}; pick a free port for satellite.esphome.port") from exc
        self.port = int(server.sockets[0].getsockname()[1])
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="esphome-fetch")
        log.info("esphome: the ESPHome device %r (MAC %s) waits for Home Assistant on %s:%d (%s)",
                 self.server.info.name, self.server.info.mac, self.host, self.port,
                 "encrypted" if self.keys.current() is not None else "plain text; set satellite.esphome.key to encrypt")
        hearing = self.core.feed.attach(loop)
        mdns = None
        if self.cfg.satellite.esphome.zeroconf:
            mdns = announcer(self.server.info, self.host, self.port, self.keys.current() is not None)
            self._spawn(mdns.start())  # the announcement's probing takes a moment: serving starts meanwhile
        try:
            if ready is not None:
                ready(self)
            await done.wait()
        finally:
            self.core.feed.detach()
            hearing.cancel()
            server.close()
            self.server.close_all()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=2.0)
            if mdns is not None:
                await mdns.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)
            self.media.player.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._loop = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self.server.accept(reader, writer)

    def add_entity(self, entity: Entity) -> None:
        """One more entity to list, before Home Assistant connects; its key must be unique (the mute switch
        is 1, the media player 2)."""
        assert all(e.key != entity.key for e in self.server.entities), f"entity key {entity.key} is taken"
        self.server.entities.append(entity)

    def entity_changed(self, entity: Entity) -> None:
        """From any thread: ``entity``'s state changed by itself (a track ended): every client is told."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self.server.state_changed, entity)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _send(self, *messages: Message) -> None:
        if self._peer is not None:
            self._peer.send(*messages)

    # -- the connection that runs the voice assistant (server.VoiceSide) ----------------------------

    def subscribed(self, conn: ApiConnection, on: bool) -> None:
        if not on:
            if conn is self._peer:
                self._leave("unsubscribed")
            return
        old, self._peer = self._peer, conn
        if old is not None and old is not conn:
            log.info("esphome: %s runs the voice assistant now (in place of %s)", conn.peer, old.peer)
        self.connected.set()
        if not self.core.connected:
            self.core.connect()
        if not self.device.muted:
            self.core.run_satellite()
        log.info("esphome: %s runs the satellite%s", conn.client or conn.peer, " (muted)" if self.device.muted else "")

    def closed(self, conn: ApiConnection) -> None:
        if conn is self._peer:
            self._leave("disconnected")

    def _leave(self, why: str) -> None:
        self._peer = None
        self._turn = None
        self._continuing = False
        self.connected.clear()
        self.core.disconnect()
        log.info("esphome: Home Assistant's voice assistant %s", why)

    def _set_muted(self, muted: bool) -> None:
        if muted == self.device.muted:
            return
        self.device.muted = muted
        self.device.save()
        if muted:
            self.core.pause()
        elif self._peer is not None:
            self.core.run_satellite()
        log.info("esphome: the microphone is %s (Home Assistant's mute switch)", "muted" if muted else "on")

    def handle(self, conn: ApiConnection, msg: Message) -> bool:
        if isinstance(msg, (VoiceAssistantEventResponse, VoiceAssistantResponse)) and conn is not self._peer:
            log.warning("esphome: %s sent %s but does not run the voice assistant; ignored", conn.peer,
                        type(msg).__name__)
        elif isinstance(msg, VoiceAssistantEventResponse):
            try:
                kind = Ev(msg.event_type)
            except ValueError:
                log.warning("esphome: %s sent voice event %d, which this device does not know; ignored", conn.peer,
                            msg.event_type)
                return True
            self._event(kind, {d.name: d.value for d in msg.data})
        elif isinstance(msg, VoiceAssistantResponse):
            self._response(msg)
        elif isinstance(msg, VoiceAssistantAnnounceRequest):
            self._announce(msg)
        elif isinstance(msg, VoiceAssistantTimerEventResponse):
            self._timer(msg)
        elif isinstance(msg, VoiceAssistantAudio):
            log.debug("esphome: audio from Home Assistant ignored (the device plays replies by URL)")
        else:
            return False
        return True

    # -- the core's port -----------------------------------------------------------------------------

    def ask(self, run: Run) -> None:
        phrase = "" if self._continuing else self.wake_words.phrase
        conversation = self._conversation_id if self._continuing else ""
        self._continuing = False
        turn = self._turn = Turn(run)
        self._send(VoiceAssistantRequest(start=True, wake_word_phrase=phrase, conversation_id=conversation,
                                         audio_settings=VoiceAssistantAudioSettings(volume_multiplier=1.0)))
        if self._loop is not None:
            turn.timeout = self._loop.call_later(self.event_wait_s, self._no_event, turn)

    def audio(self, run: Run, samples: np.ndarray, at_s: float) -> None:
        pcm = np.clip(np.round(np.asarray(samples, np.float32) * 32767.0), -32768, 32767).astype("<i2").tobytes()
        self._send(VoiceAssistantAudio(data=pcm))

    def stop_audio(self, run: Run) -> None:
        if run.ended in ABANDONED:
            self._send(VoiceAssistantRequest(start=False))
        elif run.transcript is None and run.error is None:
            self._send(VoiceAssistantAudio(end=True))

    def played(self, stream: Stream) -> None:
        finish = self._finishes.pop(stream.id, None)
        if finish is not None:
            self._finished(finish, cut=stream.cut)

    # -- Home Assistant's pipeline -------------------------------------------------------------------

    def _heard_from_ha(self) -> Turn | None:
        turn = self._turn
        if turn is not None and not turn.heard_from_ha:
            turn.heard_from_ha = True
            if turn.timeout is not None:
                turn.timeout.cancel()
        return turn

    def _no_event(self, turn: Turn) -> None:
        if turn is self._turn and not turn.heard_from_ha and not turn.run.over.is_set():
            self._send(VoiceAssistantRequest(start=False))  # HA's pipeline is told it is over too
            self.core.failed(f"no event within {self.event_wait_s:g} s of the request (does the assistant's "
                             "pipeline have speech-to-text?)", "no-event")

    def _response(self, msg: Message) -> None:
        """VoiceAssistantResponse: HA took the request (not an event: a pipeline with no speech-to-text
        answers it and then says nothing)."""
        if msg.error:
            self.core.failed("Home Assistant could not start its pipeline", "start-failed")
        elif msg.port:
            log.warning("esphome: Home Assistant asked for the audio over UDP port %d; the device sends it over the "
                        "API connection only", msg.port)

    def _event(self, kind: Ev, data: dict[str, str]) -> None:
        turn = self._heard_from_ha()
        log.debug("esphome: %s %s", kind.name, data)
        if kind is Ev.VOICE_ASSISTANT_STT_START:
            self.core.pipeline_started()
        elif kind is Ev.VOICE_ASSISTANT_STT_VAD_END:
            self.core.speech_ended()
        elif kind is Ev.VOICE_ASSISTANT_STT_END:
            self.core.heard(data.get("text", ""))
        elif kind is Ev.VOICE_ASSISTANT_INTENT_END:
            self._conversation_id = data.get("conversation_id", "")
            if turn is not None:
                turn.continues = data.get("continue_conversation") == "1"
        elif kind is Ev.VOICE_ASSISTANT_TTS_START:
            self.core.answering(data.get("text", ""))
        elif kind is Ev.VOICE_ASSISTANT_RUN_START and turn is not None:
            turn.tts_url = data.get("url", "")
        elif kind is Ev.VOICE_ASSISTANT_INTENT_PROGRESS and data.get("tts_start_streaming") == "1":
            self._reply(turn, turn.tts_url if turn is not None else "")  # a streaming answer: its audio comes now
        elif kind is Ev.VOICE_ASSISTANT_TTS_END:
            self._reply(turn, data.get("url", ""))
        elif kind is Ev.VOICE_ASSISTANT_ERROR:
            self.core.failed(data.get("message", "") or "an error", data.get("code", ""))
        elif kind is Ev.VOICE_ASSISTANT_RUN_END and turn is not None:
            if not turn.run.over.is_set():
                self.core.failed("the run ended without a transcript", "run-end")
            if not turn.replying:
                self._finished(Finish(then_listen=False))
            if turn is self._turn:
                self._turn = None

    def _reply(self, turn: Turn | None, url: str) -> None:
        """The run's answer at ``url``, played once (whether the conversation continues is known by the
        time it has played: INTENT_END comes after a streaming answer's start)."""
        if turn is not None and url and not turn.replying:
            turn.replying = True
            self._spawn(self._play([url], Finish(then_listen=False, turn=turn)))

    def _finished(self, finish: Finish, cut: bool = False) -> None:
        self._send(VoiceAssistantAnnounceFinished(success=True))
        if finish.listens and not cut and self._peer is not None and self.running.is_set():
            log.info("esphome: the conversation continues; listening without the wake phrase")
            self._continuing = True
            self.core.begin_run(np.zeros(0, np.float32), self.core.heard_to)

    def _announce(self, msg: Message) -> None:
        urls = [u for u in (msg.preannounce_media_id, msg.media_id) if u]
        log.info("esphome: Home Assistant announces %r%s", msg.text or msg.media_id,
                 ", then listens" if msg.start_conversation else "")
        self._spawn(self._play(urls, Finish(then_listen=bool(msg.start_conversation))))

    async def _play(self, urls: list[str], finish: Finish) -> None:
        """Play ``urls`` in order as they arrive (rkvoice.esphome.reply_stream); ``finish`` follows the last."""
        assert self._pool is not None
        streamer = ReplyStreamer(self._pool, self.core, self.playback)
        if not await streamer.play(urls, lambda stream: self._finishes.__setitem__(stream.id, finish)):
            self._finished(replace(finish, then_listen=False, turn=None))

    def _timer(self, msg: Message) -> None:
        try:
            kind = TimerEv(msg.event_type)
        except ValueError:
            log.warning("esphome: Home Assistant sent timer event %d, which this device does not know; ignored",
                        msg.event_type)
            return
        if kind is TimerEv.VOICE_ASSISTANT_TIMER_STARTED:
            self.timers.started(msg.timer_id, msg.total_seconds, msg.name)
        elif kind is TimerEv.VOICE_ASSISTANT_TIMER_UPDATED:
            self.timers.updated(msg.timer_id, msg.is_active, msg.seconds_left)
        elif kind is TimerEv.VOICE_ASSISTANT_TIMER_CANCELLED:
            self.timers.cancelled(msg.timer_id)
        elif kind is TimerEv.VOICE_ASSISTANT_TIMER_FINISHED:
            self.core.ring(self.timers.finished(msg.timer_id))


__all__ = ["RATE", "EsphomeLink"]
