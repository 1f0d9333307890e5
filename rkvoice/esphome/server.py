"""The ESPHome native API server: connections on one asyncio loop, the device's own messages answered
here, the voice assistant's handed to the adapter (``VoiceSide``: rkvoice.esphome.voice).

What Home Assistant sends on connect, and the answers: HelloRequest -> HelloResponse (API 1.10: below it
HA ignores the voice-assistant feature flags); AuthenticationRequest -> nothing (modern clients never
wait for it); DeviceInfoRequest -> DeviceInfoResponse (the stable MAC, ``project_name`` with a dot, the
feature flags); ListEntitiesRequest -> every entity, then ListEntitiesDone; SubscribeStatesRequest ->
every entity's state; PingRequest -> PingResponse; DisconnectRequest -> DisconnectResponse and the
connection closes; NoiseEncryptionSetKeyRequest -> stored, used from the next connection;
VoiceAssistantConfigurationRequest / SetConfiguration -> the wake words. A message type the API does not
know, or one that does not parse: one log line, the connection goes on. Broken framing, a refused or
failed handshake, a frame over the protocol's size, a stall mid-frame: one log line, that connection
closes (rkvoice.esphome.framing). A fault of our own handling a message: logged with its traceback, the
connection goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from aioesphomeapi.api_pb2 import (  # type: ignore[attr-defined]
    AuthenticationRequest,
    DeviceInfoRequest,
    DeviceInfoResponse,
    DisconnectRequest,
    DisconnectResponse,
    GetTimeResponse,
    HelloRequest,
    HelloResponse,
    ListEntitiesDoneResponse,
    ListEntitiesRequest,
    NoiseEncryptionSetKeyRequest,
    NoiseEncryptionSetKeyResponse,
    PingRequest,
    PingResponse,
    SubscribeHomeassistantServicesRequest,
    SubscribeHomeAssistantStatesRequest,
    SubscribeStatesRequest,
    SubscribeVoiceAssistantRequest,
    VoiceAssistantConfigurationRequest,
    VoiceAssistantSetConfiguration,
)
from aioesphomeapi.core import MESSAGE_TYPE_TO_PROTO
from google.protobuf.message import DecodeError, Message

from .entities import Entity, WakeWords
from .framing import IDLE_S, STALL_S, FrameError, Frames, Idle, open_frames
from .identity import KeyStore, colon_mac

log = logging.getLogger(__name__)

TYPE_OF = {proto: kind for kind, proto in MESSAGE_TYPE_TO_PROTO.items()}
API_VERSION = (1, 10)
ESPHOME_VERSION = "2025.9.0"
"""What DeviceInfo says the firmware is (Home Assistant compares it with its dashboard's)."""
PROJECT_NAME = "rkvoice.voice satellite"
"""Home Assistant splits it at the dot into manufacturer and model (its setup fails without a dot)."""
VOICE_FEATURES = 1 | 4 | 8 | 16 | 32
"""VOICE_ASSISTANT | API_AUDIO | TIMERS | ANNOUNCE | START_CONVERSATION (aioesphomeapi.VoiceAssistantFeature)."""
MAX_CONNECTIONS = 8
MAX_BUFFERED = 1 << 20
"""A client that leaves this much unread is closed (it stopped reading)."""
QUIET = (AuthenticationRequest, SubscribeHomeassistantServicesRequest, SubscribeHomeAssistantStatesRequest,
         GetTimeResponse, PingResponse, DisconnectResponse)
"""Messages answered with nothing, without a log line."""


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    friendly_name: str
    mac: str
    """12 lowercase hex digits."""
    version: str
    area: str = ""

    def response(self) -> Message:
        return DeviceInfoResponse(
            uses_password=False, name=self.name, friendly_name=self.friendly_name, mac_address=colon_mac(self.mac),
            esphome_version=ESPHOME_VERSION, project_name=PROJECT_NAME, project_version=self.version,
            manufacturer="rkvoice", model="voice satellite", suggested_area=self.area,
            voice_assistant_feature_flags=VOICE_FEATURES, api_encryption_supported=True)


class VoiceSide(Protocol):
    """The voice assistant's side of the connections (on the loop)."""

    def subscribed(self, conn: ApiConnection, on: bool) -> None:
        """SubscribeVoiceAssistantRequest: ``conn`` runs the voice assistant (or no longer)."""

    def handle(self, conn: ApiConnection, msg: Message) -> bool:
        """A voice-assistant message (events, announcements, timers...); False if not one."""

    def closed(self, conn: ApiConnection) -> None:
        """``conn`` is gone."""


class ApiConnection:
    """One client. ``send`` on the loop."""

    def __init__(self, server: ApiServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        host, port = (writer.get_extra_info("peername") or ("?", "?"))[:2]
        self.peer = f"{host}:{port}"
        self.client = ""
        """HelloRequest's client_info (e.g. Home Assistant 2026.2.3)."""
        self.frames: Frames | None = None
        self.closed = False

    def send(self, *messages: Message) -> None:
        if self.closed or self.frames is None:
            return
        frames = self.frames
        self.writer.write(b"".join(frames.pack(TYPE_OF[type(m)], m.SerializeToString()) for m in messages))
        if self.writer.transport.get_write_buffer_size() > MAX_BUFFERED:
            log.warning("esphome: %s stopped reading (over %d bytes unsent); connection closed", self.peer, MAX_BUFFERED)
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()

    async def serve(self) -> None:
        server = self.server
        try:
            opened = await open_frames(self.reader, self.writer, server.keys.current(), server.info.name,
                                       server.info.mac, server.stall_s, server.idle_s)
            if opened is None:
                return
            self.frames, first = opened
            log.debug("esphome: %s connected (%s)", self.peer, "encrypted" if self.frames.encrypted else "plain text")
            pinged = False
            while not self.closed:
                try:
                    frame = await self.frames.read(first)
                except Idle as idle:
                    if pinged:
                        raise FrameError(f"{idle} and did not answer a ping") from None
                    self.send(PingRequest())  # as an ESPHome device pings a quiet client
                    pinged = True
                    continue
                if frame is None:
                    break
                first, pinged = None, False
                self._dispatch(*frame)
        except FrameError as exc:
            if exc.answer and not self.writer.is_closing():
                self.writer.write(exc.answer)
            log.warning("esphome: %s %s; connection closed", self.peer, exc)
        except (ConnectionError, OSError) as exc:
            log.info("esphome: %s left (%s)", self.peer, type(exc).__name__)
        finally:
            self.closed = True
            with contextlib.suppress(Exception):
                self.writer.close()
            server.gone(self)

    def _dispatch(self, kind: int, payload: bytes) -> None:
        proto = MESSAGE_TYPE_TO_PROTO.get(kind)
        if proto is None:
            log.warning("esphome: %s sent message type %d, which the ESPHome API does not have; ignored", self.peer, kind)
            return
        try:
            msg = proto.FromString(payload)
        except (DecodeError, ValueError) as exc:
            log.warning("esphome: %s sent a %s that does not parse (%s); ignored", self.peer, proto.__name__, exc)
            return
        try:
            self.server.handle(self, msg)
        except Exception:
            log.exception("esphome: handling %s's %s failed (a fault of the device's own); message dropped",
                          self.peer, proto.__name__)


class ApiServer:
    """The device's API: its connections, identity, key, entities and wake words; the voice side."""

    def __init__(self, info: DeviceInfo, keys: KeyStore, entities: Sequence[Entity], wake_words: WakeWords,
                 voice: VoiceSide, stall_s: float = STALL_S, idle_s: float = IDLE_S) -> None:
        keys_seen = [e.key for e in entities]
        assert len(set(keys_seen)) == len(keys_seen), f"entity keys must be unique: {keys_seen}"
        self.info = info
        self.keys = keys
        self.entities = list(entities)
        self.wake_words = wake_words
        self.voice = voice
        self.stall_s = stall_s
        self.idle_s = idle_s
        self.connections: set[ApiConnection] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ApiConnection(self, reader, writer)
        if len(self.connections) >= MAX_CONNECTIONS:
            log.warning("esphome: %s refused: %d clients are connected already", conn.peer, MAX_CONNECTIONS)
            writer.close()
            return
        self.connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.serve()
        finally:
            if task is not None:
                self._tasks.discard(task)

    def gone(self, conn: ApiConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.voice.closed(conn)
            if conn.client:
                log.info("esphome: %s (%s) disconnected", conn.client, conn.peer)

    def close_all(self) -> None:
        for conn in list(self.connections):
            conn.close()

    def broadcast(self, *messages: Message) -> None:
        """To every connection that has said hello (an entity's new state)."""
        for conn in list(self.connections):
            if conn.client:
                conn.send(*messages)

    def state_changed(self, entity: Entity) -> None:
        if (state := entity.state()) is not None:
            self.broadcast(state)

    def handle(self, conn: ApiConnection, msg: Message) -> None:
        if isinstance(msg, HelloRequest):
            conn.client = msg.client_info or "a client"
            log.info("esphome: %s connected from %s (API %d.%d, %s)", conn.client, conn.peer, msg.api_version_major,
                     msg.api_version_minor, "encrypted" if conn.frames and conn.frames.encrypted else "plain text")
            conn.send(HelloResponse(api_version_major=API_VERSION[0], api_version_minor=API_VERSION[1],
                                    server_info=f"rkvoice {self.info.version}", name=self.info.name))
        elif isinstance(msg, PingRequest):
            conn.send(PingResponse())
        elif isinstance(msg, DeviceInfoRequest):
            conn.send(self.info.response())
        elif isinstance(msg, ListEntitiesRequest):
            conn.send(*[e.describe() for e in self.entities], ListEntitiesDoneResponse())
        elif isinstance(msg, SubscribeStatesRequest):
            conn.send(*[s for e in self.entities if (s := e.state()) is not None])
        elif isinstance(msg, DisconnectRequest):
            conn.send(DisconnectResponse())
            conn.close()
        elif isinstance(msg, NoiseEncryptionSetKeyRequest):
            conn.send(NoiseEncryptionSetKeyResponse(success=self.keys.set(bytes(msg.key))))
        elif isinstance(msg, VoiceAssistantConfigurationRequest):
            conn.send(self.wake_words.configuration())
        elif isinstance(msg, VoiceAssistantSetConfiguration):
            self.wake_words.set_active(list(msg.active_wake_words))
        elif isinstance(msg, SubscribeVoiceAssistantRequest):
            self.voice.subscribed(conn, bool(msg.subscribe))
        elif isinstance(msg, QUIET):
            pass
        elif not self.voice.handle(conn, msg):
            for entity in self.entities:
                if entity.command(msg):
                    self.state_changed(entity)
                    return
            log.debug("esphome: %s's %s ignored (nothing on this device takes it)", conn.peer, type(msg).__name__)
