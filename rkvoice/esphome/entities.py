"""The entities the ESPHome device lists to Home Assistant, and its wake words.

An ``Entity`` describes itself (ListEntities), says its state (after SubscribeStates, and whenever it
changes) and takes its own commands. Home Assistant adds no entity a device does not list, except the
assist_satellite ones it makes from the feature flags (pipeline and wake-word selects...). The device
lists a mute switch; a media player (another module) joins the same list by implementing ``Entity``.

Wake words go through VoiceAssistantConfiguration, not an entity: the configured phrase is offered,
the active one(s) chosen in Home Assistant are kept (rkvoice.esphome.identity.DeviceState). The select
HA makes always gets a state (an empty active list is refused: HA's pipeline-start loop can spin on a
select without one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from aioesphomeapi.api_pb2 import (  # type: ignore[attr-defined]
    ListEntitiesSwitchResponse,
    SwitchCommandRequest,
    SwitchStateResponse,
    VoiceAssistantConfigurationResponse,
    VoiceAssistantWakeWord,
)
from google.protobuf.message import Message

from .identity import DeviceState

log = logging.getLogger(__name__)

ENTITY_CATEGORY_CONFIG = 1


class Entity(Protocol):
    """One entity of the device."""

    key: int
    """Unique on the device (Home Assistant keys states and commands by it)."""

    def describe(self) -> Message:
        """Its ListEntities…Response."""

    def state(self) -> Message | None:
        """Its current state message (None: it has none to say)."""

    def command(self, msg: Message) -> bool:
        """Act on ``msg`` if it is this entity's command (True), else False."""


class MuteSwitch:
    """The microphone's mute: on, a wake is dropped and no request streams (the core is paused)."""

    def __init__(self, key: int, get: Callable[[], bool], set_muted: Callable[[bool], None]) -> None:
        self.key = key
        self._get = get
        self._set = set_muted

    def describe(self) -> Message:
        return ListEntitiesSwitchResponse(object_id="mute", key=self.key, name="Mute", icon="mdi:microphone-off",
                                          entity_category=ENTITY_CATEGORY_CONFIG)

    def state(self) -> Message:
        return SwitchStateResponse(key=self.key, state=self._get())

    def command(self, msg: Message) -> bool:
        if not isinstance(msg, SwitchCommandRequest) or msg.key != self.key:
            return False
        self._set(bool(msg.state))
        return True


class WakeWords:
    """The wake phrases offered to Home Assistant (id -> phrase) and the active ones (kept in ``state``)."""

    def __init__(self, phrases: dict[str, str], state: DeviceState, language: str = "zh") -> None:
        assert phrases, "at least one wake phrase"
        self.phrases = phrases
        self.state = state
        self.language = language
        if not [w for w in state.active_wake_words if w in phrases]:
            state.active_wake_words = [next(iter(phrases))]

    @property
    def active(self) -> list[str]:
        return [w for w in self.state.active_wake_words if w in self.phrases]

    @property
    def phrase(self) -> str:
        """The active phrase (the wake_word_phrase of a request)."""
        return self.phrases[self.active[0]]

    def configuration(self) -> Message:
        return VoiceAssistantConfigurationResponse(
            available_wake_words=[VoiceAssistantWakeWord(id=i, wake_word=p, trained_languages=[self.language])
                                  for i, p in self.phrases.items()],
            active_wake_words=self.active, max_active_wake_words=1)

    def set_active(self, ids: Sequence[str]) -> None:
        """VoiceAssistantSetConfiguration: the ids this device knows become active (kept)."""
        known = [i for i in ids if i in self.phrases][:1]
        unknown = [i for i in ids if i not in self.phrases]
        if unknown:
            log.warning("esphome: Home Assistant chose wake word(s) %s this device does not have; it offers %s",
                        ", ".join(unknown), ", ".join(self.phrases))
        if not known:
            log.info("esphome: Home Assistant chose no wake word; the board keeps listening for %r", self.phrase)
            return
        if known != self.active:
            self.state.active_wake_words = known
            self.state.save()
            log.info("esphome: Home Assistant chose the wake word %r", self.phrase)
