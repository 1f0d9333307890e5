"""Wake engines by name (``hear.wake``: kws, asr-match, auto), each with what it needs and what
``--check`` reads of it, and the voice-activity model both wake engines and the loop's
segmenter read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rkvoice.board.runtimes import Findings
from rkvoice.config import Config
from rkvoice.errors import Stage
from rkvoice.hear.asr import AsrEngine
from rkvoice.hear.wake import WakeEngine
from rkvoice.needs import FileNeed, Needs, PackageNeed
from rkvoice.registry import Registry, guarded

SHERPA = PackageNeed("sherpa_onnx", "sherpa-onnx")
PYPINYIN = PackageNeed("pypinyin", "pypinyin")


def vad_needs(cfg: Config) -> Needs:
    """Silero VAD through sherpa-onnx (models/<profile>/vad/silero_vad.onnx)."""
    from rkvoice.hear.vad import vad_model_path

    return Needs(files=(FileNeed("vad model", (vad_model_path(cfg),)),), packages=(SHERPA,), profile=cfg.models.profile)


def asr_match_needs(cfg: Config, **_: Any) -> Needs:
    """The pinyin match and the VAD that closes segments (the ASR engine is its own stage)."""
    return vad_needs(cfg) + Needs(packages=(PYPINYIN,), devices=("microphone",))


def asr_match_check(_cfg: Config, _found: list[Path], out: Findings) -> None:
    out.notes.append("wake by ASR + pinyin match (needs the asr stage)")


def kws_needs(cfg: Config, **_: Any) -> Needs:
    from rkvoice.hear.kws import file_needs, kws_dir

    kws = Needs(files=file_needs(kws_dir(cfg)), packages=(SHERPA, PYPINYIN), devices=("microphone",), profile="board")
    return kws + vad_needs(cfg)  # the VAD watches for the pause that ends a phrase (rkvoice.hear.kws)


def kws_keywords(cfg: Config) -> str:
    """What sherpa-onnx would exit the process on (metadata, the wake phrase's tokens), checked; the keywords."""
    from rkvoice.hear.kws import check_kws

    return f"keywords: {check_kws(cfg)[0]}"


WAKE = Registry(Stage.WAKE, auto=("kws", "asr-match"))
WAKE.register("asr-match", "rkvoice.hear.wake:AsrMatchWake", "VAD segment -> ASR -> pinyin match (portable)",
              needs=asr_match_needs, check=asr_match_check)
WAKE.register("kws", "rkvoice.hear.kws:KwsWake", "sherpa-onnx keyword spotter, zipformer zh (board profile)",
              "run ./install.sh --profile board for the keyword-spotter model", needs=kws_needs, check=guarded(kws_keywords))


def wake_name(cfg: Config) -> str:
    """Resolve ``auto``: kws on the board profile, asr-match elsewhere."""
    return WAKE.resolve(cfg.hear.wake, cfg.models.profile)


def create_wake(cfg: Config, asr: AsrEngine) -> WakeEngine:
    """The configured wake engine, not loaded. asr-match shares the (loaded) ASR engine ``asr``."""
    resolved = wake_name(cfg)
    return WAKE.create(resolved, cfg, *([asr] if resolved == "asr-match" else []))
