"""The error type: typed stages and branch codes, with the same text in logs and JSON as plain strings."""

from __future__ import annotations

import json

import pytest

from rkvoice.errors import Code, RkvoiceError, Stage, is_device_error


def test_the_stage_is_an_enum_and_prints_as_before() -> None:
    err = RkvoiceError(Stage.TTS, "missing-model", "model.onnx is missing")
    assert err.stage is Stage.TTS and str(err) == "tts: model.onnx is missing"
    assert json.dumps({"stage": err.stage, "code": err.code}) == '{"stage": "tts", "code": "missing-model"}'


def test_a_plain_stage_string_is_checked() -> None:
    assert RkvoiceError("asr", "x", "m").stage is Stage.ASR  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RkvoiceError("speach", "x", "m")  # type: ignore[arg-type]


def test_only_the_microphones_device_codes_are_device_errors() -> None:
    assert is_device_error(RkvoiceError(Stage.AUDIO, Code.DEVICE_LOST, "unplugged"))
    assert is_device_error(RkvoiceError(Stage.AUDIO, Code.DEVICE_MISSING, "no microphone"))
    assert not is_device_error(RkvoiceError(Stage.PLAYER, "device", "cannot open the sound device"))
    assert not is_device_error(RkvoiceError(Stage.AUDIO, "bad-rate", "48 kHz"))
    assert not is_device_error(OSError("device-lost"))
