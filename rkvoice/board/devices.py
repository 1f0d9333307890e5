"""Is there a sound output device, a microphone, an NPU? Asked without opening any."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from rkvoice.board import versions

log = logging.getLogger(__name__)

ASOUND = Path("/proc/asound")


def has_sound_device() -> str | None:
    """Name of a usable output backend ("aplay" or "sounddevice"), or None."""
    cards = ASOUND / "cards"
    if shutil.which("aplay") and cards.exists():
        text = cards.read_text(errors="replace")
        if text.strip() and "no soundcards" not in text:
            return "aplay"
    return "sounddevice" if _portaudio_lists("max_output_channels") else None


def has_input_device() -> bool:
    """True when ALSA lists a capture PCM or PortAudio an input device."""
    pcm = ASOUND / "pcm"
    return (pcm.exists() and "capture" in pcm.read_text(errors="replace")) or _portaudio_lists("max_input_channels")


def has_npu() -> bool:
    """The RKNPU driver's device node or version file, or the NPU runtime library."""
    nodes = (Path("/dev/rknpu"), *versions.NPU_DRIVER_PATHS, *versions.LIBRKNNRT_PATHS)
    return any(p.exists() for p in nodes)


def _portaudio_lists(channels: str) -> bool:
    """Whether PortAudio lists a device with ``channels`` > 0; no PortAudio or no devices: False."""
    try:
        import sounddevice as sd

        return any(d.get(channels, 0) > 0 for d in sd.query_devices())
    except Exception:  # no PortAudio, no devices: both mean "no sound device"
        log.debug("sounddevice lists no device with %s", channels, exc_info=True)
        return False
