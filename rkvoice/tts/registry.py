"""The TTS backend registry and ``create_tts``: each engine with what it needs and what ``--check``
reads of it, its voices, and the one place "auto" is resolved (by the installed voices and the
language of the text).

    engine = create_tts(cfg, "auto", text="今天天气不错")   # constructed, not loaded
    engine.load()
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkvoice.board.runtimes import Findings, display_path
from rkvoice.config import Config
from rkvoice.errors import Code, RkvoiceError, Stage
from rkvoice.needs import FileNeed, Needs, PackageNeed, Probe, RuntimeNeed, installed
from rkvoice.registry import Registry
from rkvoice.text.script_spans import HAN
from rkvoice.tts.base import TtsEngine

log = logging.getLogger(__name__)

RKNNLITE = PackageNeed("rknnlite", "rknn-toolkit-lite2")
ONNXRUNTIME = PackageNeed("onnxruntime", "onnxruntime")


def npu_needs(models: tuple[Any, ...]) -> Needs:
    """An .rknn model: rknn-toolkit-lite2, the NPU, and a librknnrt of the toolkit version that built it."""
    return Needs(packages=(RKNNLITE,), devices=("npu",), runtimes=(RuntimeNeed("librknnrt", models),))


def fastspeech2_needs(cfg: Config, **_: Any) -> Needs:
    from rkvoice.tts.fastspeech2 import files

    found = files(cfg)
    needs = Needs(files=tuple(FileNeed(role, (p,)) for role, p in found.items()),
                  packages=(ONNXRUNTIME, PackageNeed("pypinyin", "pypinyin")), profile=cfg.models.profile)
    if found["vocoder"].suffix == ".rknn":  # config.board.yaml: the vocoder on the NPU
        needs += npu_needs((found["vocoder"],))
    return needs


def fastspeech2_check(cfg: Config, _found: list[Path], out: Findings) -> None:
    """A configured vocoder (config.board.yaml): its windows, the .rknn core mask, a known suffix."""
    from rkvoice.npu.runtime import CORE_MASKS
    from rkvoice.tts.fastspeech2 import vocoder_path

    fs = cfg.tts.fastspeech2
    if not fs.vocoder.strip():
        return
    vocoder = vocoder_path(cfg)
    out.notes.append(f"vocoder {display_path(vocoder, cfg.models.path.parent)} in {fs.vocoder_frames}-frame "
                     f"windows, context {fs.vocoder_context}")
    if vocoder.suffix == ".rknn" and fs.core_mask.strip().lower() not in CORE_MASKS:
        out.problems.append(f"tts.fastspeech2.core_mask {fs.core_mask!r} is not one of: {', '.join(CORE_MASKS)}")
    elif vocoder.suffix not in (".rknn", ".onnx"):
        out.problems.append(f"tts.fastspeech2.vocoder {fs.vocoder!r} must end in .rknn (NPU) or .onnx (CPU)")


def vits_needs(cfg: Config, voice: str | None = None, **_: Any) -> Needs:
    from rkvoice.tts.vits import resolve_voice

    v = resolve_voice(cfg, voice)
    packages = [PackageNeed("sherpa_onnx", "sherpa-onnx")]
    if v.external_phonemes:  # Piper voices: espeak-ng phonemes from piper-tts
        packages.append(PackageNeed("piper", "piper-tts"))
    return Needs(files=v.files(cfg), packages=tuple(packages), profile=v.profile)


def matcha_needs(cfg: Config, **_: Any) -> Needs:
    from rkvoice.tts.matcha_engine import MatchaTts

    found = MatchaTts(cfg).files()  # the buckets found (or the one expected) + sidecars, lexicon, tokens
    needs = Needs(files=tuple(FileNeed(role, (p,)) for role, p in found.items()), profile="board")
    rknn = tuple(p for p in found.values() if p.suffix in (".rknn", ".json"))
    if any(p.suffix == ".rknn" for p in rknn):
        return needs + npu_needs(rknn)
    return needs + Needs(packages=(ONNXRUNTIME,))


def matcha_check(cfg: Config, found: list[Path], out: Findings) -> None:
    """The model buckets found, and whether espeak-ng is there for English words."""
    from rkvoice.board.espeak import espeak_lack

    buckets = sorted(p.stem for p in found if p.suffix in (".rknn", ".onnx") and p.stem.startswith(("matcha", "vocos")))
    if buckets:
        out.notes.append("buckets: " + ", ".join(buckets))
    if lack := espeak_lack(cfg):
        out.notes.append(lack)


TTS = Registry(Stage.TTS)
TTS.register("fastspeech2", "rkvoice.tts.fastspeech2:FastSpeech2Tts",
             "FastSpeech2 + MB-MelGAN via onnxruntime; portable Chinese voice (Baker, 24 kHz)",
             "run ./install.sh (needs onnxruntime and pypinyin)", needs=fastspeech2_needs, check=fastspeech2_check)
TTS.register("vits", "rkvoice.tts.vits:VitsTts",
             "sherpa-onnx VITS: English Piper voice (portable) or aishell3 Chinese voices (board)",
             "run ./install.sh (needs sherpa-onnx, and piper-tts for the Piper voice)", needs=vits_needs)
TTS.register("matcha", "rkvoice.tts.matcha_engine:MatchaTts",
             "Matcha + Vocos on the NPU (board; RKNN), Chinese and English, 16 kHz",
             "run ./install.sh --profile board on the board (needs rknn-toolkit-lite2)", needs=matcha_needs,
             check=matcha_check)

AUTO = "auto"
_LATIN = re.compile(r"[A-Za-z]")
CHINESE = "你好"
"""The text the answers' voice is chosen for (the daemon, the CLI, ``--check``): the assistant answers
in Chinese first."""
PREFERENCE = {"zh": ("matcha", "fastspeech2", "vits"), "en": ("vits", "matcha", "fastspeech2")}
"""Engines in order of preference per language; "vits" stands for its voice speaking that language."""


def text_language(text: str) -> str:
    """"zh" if the text has any Han character, "en" if it has Latin letters only, else "zh"."""
    return "en" if _LATIN.search(text) and not HAN.search(text) else "zh"


@dataclass(frozen=True)
class VoiceSpec:
    """One voice: the engine that speaks it, the constructor arguments that pick it, its languages."""

    name: str
    engine: str
    kwargs: tuple[tuple[str, str], ...]
    languages: tuple[str, ...]


def engine_voices(name: str) -> list[VoiceSpec]:
    """The voices engine ``name`` declares: one per entry of its class's ``voices`` table (VITS),
    else the engine itself speaking its class's ``languages``."""
    cls = TTS.target(name)
    table = getattr(cls, "voices", None)
    if table is None:
        return [VoiceSpec(name, name, (), cls.languages)]
    return [VoiceSpec(v.name, name, (("voice", v.name),), v.languages) for v in table.values()]


