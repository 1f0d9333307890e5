"""The ESPHome native API's two frame formats, as the device (the server) speaks them.

- Plain text: ``0x00`` + varint(len(payload)) + varint(type) + protobuf payload.
- Noise (``Noise_NNpsk0_25519_ChaChaPoly_SHA256``, the device is the responder): every frame is ``0x01`` +
  u16be(len) + body. The client opens with an empty hello frame and a frame holding ``0x00`` + its
  handshake message; the device answers a ServerHello (``0x01`` + name + ``\\0`` + MAC + ``\\0``: the
  client reads both before it knows the key), then ``0x00`` + its handshake message. After that each
  body is the encrypted u16be(type) + u16be(len) + payload.

One port takes both by the client's first byte (``open_frames``): without a key a Noise client is told
``00 "Bad indicator byte"`` (aioesphomeapi: "the device is using plaintext"), with one a plain-text
client is told ``01 00 13 01 "Bad indicator byte"`` (aioesphomeapi: "connection requires encryption",
Home Assistant then asks for the key). A handshake with the wrong key is answered ``01`` + "Handshake
MAC failure" (the client raises InvalidEncryptionKey). Every such refusal, and any frame that breaks
the format, is a ``FrameError``: the connection writes its answer, logs one line and closes.

A frame's rest must arrive within ``stall_s`` of its first byte (a client stalled mid-frame is closed).
A client silent for ``idle_s`` between frames is ``Idle`` (the connection pings it, as ESPHome devices
do, and closes it when it stays silent; Home Assistant pings a quiet link itself every 20 s).
"""

from __future__ import annotations

import asyncio
import struct

from noise.connection import NoiseConnection

PLAIN, NOISE = 0x00, 0x01
"""The first byte of every frame of each format."""
MAX_PAYLOAD = 0xFFFF
"""The largest message either format carries (a Noise frame's u16 length; ESPHome holds plain-text frames
to the same size)."""
NOISE_NAME = b"Noise_NNpsk0_25519_ChaChaPoly_SHA256"
NOISE_TAG = 16
BAD_INDICATOR = b"Bad indicator byte"
MAC_FAILURE = b"Handshake MAC failure"
STALL_S = 10.0
IDLE_S = 120.0


class FrameError(Exception):
    """The peer broke the format or was refused: ``answer`` (bytes, may be empty) is written, then the
    connection closes after one log line (the exception's text)."""

    def __init__(self, message: str, answer: bytes = b"") -> None:
        super().__init__(message)
        self.answer = answer


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def noise_frame(body: bytes) -> bytes:
    return bytes((NOISE,)) + struct.pack(">H", len(body)) + body


def plain_refusal() -> bytes:
    """What a device without a key tells a Noise client (raw, as ESPHome's plain-text helper does)."""
    return bytes((PLAIN,)) + BAD_INDICATOR


def noise_refusal(reason: bytes) -> bytes:
    """What a device with a key tells a client it refuses (a plain-text one, or a failed handshake)."""
    return noise_frame(b"\x01" + reason)


async def _exactly(reader: asyncio.StreamReader, n: int, stall_s: float, what: str) -> bytes:
    """``n`` bytes of a frame already begun; a peer that stalls or leaves mid-frame is a FrameError."""
    try:
        async with asyncio.timeout(stall_s):
            return await reader.readexactly(n)
    except TimeoutError:
        raise FrameError(f"stalled mid-frame ({what}: no byte for {stall_s:.0f} s)") from None
    except asyncio.IncompleteReadError as exc:
        raise FrameError(f"left mid-frame ({what}: {len(exc.partial)} of {n} bytes)") from None


class Idle(FrameError):
    """Nothing came for ``idle_s`` between frames (no byte of a frame was read)."""


async def _first_byte(reader: asyncio.StreamReader, idle_s: float) -> int | None:
    """A frame's first byte, or None when the peer closed; a peer silent for ``idle_s`` is ``Idle``."""
    try:
        async with asyncio.timeout(idle_s):
            head = await reader.read(1)
    except TimeoutError:
        raise Idle(f"sent nothing for {idle_s:g} s") from None
    return head[0] if head else None


class PlainFrames:
    """Plain-text frames on one connection."""

    encrypted = False

    def __init__(self, reader: asyncio.StreamReader, stall_s: float = STALL_S, idle_s: float = IDLE_S) -> None:
        self.reader = reader
        self.stall_s = stall_s
        self.idle_s = idle_s

    async def _varint(self, what: str, limit: int) -> int:
        value, shift = 0, 0
        while True:
            byte = (await _exactly(self.reader, 1, self.stall_s, what))[0]
            value |= (byte & 0x7F) << shift
            if value > limit:
                raise FrameError(f"a frame whose {what} is over {limit} (more than the protocol allows)")
            if not byte & 0x80:
                return value
            shift += 7

    async def read(self, first: int | None = None) -> tuple[int, bytes] | None:
        """The next message (type, payload); None when the peer closed between frames. ``first``: the
        frame's first byte, already read."""
        if first is None and (first := await _first_byte(self.reader, self.idle_s)) is None:
            return None
        if first != PLAIN:
            answer = noise_refusal(BAD_INDICATOR) if first == NOISE else b""
            raise FrameError(f"sent a frame starting 0x{first:02x} on a plain-text connection", answer)
        length = await self._varint("length", MAX_PAYLOAD)
        kind = await self._varint("message type", 0xFFFF)
        payload = await _exactly(self.reader, length, self.stall_s, "payload") if length else b""
        return kind, payload

    def pack(self, kind: int, payload: bytes) -> bytes:
        return bytes((PLAIN,)) + varint(len(payload)) + varint(kind) + payload


