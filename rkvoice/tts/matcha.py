"""Registry target of the ``matcha`` TTS engine (Matcha + Vocos; RKNN on the board's NPU).

The implementation is ``rkvoice.tts.matcha_engine.MatchaTts`` (owned by the board work): its
``load()`` names every missing model file and the fix (``./install.sh --profile board`` on the
board). ``missing()`` below answers the same question without loading anything, including the
runtime: the .rknn files need rknn-toolkit-lite2 (``rknnlite``), which only exists for aarch64.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rkvoice.config import Config
from rkvoice.tts.matcha_engine import MatchaTts

__all__ = ["MatchaTts", "missing"]


def missing(cfg: Config) -> list[str]:
    """What the matcha engine lacks on this machine (files, runtime); [] when it can load."""
    mc = cfg.tts.matcha
    base = Path(mc.dir) if Path(mc.dir).is_absolute() else cfg.models.path / mc.dir
    out = [
        f"{what} {base / rel}"
        for what, rel in (("acoustic model", mc.acoustic), ("vocoder", mc.vocoder),
                          ("lexicon", mc.lexicon), ("tokens", mc.tokens))
        if not (base / rel).is_file()
    ]
    runtime = "rknnlite" if mc.acoustic.endswith(".rknn") else "onnxruntime"
    if importlib.util.find_spec(runtime) is None:
        out.append(f"runtime {runtime} (rknn-toolkit-lite2 on the board)" if runtime == "rknnlite"
                   else "runtime onnxruntime")
    return out
