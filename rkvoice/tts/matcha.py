"""Registry target of the ``matcha`` TTS engine (Matcha + Vocos; RKNN on the board's NPU).

The implementation is ``rkvoice.tts.matcha_engine.MatchaTts``: its
``load()`` names every missing model file and the fix (``./install.sh --profile board`` on the
board). ``missing()`` below answers the same question without loading anything, including the
runtime: the .rknn files need rknn-toolkit-lite2 (``rknnlite``), which only exists for aarch64.
"""

from __future__ import annotations

import importlib.util

from rkvoice.config import Config
from rkvoice.tts.matcha_engine import MatchaTts

__all__ = ["MatchaTts", "missing"]


def missing(cfg: Config) -> list[str]:
    """What the matcha engine lacks on this machine (files, runtime); [] when it can load."""
    files = MatchaTts(cfg).files()  # the buckets found (or the one expected) + lexicon + tokens
    out = [f"{what} {p}" for what, p in files.items() if not p.is_file()]
    runtime = "rknnlite" if any(p.suffix == ".rknn" for p in files.values()) else "onnxruntime"
    if importlib.util.find_spec(runtime) is None:
        out.append(f"runtime {runtime} (rknn-toolkit-lite2 on the board)" if runtime == "rknnlite"
                   else "runtime onnxruntime")
    return out
