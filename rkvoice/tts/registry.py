"""The TTS backend registry and ``create_tts``: pick an engine by name or, for "auto", by the
installed model files and the language of the text.

    engine = create_tts(cfg, "auto", text="今天天气不错")   # constructed, not loaded
    engine.load()
"""

from __future__ import annotations

import logging
import re
from typing import Any

from rkvoice.config import Config
from rkvoice.errors import RkvoiceError
from rkvoice.registry import Registry
from rkvoice.tts.base import TtsEngine

log = logging.getLogger(__name__)

TTS = Registry("tts")
TTS.register(
    "fastspeech2",
    "rkvoice.tts.fastspeech2:FastSpeech2Tts",
    "FastSpeech2 + MB-MelGAN via onnxruntime; portable Chinese voice (Baker, 24 kHz)",
    install_hint="run ./install.sh (needs onnxruntime and pypinyin)",
)
TTS.register(
    "vits",
    "rkvoice.tts.vits:VitsTts",
    "sherpa-onnx VITS: English Piper voice (portable) or aishell3 Chinese voices (board)",
    install_hint="run ./install.sh (needs sherpa-onnx, and piper-tts for the Piper voice)",
)
TTS.register(
    "matcha",
    "rkvoice.tts.matcha:MatchaTts",
    "Matcha + Vocos on the NPU (board; RKNN), Chinese and English, 16 kHz",
    install_hint="run ./install.sh --profile board on the board (needs rknn-toolkit-lite2)",
)

AUTO = "auto"
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")

# Engines in order of preference per language; "vits" stands for its voice speaking that language.
PREFERENCE = {"zh": ("matcha", "fastspeech2", "vits"), "en": ("vits", "matcha", "fastspeech2")}


def text_language(text: str) -> str:
    """"zh" if the text has any Han character, "en" if it has Latin letters only, else "zh"."""
    if _HAN.search(text):
        return "zh"
    if _LATIN.search(text):
        return "en"
    return "zh"


def _matcha_installed(cfg: Config) -> bool:
    try:
        from rkvoice.tts.matcha import missing
    except ImportError:  # its module's own dependencies are absent
        return False
    return not missing(cfg)


def engine_languages(cfg: Config) -> dict[str, tuple[str, ...]]:
    """Installed engines (model files present, runtime importable) -> languages they speak."""
    from rkvoice.tts import fastspeech2, vits

    out: dict[str, tuple[str, ...]] = {}
    if _matcha_installed(cfg):
        out["matcha"] = ("zh", "en")
    if fastspeech2.installed(cfg):
        out["fastspeech2"] = ("zh",)
    langs = tuple(sorted({lang for v in vits.VOICES.values() if v.installed(cfg) for lang in v.languages}))
    if langs:
        out["vits"] = langs
    return out


def installed_engines(cfg: Config) -> list[str]:
    """Names of the engines whose model files (and runtime) are installed."""
    return sorted(engine_languages(cfg))


def choose_engine(cfg: Config, text: str = "") -> tuple[str, dict[str, Any]]:
    """The "auto" choice for text: (engine name, extra constructor kwargs)."""
    lang = text_language(text)
    available = engine_languages(cfg)
    for name in PREFERENCE[lang]:
        if lang in available.get(name, ()):
            return name, _kwargs(cfg, name, lang)
    if not available:
        raise RkvoiceError(
            "tts", "no-voice", "no TTS voice is installed: run ./install.sh to install the voices"
        )
    # Nothing speaks this language: fall back to the best installed engine and say so.
    name = next(n for n in PREFERENCE[lang] if n in available)
    log.warning(
        "no installed voice speaks %s; using %s (speaks %s), which may drop or misread the text",
        lang, name, "/".join(available[name]),
    )
    return name, _kwargs(cfg, name, lang)


def _kwargs(cfg: Config, name: str, lang: str) -> dict[str, Any]:
    if name != "vits":
        return {}
    from rkvoice.tts.vits import resolve_voice

    voice = resolve_voice(cfg, None, lang)
    if lang not in voice.languages:
        log.warning("vits voice %s speaks %s, not %s: the text may be misread",
                    voice.name, "/".join(voice.languages), lang)
    return {"voice": voice.name}


def create_tts(cfg: Config, name: str | None = None, text: str = "") -> TtsEngine:
    """A constructed (not loaded) engine: ``name``, else ``cfg.tts.engine``; "auto" picks the best
    installed engine for the language of ``text``. Unknown names raise RkvoiceError listing choices."""
    name = name or cfg.tts.engine
    if name == AUTO:
        name, kwargs = choose_engine(cfg, text)
        log.info("tts auto: %s %s for %s text", name, kwargs or "", text_language(text))
    else:
        if name not in TTS.names():
            raise RkvoiceError(
                "tts", "unknown-backend",
                f"unknown tts engine {name!r}; choose one of: {AUTO}, {', '.join(TTS.names())}",
            )
        kwargs = _kwargs(cfg, name, text_language(text)) if name == "vits" and text else {}
    return TTS.create(name, cfg, **kwargs)
