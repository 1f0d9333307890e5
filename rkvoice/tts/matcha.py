"""Registry target of the ``matcha`` TTS engine (Matcha + Vocos; RKNN on the board's NPU).

The implementation is ``rkvoice.tts.matcha_engine.MatchaTts``: its
``load()`` names every missing model file and the fix (``./install.sh --profile board`` on the
board). The registry's ``matcha_needs`` (rkvoice.tts.registry) answers the same question without
loading anything, including the runtime: the .rknn files need rknn-toolkit-lite2 (``rknnlite``),
which only exists for aarch64.
"""

from __future__ import annotations

from rkvoice.tts.matcha_engine import MatchaTts

__all__ = ["MatchaTts"]

