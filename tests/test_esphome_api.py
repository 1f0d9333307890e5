"""The board as an ESPHome device (rkvoice.esphome), against the real aioesphomeapi APIClient (what Home
Assistant's ESPHome integration uses) on loopback: plain text and Noise, the key refused or set, the
device's identity and entities, and bad input on the wire (one line each, the server goes on, nothing
leaks). The voice assistant itself: tests/test_esphome_voice.py."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aioesphomeapi import (
    APIClient,
    InvalidEncryptionKeyAPIError,
    MediaPlayerInfo,
    MediaPlayerState,
    RequiresEncryptionAPIError,
    SwitchInfo,
)
from aioesphomeapi.core import EncryptionPlaintextAPIError
from fakes import MarkerWake, wait_until
from test_satellite import FeedMic, StubHear, speak_stage

from rkvoice.config import load_config
from rkvoice.esphome.framing import varint
from rkvoice.esphome.voice import EsphomeLink
from rkvoice.satellite.run import Satellite
from rkvoice.satellite.state import SatelliteState

KEY = base64.b64encode(bytes(range(32))).decode()
OTHER_KEY = base64.b64encode(bytes(range(1, 33))).decode()


def esphome_config(state_dir: Path, key: str = "", zeroconf: bool = False, name: str = "Kitchen Board") -> Any:
    return load_config([{"state": {"dir": str(state_dir)}, "hear": {"ack": "none"},
                         "satellite": {"uri": "tcp://127.0.0.1:0", "name": name, "protocol": "esphome",
                                       "sounds": "wake,timer",  # the player gets HA's audio and the timers' alone
                                       "esphome": {"port": 0, "key": key, "zeroconf": zeroconf}}}])


@contextlib.contextmanager
def esphome_device(state_dir: Path, key: str = "", script: list[Any] | None = None, zeroconf: bool = False,
                   name: str = "Kitchen Board", player: Any = None) -> Iterator[tuple[Satellite, FeedMic, Any]]:
    """The satellite as an ESPHome device on a free loopback port (not announced unless ``zeroconf``), its
    microphone fed by the test (marker k: the wake phrase with ``script[k-1]``); ``player(cfg)`` makes its
    player (default: a RecordingPlayer that takes everything at once)."""
    cfg = esphome_config(state_dir, key, zeroconf, name)
    speak = speak_stage(cfg, player)
    satellite = Satellite(cfg, StubHear(MarkerWake(script or ["", ""])), speak, link=EsphomeLink)  # type: ignore[arg-type]
    satellite.start()
    mic = FeedMic()
    thread = threading.Thread(target=satellite.run, args=(mic, False), daemon=True)
    thread.start()
    try:
        yield satellite, mic, speak
    finally:
        mic.close()
        satellite.close()
        thread.join(5)
        speak.close()


def client(satellite: Satellite, key: str | None = None) -> APIClient:
    return APIClient("127.0.0.1", satellite.link.port, None, noise_psk=key, client_info="test client")


async def connected(satellite: Satellite, key: str | None = None) -> APIClient:
    cli = client(satellite, key)
    await cli.connect(login=True)
    return cli


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("rkvoice")]


@pytest.mark.parametrize("key", ["", KEY], ids=["plain", "noise"])
def test_home_assistants_client_reads_the_device(tmp_path, key):
    with esphome_device(tmp_path, key) as (satellite, _mic, _speak):
        async def scenario() -> None:
            cli = await connected(satellite, key or None)
            try:
                assert cli.api_version is not None and (cli.api_version.major, cli.api_version.minor) >= (1, 10)
                info = await cli.device_info()
                entities, services = await cli.list_entities_services()
                states: list[Any] = []
                cli.subscribe_states(states.append)
                await until_async(lambda: len(states) == 2)
            finally:
                await cli.disconnect()
            assert info.name == "kitchen-board" and info.friendly_name == "Kitchen Board"
            assert "." in info.project_name  # HA splits it into manufacturer and model
            assert info.voice_assistant_feature_flags == 1 | 4 | 8 | 16 | 32  # 61: voice, API audio, timers, announce, start conversation
            assert info.api_encryption_supported
            assert len(info.mac_address.split(":")) == 6
            assert [(type(e), e.key, e.object_id) for e in entities] == [(SwitchInfo, 1, "mute"),
                                                                         (MediaPlayerInfo, 2, "media_player")]
            assert not services
            assert [(s.key, s.state) for s in states] == [(1, False), (2, MediaPlayerState.IDLE)]

        asyncio.run(scenario())


def test_the_mac_and_the_name_are_made_once_and_kept_across_restarts(tmp_path):
    async def identity(satellite: Satellite) -> tuple[str, str, str]:
        cli = await connected(satellite)
        try:
            info = await cli.device_info()
            return info.mac_address, info.name, info.friendly_name
        finally:
            await cli.disconnect()

    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        mac, name, friendly = asyncio.run(identity(satellite))
    stored = json.loads((tmp_path / "esphome.json").read_text())
    assert mac == ":".join(stored["mac"][i : i + 2] for i in range(0, 12, 2)).upper()
    assert int(stored["mac"][:2], 16) & 0x03 == 0x02  # a locally administered unicast address
    assert (name, friendly, stored["name"]) == ("kitchen-board", "Kitchen Board", "kitchen-board")
    with esphome_device(tmp_path, name="客厅音箱") as (satellite, _mic, _speak):  # renamed: HA keeps the device
        assert asyncio.run(identity(satellite)) == (mac, "kitchen-board", "客厅音箱")
    other = tmp_path / "other"
    other.mkdir()
    (other / "esphome.json").write_text(json.dumps({"mac": "02aabbccddee"}))
    with esphome_device(other, name="客厅音箱") as (satellite, _mic, _speak):  # the stored MAC as it is
        assert asyncio.run(identity(satellite)) == ("02:AA:BB:CC:DD:EE", "rkvoice-ccddee", "客厅音箱")


def test_a_wrong_key_is_refused_on_both_sides(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rkvoice")
    with esphome_device(tmp_path, KEY) as (satellite, _mic, _speak):
        async def scenario() -> None:
            cli = client(satellite, OTHER_KEY)
            with pytest.raises(InvalidEncryptionKeyAPIError) as refused:
                await cli.connect(login=True)
            assert refused.value.received_name == "kitchen-board"  # the ServerHello names the device first

        asyncio.run(scenario())
        assert wait_until(lambda: len(warnings(caplog)) == 1)
    assert "Noise handshake" in warnings(caplog)[0] and "satellite.esphome.key" in warnings(caplog)[0]


def test_a_plain_text_client_is_refused_by_a_keyed_device_with_one_line(tmp_path, caplog):
    with esphome_device(tmp_path, KEY) as (satellite, _mic, _speak):
        async def scenario() -> None:
            with pytest.raises(RequiresEncryptionAPIError):  # HA then asks for the key
                await client(satellite).connect(login=True)

        asyncio.run(scenario())
        assert wait_until(lambda: len(warnings(caplog)) == 1)
    assert "requires encryption" in warnings(caplog)[0]


def test_a_noise_client_to_a_plain_text_device_is_told_so(tmp_path, caplog):
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        async def scenario() -> None:
            with pytest.raises(EncryptionPlaintextAPIError):
                await client(satellite, KEY).connect(login=True)

        asyncio.run(scenario())
        assert wait_until(lambda: len(warnings(caplog)) == 1)
    assert "no key" in warnings(caplog)[0]


def test_a_key_home_assistant_sets_is_stored_and_used_from_the_next_connection(tmp_path):
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        async def scenario() -> None:
            cli = await connected(satellite)
            try:
                assert not await cli.noise_encryption_set_key(b"too short")
                assert await cli.noise_encryption_set_key(KEY.encode())  # HA sends the base64 text
                assert (await cli.device_info()).name == "kitchen-board"  # this connection stays plain
            finally:
                await cli.disconnect()
            with pytest.raises(RequiresEncryptionAPIError):
                await client(satellite).connect(login=True)
            cli = await connected(satellite, KEY)
            try:
                assert await cli.noise_encryption_set_key(b"")  # HA removes it
            finally:
                await cli.disconnect()
            cli = await connected(satellite)
            await cli.disconnect()

        key_file = tmp_path / "esphome_key"
        asyncio.run(scenario())
        assert not key_file.exists()
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        async def set_raw() -> None:
            cli = await connected(satellite)
            try:
                assert await cli.noise_encryption_set_key(base64.b64decode(OTHER_KEY))  # or the 32 bytes
            finally:
                await cli.disconnect()

        asyncio.run(set_raw())
        assert key_file.read_text().strip() == OTHER_KEY
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    with esphome_device(tmp_path) as (satellite, _mic, _speak):  # after a restart too
        async def keyed() -> None:
            cli = await connected(satellite, OTHER_KEY)
            await cli.disconnect()

        asyncio.run(keyed())
    with esphome_device(tmp_path, KEY) as (satellite, _mic, _speak):  # the config's key wins, HA cannot replace it
        async def refused() -> None:
            cli = await connected(satellite, KEY)
            try:
                assert not await cli.noise_encryption_set_key(OTHER_KEY.encode())
            finally:
                await cli.disconnect()

        asyncio.run(refused())


def test_the_mute_switch_pauses_the_satellite_and_is_kept(tmp_path):
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        core = satellite.link.core

        async def scenario() -> None:
            cli = await connected(satellite)
            try:
                states: list[Any] = []
                cli.subscribe_states(lambda s: states.append(s) if s.key == 1 else None)
                unsubscribe = cli.subscribe_voice_assistant(handle_start=_never_start, handle_stop=_stop)
                await until_async(lambda: core.state is SatelliteState.IDLE)
                cli.switch_command(1, True)
                await until_async(lambda: core.state is SatelliteState.MUTED)
                await until_async(lambda: [s.state for s in states] == [False, True])
                unsubscribe()
            finally:
                await cli.disconnect()

        asyncio.run(scenario())
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        async def kept() -> None:
            cli = await connected(satellite)
            try:
                states: list[Any] = []
                cli.subscribe_states(lambda s: states.append(s) if s.key == 1 else None)
                cli.subscribe_voice_assistant(handle_start=_never_start, handle_stop=_stop)
                await until_async(lambda: [s.state for s in states] == [True])
                assert satellite.link.core.state is SatelliteState.MUTED
                cli.switch_command(1, False)
                await until_async(lambda: satellite.link.core.state is SatelliteState.IDLE)
            finally:
                await cli.disconnect()

        asyncio.run(kept())


async def _never_start(*_args: Any) -> int | None:
    raise AssertionError("no request expected")


async def _stop(_abort: bool) -> None:
    return None


def test_the_wake_phrase_is_offered_and_the_chosen_one_kept(tmp_path, caplog):
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        async def scenario() -> None:
            cli = await connected(satellite)
            try:
                config = await cli.get_voice_assistant_configuration(5)
                assert [(w.id, w.wake_word) for w in config.available_wake_words] == [("xiaozhixiaozhi", "小智小智")]
                assert config.active_wake_words == ["xiaozhixiaozhi"] and config.max_active_wake_words == 1
                await cli.set_voice_assistant_configuration(["okay_nabu"])  # not this device's: one line
                config = await cli.get_voice_assistant_configuration(5)
                assert config.active_wake_words == ["xiaozhixiaozhi"]  # the select keeps a state
            finally:
                await cli.disconnect()

        asyncio.run(scenario())
    assert [w for w in warnings(caplog) if "okay_nabu" in w]


# -- bad input on the wire ----------------------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def raw(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


def plain(kind: int, payload: bytes = b"") -> bytes:
    return b"\x00" + varint(len(payload)) + varint(kind) + payload


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    try:
        async with asyncio.timeout(5):
            while await reader.read(4096):
                pass
    except (TimeoutError, ConnectionError):
        return False
    return True


async def pong(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """A ping on a plain connection is answered (the connection goes on)."""
    writer.write(plain(7))
    await writer.drain()
    async with asyncio.timeout(5):
        return await reader.readexactly(3) == plain(8)


def test_bad_input_is_one_line_each_and_nothing_leaks(tmp_path, caplog):
    """Garbage, an unknown message type, a message that does not parse, a frame over the protocol's size
    and a stall mid-frame: one line each; the connections that broke the format are closed, the others
    go on, a good client is served after all of them, and once closed no thread or socket is left."""
    caplog.set_level(logging.WARNING, logger="rkvoice")
    before_threads, before_fds = set(threading.enumerate()), open_fds()
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        satellite.link.server.stall_s = 0.3  # type: ignore[attr-defined]
        port = satellite.link.port

        async def scenario() -> None:
            reader, writer = await raw(port)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # 1: not the ESPHome API
            assert await closed_by_peer(reader)
            writer.close()
            reader, writer = await raw(port)
            writer.write(plain(9999, b"\x01\x02"))  # 2: a type the API does not have
            writer.write(plain(9, b"\xff\xff\xff"))  # 3: a DeviceInfoRequest that does not parse
            assert await pong(reader, writer)  # ... and the connection goes on
            writer.write(b"\x00" + varint(70_000) + varint(1))  # 4: over the protocol's 65535 bytes
            assert await closed_by_peer(reader)
            writer.close()
            reader, writer = await raw(port)
            writer.write(plain(7) + b"\x00\x05\x07\x01")  # 5: a ping, then a frame that stalls after 4 bytes
            async with asyncio.timeout(5):
                assert await reader.readexactly(3) == plain(8)
            assert await closed_by_peer(reader)
            writer.close()
            cli = await connected(satellite)  # a good client after all of them
            try:
                assert (await cli.device_info()).name == "kitchen-board"
            finally:
                await cli.disconnect()

        asyncio.run(scenario())
        assert wait_until(lambda: len(warnings(caplog)) >= 5)
        assert wait_until(lambda: not satellite.link.server.connections)  # type: ignore[attr-defined]
    lines = warnings(caplog)
    assert len(lines) == 5, lines
    assert not [r for r in caplog.records if r.exc_info]
    for line, words in zip(lines, ["0x47", "type 9999", "does not parse", "more than the protocol allows",
                                   "stalled mid-frame"], strict=True):
        assert words in line, (line, words)
    assert wait_until(lambda: set(threading.enumerate()) <= before_threads), set(threading.enumerate()) - before_threads
    assert open_fds() <= before_fds


def test_a_connection_refused_for_its_framing_does_not_stop_the_others(tmp_path):
    """A client keeps its connection while another breaks the format and is closed."""
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        async def scenario() -> None:
            cli = await connected(satellite)
            try:
                reader, writer = await raw(satellite.link.port)
                writer.write(b"\x02garbage")
                assert await closed_by_peer(reader)
                writer.close()
                assert (await cli.device_info()).name == "kitchen-board"
            finally:
                await cli.disconnect()

        asyncio.run(scenario())


def test_the_device_is_announced_with_the_txt_fields_home_assistant_reads(tmp_path, caplog):
    from zeroconf.asyncio import AsyncZeroconf

    caplog.set_level(logging.INFO, logger="rkvoice")
    with esphome_device(tmp_path, KEY, zeroconf=True) as (satellite, _mic, _speak):
        assert wait_until(lambda: "announced _esphomelib" in caplog.text or "could not announce" in caplog.text)
        if "could not announce" in caplog.text:
            pytest.skip("this machine cannot announce over mDNS (no multicast interface)")

        async def browse() -> Any:
            browser = AsyncZeroconf()
            try:
                return await browser.async_get_service_info("_esphomelib._tcp.local.",
                                                            "kitchen-board._esphomelib._tcp.local.", 3000)
            finally:
                await browser.async_close()

        info = asyncio.run(browse())
        stored = json.loads((tmp_path / "esphome.json").read_text())["mac"]
    assert info is not None and info.port == satellite.link.port
    txt = {k.decode(): (v or b"").decode() for k, v in info.properties.items()}
    assert txt["mac"] == stored and txt["friendly_name"] == "Kitchen Board"
    assert txt["api_encryption"] == "Noise_NNpsk0_25519_ChaChaPoly_SHA256"  # HA's flow asks for the key
    assert info.server == "kitchen-board.local."


def test_check_names_the_port_and_warns_without_a_key(tmp_path):
    from rkvoice.esphome.identity import check_notes

    keyless = esphome_config(tmp_path)
    notes = check_notes(keyless)
    assert len(notes) == 2 and "ESPHome" in notes[0] and "satellite.esphome.key" in notes[1]
    keyed = esphome_config(tmp_path, KEY)
    assert len(check_notes(keyed)) == 1
    with esphome_device(tmp_path, KEY) as (satellite, _mic, _speak):  # the running device holds its port
        from dataclasses import replace

        held = replace(keyed, satellite=replace(keyed.satellite, esphome=replace(keyed.satellite.esphome,
                                                                                 port=satellite.link.port)))
        assert "cannot be bound now" in check_notes(held)[0]


def test_a_client_that_says_nothing_is_pinged_then_closed_with_one_line(tmp_path, caplog):
    """Silent from the start: closed after idle_s. Silent after a ping of its own: pinged, then closed.
    Home Assistant's client answers the device's pings and stays."""
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        satellite.link.server.idle_s = 0.3  # type: ignore[attr-defined]

        async def scenario() -> None:
            reader, writer = await raw(satellite.link.port)
            assert await closed_by_peer(reader)
            writer.close()
            reader, writer = await raw(satellite.link.port)
            assert await pong(reader, writer)
            async with asyncio.timeout(5):
                assert await reader.readexactly(3) == plain(7)  # the device's ping
            assert await closed_by_peer(reader)
            writer.close()
            cli = await connected(satellite)
            try:
                await asyncio.sleep(1.0)  # three idle periods: HA's client answers each ping
                assert (await cli.device_info()).name == "kitchen-board"
            finally:
                await cli.disconnect()

        asyncio.run(scenario())
        assert wait_until(lambda: len(warnings(caplog)) == 2)
    lines = warnings(caplog)
    assert "sent nothing for 0.3 s" in lines[0] and "did not answer a ping" in lines[1], lines


def test_another_entity_is_listed_commanded_and_its_changes_reach_every_client(tmp_path):
    """The seam a media player uses: an Entity added to the link is listed, takes its own commands, and
    a change of its own (from another thread) reaches the clients."""
    from aioesphomeapi.api_pb2 import (  # type: ignore[attr-defined]
        ListEntitiesSwitchResponse,
        SwitchCommandRequest,
        SwitchStateResponse,
    )

    class Lamp:
        key = 7

        def __init__(self) -> None:
            self.on = False

        def describe(self) -> Any:
            return ListEntitiesSwitchResponse(object_id="lamp", key=self.key, name="Lamp")

        def state(self) -> Any:
            return SwitchStateResponse(key=self.key, state=self.on)

        def command(self, msg: Any) -> bool:
            if not isinstance(msg, SwitchCommandRequest) or msg.key != self.key:
                return False
            self.on = bool(msg.state)
            return True

    lamp = Lamp()
    with esphome_device(tmp_path) as (satellite, _mic, _speak):
        link = satellite.link
        link.add_entity(lamp)  # type: ignore[attr-defined]
        with pytest.raises(AssertionError):
            link.add_entity(Lamp())  # type: ignore[attr-defined]  # its key is taken

        async def scenario() -> None:
            cli = await connected(satellite)
            try:
                entities, _ = await cli.list_entities_services()
                assert [(e.key, e.object_id) for e in entities] == [(1, "mute"), (2, "media_player"), (7, "lamp")]
                states: list[Any] = []
                cli.subscribe_states(lambda s: states.append((s.key, s.state)) if s.key != 2 else None)
                await until_async(lambda: sorted(states) == [(1, False), (7, False)])
                cli.switch_command(7, True)
                await until_async(lambda: states[-1] == (7, True) and lamp.on)
                lamp.on = False
                await asyncio.to_thread(link.entity_changed, lamp)  # type: ignore[attr-defined]
                await until_async(lambda: states[-1] == (7, False))
            finally:
                await cli.disconnect()

        asyncio.run(scenario())


async def until_async(cond: Any) -> None:
    assert await asyncio.to_thread(wait_until, cond)
