"""The audio between a wake phrase and its detection, handed to the transcription that follows it.

Home Assistant (and every satellite that lets it detect the wake word) streams audio to the wake
service until the detection comes back, then streams what follows to speech-to-text; the audio it
sent the wake service meanwhile does not reach STT. asr-match decides only after a Whisper decode
(about 1 s on two free cores, 2.5-6 s on a busy one), so a request said promptly after the phrase
lost its start. This server hears both streams: a detect stream keeps its audio from the phrase's
end, and a transcription the same host starts within ``HANDOFF_S`` of that detection is
transcribed with it in front (less any part the client sends again itself: a client with an audio
buffer of its own).

The protocol does not say which transcription follows which detection: the host and the time are
the link. One Home Assistant serving two satellites is one host, so another satellite's request
that starts within ``HANDOFF_S`` of this one's detection would get this audio in front.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HANDOFF_S = 1.0
"""A transcription that starts this long after a detection on the same host is not its request."""
KEEP_S = 10.0
"""At most this much audio after the phrase's end is kept (a detection later than this is not waited for)."""


@dataclass
class Heard:
    """A detect stream's raw audio, and where the detected phrase ended in it (a byte offset)."""

    fmt: tuple[int, int, int]
    """(rate, width, channels) of the bytes."""
    detected_at: float = -1.0
    """Clock time of the last detection (-1: none yet)."""
    phrase_end: int = 0
    audio: bytearray = field(default_factory=bytearray)
    start: int = 0
    """Byte offset in the stream of ``audio[0]`` (older audio is let go)."""

    def add(self, data: bytes) -> None:
        """The stream's next bytes: before a detection the last KEEP_S seconds are kept, after it up
        to KEEP_S seconds after the phrase's end."""
        rate, width, channels = self.fmt
        keep = int(KEEP_S * rate) * width * channels
        if self.detected_at >= 0:
            self.audio += data[: max(0, self.phrase_end + keep - self.start - len(self.audio))]
            return
        self.audio += data
        if len(self.audio) > keep:
            cut = len(self.audio) - keep
            del self.audio[:cut]
            self.start += cut

    def detected(self, end_s: float, now: float) -> None:
        rate, width, channels = self.fmt
        self.phrase_end = max(self.start, int(round(end_s * rate)) * width * channels)
        self.detected_at = now

    @property
    def taped(self) -> int:
        """Bytes of the stream taped so far."""
        return self.start + len(self.audio)

    def take(self, started_at: float, fmt: tuple[int, int, int], first: bytes) -> bytes:
        """The audio to put before a transcription from the same host that started at ``started_at`` in
        format ``fmt`` whose first chunk is ``first``: what was heard after the phrase, up to where the
        transcription's audio begins when this stream had that audio too (the client resends a buffer of
        its own: ``first`` found once in it), else all of it; b"" when the transcription is not the
        detection's (another format, or too late)."""
        if self.fmt != fmt or not 0.0 <= started_at - self.detected_at <= HANDOFF_S:
            return b""
        audio, end = bytes(self.audio), self.phrase_end - self.start  # the phrase's end in the kept audio
        frame = fmt[1] * fmt[2]
        at = audio.find(first) if first else -1
        if at < 0 or at % frame or audio.find(first, at + 1) >= 0:  # not there, or not there once (silence)
            at = len(audio)
        return audio[end:max(end, at)]