def installed_voices(cfg: Config, probe: Probe | None = None) -> dict[str, VoiceSpec]:
    """Every installed voice by name (model files present, runtime importable), engines in the
    order preferred for Chinese; ``probe`` replaces the import check (rkvoice.needs.Probe)."""
    return {v.name: v for name in PREFERENCE["zh"] for v in engine_voices(name)
            if installed(TTS.needs(name, cfg, **dict(v.kwargs)), probe)}


def engine_languages(cfg: Config, probe: Probe | None = None) -> dict[str, tuple[str, ...]]:
    """Installed engines -> the languages their installed voices speak."""
    out: dict[str, tuple[str, ...]] = {}
    for v in installed_voices(cfg, probe).values():
        out[v.engine] = tuple(dict.fromkeys(out.get(v.engine, ()) + v.languages))
    return out


def choose_engine(cfg: Config, text: str = "", probe: Probe | None = None) -> tuple[str, dict[str, Any]]:
    """The "auto" choice for text: (engine name, extra constructor kwargs)."""
    lang = text_language(text)
    available = engine_languages(cfg, probe)
    if not available:
        raise RkvoiceError(Stage.TTS, Code.NO_VOICE, "no TTS voice is installed: run ./install.sh to install the voices")
    name = next((n for n in PREFERENCE[lang] if lang in available.get(n, ())), None)
    if name is None:  # nothing speaks this language: fall back to the best installed engine and say so
        name = next(n for n in PREFERENCE[lang] if n in available)
        log.warning("no installed voice speaks %s; using %s (speaks %s), which may drop or misread the text",
                    lang, name, "/".join(available[name]))
    return name, _kwargs(cfg, name, lang)


