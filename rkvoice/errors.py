"""One error type for the whole pipeline: a stage, a short code and a message a user can act on."""

from __future__ import annotations

import enum


class Stage(enum.StrEnum):
    """Where an error arose; the first word of the one line the CLI prints (``tts: ...``)."""

    INPUT = "input"  # the command line: the CLI exits with its usage status
    CONFIG = "config"
    STATE = "state"
    AUDIO = "audio"  # the microphone
    HEAR = "hear"
    VAD = "vad"
    WAKE = "wake"
    ASR = "asr"
    ANSWER = "answer"
    LLM = "llm"
    NPU = "npu"
    TEXT = "text"
    TTS = "tts"
    SPEAK = "speak"
    PLAYER = "player"
    METRICS = "metrics"
    DAEMON = "daemon"
    WYOMING = "wyoming"
    MODELS = "models"  # the model installer
    INSTALL = "install"


class Code(enum.StrEnum):
    """The codes some caller branches on; every other code is a free string that only reaches logs and users."""

    DEVICE_MISSING = "device-missing"  # no microphone: retried with backoff
    DEVICE_LOST = "device-lost"  # the microphone went away: retried with backoff
    NO_VOICE = "no-voice"
    ALREADY_RUNNING = "already-running"
    AUDIO_TOO_LONG = "audio-too-long"
    # the installer's table: each names its own fix
    DOWNLOAD_FAILED = "download-failed"
    BAD_SHA256 = "bad-sha256"
    BAD_SIZE = "bad-size"
    NO_SHA256 = "no-sha256"
    NO_SIDECAR = "no-sidecar"
    NO_TOOLKIT_VERSION = "no-toolkit-version"
    TOOLKIT_UNREADABLE = "toolkit-unreadable"
    TOOLKIT_MISMATCH = "toolkit-mismatch"
    TOOLKIT_INSTALL_FAILED = "toolkit-install-failed"
    CONVERT_FAILED = "convert-failed"
    BAD_DROP_IN = "bad-drop-in"
    STEP_FAILED = "step-failed"
    VERIFY_FAILED = "verify-failed"


class RkvoiceError(Exception):
    """An error with a stage, a machine-readable code and a human message naming the problem and, where
    there is one, the fix. The CLI prints ``str(err)`` as one line, no traceback, and exits non-zero."""

    def __init__(self, stage: Stage, code: str, message: str) -> None:
        super().__init__(message)
        self.stage = Stage(stage)  # a plain string with a known value is accepted (and checked) too
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.stage}: {self.message}"


def is_device_error(exc: BaseException) -> bool:
    """A missing or unplugged microphone: retried with backoff, not a failed turn."""
    return isinstance(exc, RkvoiceError) and exc.stage == Stage.AUDIO and exc.code in (Code.DEVICE_MISSING,
                                                                                        Code.DEVICE_LOST)