class NoiseFrames:
    """Noise frames on one connection: ``handshake`` first, then ``read``/``pack``."""

    encrypted = True

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, psk: bytes, name: str,
                 mac: str, stall_s: float = STALL_S, idle_s: float = IDLE_S) -> None:
        self.reader = reader
        self.writer = writer
        self.psk = psk
        self.name = name
        self.mac = mac
        self.stall_s = stall_s
        self.idle_s = idle_s
        self._noise: NoiseConnection | None = None

    async def _frame(self, first: int | None = None) -> bytes | None:
        if first is None and (first := await _first_byte(self.reader, self.idle_s)) is None:
            return None
        if first != NOISE:
            raise FrameError(f"sent a frame starting 0x{first:02x} inside a Noise connection",
                             noise_refusal(BAD_INDICATOR))
        (length,) = struct.unpack(">H", await _exactly(self.reader, 2, self.stall_s, "length"))
        return await _exactly(self.reader, length, self.stall_s, "body") if length else b""

    async def handshake(self, first: int) -> None:
        """The client's hello (its first byte already read) and handshake; raises FrameError (with the
        answer the client understands) when it fails."""
        hello = await self._frame(first)
        if hello is None:
            raise FrameError("left before its Noise hello")
        self.writer.write(noise_frame(b"\x01" + self.name.encode() + b"\0" + self.mac.encode() + b"\0"))
        message = await self._frame()
        if message is None:
            raise FrameError("left before its Noise handshake")
        if not message or message[0] != 0:
            raise FrameError("sent a Noise handshake frame that does not start with 0x00",
                             noise_refusal(b"Bad handshake packet"))
        noise = NoiseConnection.from_name(NOISE_NAME)
        noise.set_as_responder()
        noise.set_psks(self.psk)
        noise.set_prologue(b"NoiseAPIInit" + struct.pack(">H", len(hello)) + hello)
        noise.start_handshake()
        try:
            noise.read_message(message[1:])
        except Exception:  # noqa: BLE001 -- the peer's key or bytes, never ours: InvalidTag, NoiseInvalidMessage...
            raise FrameError("failed the Noise handshake (the client's encryption key is not this device's "
                             "satellite.esphome.key)", noise_refusal(MAC_FAILURE)) from None
        self.writer.write(noise_frame(b"\x00" + noise.write_message()))
        self._noise = noise

    async def read(self, first: int | None = None) -> tuple[int, bytes] | None:
        assert self._noise is not None, "handshake first"
        body = await self._frame(first)
        if body is None:
            return None
        try:
            plain = self._noise.decrypt(body)
        except Exception:  # noqa: BLE001 -- a corrupt or forged frame
            raise FrameError("sent a Noise frame that does not decrypt") from None
        if len(plain) < 4:
            raise FrameError(f"sent a decrypted message of {len(plain)} bytes (shorter than its header)")
        kind, length = struct.unpack(">HH", plain[:4])
        if length != len(plain) - 4:
            raise FrameError(f"sent a message that says {length} bytes and holds {len(plain) - 4}")
        return kind, plain[4:]

    def pack(self, kind: int, payload: bytes) -> bytes:
        assert self._noise is not None, "handshake first"
        if len(payload) + 4 + NOISE_TAG > MAX_PAYLOAD:
            raise ValueError(f"a message of {len(payload)} bytes does not fit one Noise frame")
        return noise_frame(self._noise.encrypt(struct.pack(">HH", kind, len(payload)) + payload))


Frames = PlainFrames | NoiseFrames


async def open_frames(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, psk: bytes | None, name: str,
                      mac: str, stall_s: float = STALL_S, idle_s: float = IDLE_S) -> tuple[Frames, int | None] | None:
    """The connection's format, by its first byte: (frames, the first byte for the first ``read``; None after
    a handshake), or None when the peer closed before a byte. Without ``psk`` only plain text, with one only
    Noise (FrameError otherwise)."""
    if (first := await _first_byte(reader, idle_s)) is None:
        return None
    if psk is None:
        if first == NOISE:
            raise FrameError("opened a Noise (encrypted) connection, but this device has no key (set "
                             "satellite.esphome.key, or remove the key in Home Assistant)", plain_refusal())
        return PlainFrames(reader, stall_s, idle_s), first
    if first != NOISE:
        raise FrameError(f"sent a frame starting 0x{first:02x} to a device that requires encryption (a plain-text "
                         "client: give it satellite.esphome.key; or not the ESPHome API)", noise_refusal(BAD_INDICATOR))
    frames = NoiseFrames(reader, writer, psk, name, mac, stall_s, idle_s)
    await frames.handshake(first)
    return frames, None