def profile_engine(cfg: Config, text: str = "") -> tuple[str, dict[str, Any]]:
    """The engine this profile's install provides for the language of ``text`` (named by --check
    when no voice is installed): the first preferred one whose files live under models/<profile>/."""
    lang = text_language(text)
    home = cfg.models.path / cfg.models.profile
    for name in PREFERENCE[lang]:
        kwargs = _kwargs(cfg, name, lang, warn=False)
        files = TTS.needs(name, cfg, **kwargs).files
        if files and all(p.is_relative_to(home) for f in files for p in f.paths):
            return name, kwargs
    return PREFERENCE[lang][0], {}


def _kwargs(cfg: Config, name: str, lang: str, warn: bool = True) -> dict[str, Any]:
    if name != "vits":
        return {}
    from rkvoice.tts.vits import SPAN_NOISE, resolve_voice

    voice = resolve_voice(cfg, None, lang)
    kwargs: dict[str, Any] = {"voice": voice.name}
    if lang not in voice.languages and voice.external_phonemes:
        # A Piper voice chosen for text it does not speak says only its spans (the Latin words of
        # Chinese text): unsampled, as the partner voice says them for any other primary.
        kwargs["piper_noise"] = SPAN_NOISE
    if warn and lang not in voice.languages:
        if any(lang in langs for other, langs in engine_languages(cfg).items() if other != "vits"):
            log.info("vits voice %s speaks %s: its %s spans go to the %s voice", voice.name,
                     "/".join(voice.languages), lang, lang)
        else:
            log.warning("vits voice %s speaks %s, not %s, and no installed voice does: the text may be misread",
                        voice.name, "/".join(voice.languages), lang)
    return kwargs


def resolve(cfg: Config, name: str | None = None, text: str = "",
            probe: Probe | None = None) -> tuple[str, dict[str, Any]]:
    """The engine ``create_tts`` builds for ``text``: (name, constructor kwargs). ``name``, else
    ``cfg.tts.engine``; "auto" picks the best installed engine for the language of ``text``."""
    name = name or cfg.tts.engine
    if name == AUTO:
        return choose_engine(cfg, text, probe)
    if name not in TTS.names():
        raise RkvoiceError(Stage.TTS, "unknown-backend",
                           f"unknown tts engine {name!r}; choose one of: {AUTO}, {', '.join(TTS.names())}")
    return name, _kwargs(cfg, name, text_language(text)) if name == "vits" and text else {}


def create_tts(cfg: Config, name: str | None = None, text: str = "") -> TtsEngine:
    """A constructed (not loaded) engine (see ``resolve``). Unknown names raise RkvoiceError listing
    the choices; "auto" with no voice installed raises one naming ./install.sh. A voice that speaks
    only Chinese or only English comes wrapped in ``rkvoice.tts.mixed.MixedTts`` when a voice for
    the other language is installed (loaded only when a span needs it)."""
    chosen, kwargs = resolve(cfg, name, text)
    if (name or cfg.tts.engine) == AUTO:
        log.info("tts auto: %s %s for %s text", chosen, kwargs or "", text_language(text))
    engine: TtsEngine = TTS.create(chosen, cfg, **kwargs)
    # Latin words to an English voice, Han to a Chinese one
    return with_other_language(cfg, engine, text_language(text) if text else None)


def with_other_language(cfg: Config, engine: TtsEngine, text_lang: str | None = None) -> TtsEngine:
    """``engine`` itself when it speaks both Chinese and English, else a MixedTts routing the other
    language's spans to the best installed engine for it (``engine`` alone when none is installed).
    Chosen for text in a language ``engine`` does not speak (``text_lang``), that language's voice
    loads with it."""
    from rkvoice.tts.mixed import LANGS, MixedTts
    from rkvoice.tts.vits import SPAN_NOISE, resolve_voice

    own = (engine.name, getattr(getattr(engine, "voice", None), "name", None))  # a vits voice: not its own partner
    missing = [lang for lang in LANGS if lang not in engine.languages]
    available = engine_languages(cfg) if missing else {}
    others: dict[str, TtsEngine] = {}
    for lang in missing:
        for name in (n for n in PREFERENCE[lang] if lang in available.get(n, ())):  # best first
            # an installed VITS voice speaks lang, so the one chosen for it does
            kwargs = ({"voice": resolve_voice(cfg, "auto", lang).name, "piper_noise": SPAN_NOISE}
                      if name == "vits" else {})
            if (name, kwargs.get("voice")) != own:
                others[lang] = TTS.create(name, cfg, **kwargs)
                break
        else:
            log.info("no installed voice speaks %s: %s reads its spans itself", lang, engine.name)
    return MixedTts(engine, others, preload=text_lang) if others else engine
