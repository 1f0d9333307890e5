"""Loopback helpers for tests and benches: a free TCP port, and the steps a Wyoming client repeats
(16-bit PCM, an audio stream, reading until an event)."""

from __future__ import annotations

import socket

import numpy as np
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event

RATE = 16000
CHUNK_S = 0.1


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pcm16(audio: np.ndarray, pad_s: float = 0.25, tail_s: float | None = None) -> bytes:
    """Float samples -> little-endian 16-bit PCM with ``pad_s`` of silence before and ``tail_s``
    (default ``pad_s``) after."""
    head = np.zeros(int(pad_s * RATE), np.float32)
    tail = np.zeros(int((pad_s if tail_s is None else tail_s) * RATE), np.float32)
    return (np.clip(np.concatenate([head, audio, tail]), -1, 1) * 32767).astype("<i2").tobytes()


async def send_pcm(c: AsyncTcpClient, pcm: bytes, stop: bool = True) -> None:
    """audio-start, ``pcm`` in 0.1 s chunks, and audio-stop unless ``stop`` is False."""
    await c.write_event(AudioStart(rate=RATE, width=2, channels=1).event())
    step = int(RATE * CHUNK_S) * 2
    for i in range(0, len(pcm), step):
        await c.write_event(AudioChunk(rate=RATE, width=2, channels=1, audio=pcm[i:i + step]).event())
    if stop:
        await c.write_event(AudioStop().event())


async def read_until(c: AsyncTcpClient, kind: str) -> Event:
    """The next event of type ``kind``; RuntimeError on an ``error`` event or a closed connection."""
    while True:
        event = await c.read_event()
        if event is None:
            raise RuntimeError(f"connection closed before {kind}")
        if event.type == "error":
            raise RuntimeError(f"error {event.data.get('code')}: {event.data.get('text')}")
        if event.type == kind:
            return event
