"""``assistant.py --check``: can the configured pipeline run here, and if not, why.

For each stage (wake, vad, asr, llm, tts, audio) the engine the config selects is resolved
("auto" by ``models.profile``) and checked without loading any model: its files exist and
match the manifest's size/sha256 (the install helper's verifier), the Python packages it
imports are installed, and for the NPU engines the native pieces agree: librknnrt,
rknn-toolkit-lite2 and the toolkit that built the .rknn files share a version, librkllmrt
matches the configured RKLLM ABI, the RKNPU driver is there. Versions are read from the files'
bytes, never by loading a possibly mismatched library. A missing sound device is reported;
it only fails the check when a device player (aplay, sounddevice) is configured explicitly.

Exit status: 0 when every stage can run, 1 otherwise.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from rkvoice.board import versions
from rkvoice.board.espeak import espeak_lib_dir
from rkvoice.config import ROOT, Config

log = logging.getLogger(__name__)

MANIFEST = ROOT / "models" / "manifest.yaml"
ASOUND = Path("/proc/asound")


@dataclass
class StageCheck:
    stage: str
    engine: str
    problems: list[str] = field(default_factory=list)
    """Reasons the stage cannot run (each fails the check)."""
    notes: list[str] = field(default_factory=list)
    """Facts and warnings that do not stop the pipeline."""

    @property
    def ok(self) -> bool:
        return not self.problems


def resolve_engines(cfg: Config) -> dict[str, str]:
    board = cfg.models.profile == "board"
    pick = lambda value, b, p: value if value != "auto" else (b if board else p)  # noqa: E731
    return {
        "wake": pick(cfg.hear.wake, "kws", "asr-match"),
        "vad": "silero",
        "asr": pick(cfg.hear.asr, "paraformer", "whisper"),
        "llm": pick(cfg.llm.engine, "rkllm", "llama"),
        "tts": pick(cfg.tts.engine, "matcha", "fastspeech2"),
        "audio": cfg.audio.player,
    }


# Files each engine reads (alternatives in a tuple), mirroring the engines' own lookups.
def _engine_files(cfg: Config, engine: str) -> list[tuple[Path, ...]]:
    m = cfg.models.path
    if engine == "kws":  # hear.kws_dir; names carry the recipe (encoder-epoch-12-...int8.onnx)
        from rkvoice.hear.kws import STEMS, kws_dir

        d = kws_dir(cfg)
        found = {s: sorted(d.glob(f"{s}*.int8.onnx")) + sorted(d.glob(f"{s}*.onnx")) for s in STEMS}
        return [tuple(found[s]) or (d / f"{s}.int8.onnx", d / f"{s}.onnx") for s in STEMS] + [(d / "tokens.txt",)]
    if engine == "silero":
        from rkvoice.hear.vad import vad_model_path  # models/<profile>/vad/silero_vad.onnx

        return [(vad_model_path(cfg),)]
    if engine == "whisper":
        d = m / "portable" / "whisper-base"
        return [(d / n,) for n in ("model.bin", "config.json", "tokenizer.json", "vocabulary.json")]
    if engine == "paraformer":
        from rkvoice.hear.paraformer_asr import paraformer_dir

        d = paraformer_dir(cfg)
        return [(d / "model.int8.onnx", d / "model.onnx"), (d / "tokens.txt",)]
    if engine in ("llama", "rkllm"):
        from rkvoice.answer.llm.base import model_path

        return [(model_path(cfg, engine),)]
    if engine == "matcha":
        from rkvoice.tts.matcha_engine import MatchaTts

        return [(p,) for p in MatchaTts(cfg).files().values()]
    if engine == "fastspeech2":
        from rkvoice.tts.fastspeech2 import files

        return [(p,) for p in files(cfg).values()]  # the vocoder: tts.fastspeech2.vocoder (.rknn on the board)
    if engine == "vits":
        from rkvoice.tts.vits import VOICES

        voice = VOICES["vits-zh-aishell3" if cfg.models.profile == "board" else "piper-joe"]
        d = voice.dir(cfg)
        files = [tuple(d / n for n in voice.models), (d / "tokens.txt",)]
        return files + ([(d / voice.lexicon,)] if voice.lexicon else [])
    return []


# Python packages each engine imports (mirrors the engines' imports).
_PACKAGES = {"kws": ["sherpa_onnx", "pypinyin"], "silero": ["sherpa_onnx"], "paraformer": ["sherpa_onnx"],
             "vits": ["sherpa_onnx"], "whisper": ["faster_whisper"], "asr-match": ["pypinyin"],
             "llama": ["cyllama"], "fastspeech2": ["onnxruntime", "pypinyin"]}


def _rel(p: Path, cfg: Config) -> str:
    try:
        return str(p.relative_to(cfg.models.path.parent))
    except ValueError:
        return str(p)


def module_missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def _check_files(cfg: Config, engine: str, st: StageCheck) -> list[Path]:
    found = []
    for alts in _engine_files(cfg, engine):
        hit = next((p for p in alts if p.is_file()), None)
        if hit is None:
            names = " or ".join(_rel(p, cfg) for p in alts)
            st.problems.append(f"missing {names} (run ./install.sh --profile {cfg.models.profile})")
        else:
            found.append(hit)
    return found


def _check_checksums(cfg: Config, engine: str, st: StageCheck, found: list[Path], manifest: Path) -> None:
    """Size/sha256 of the found files against the manifest entries of this engine and profile."""
    if not found or not manifest.is_file():
        return
    try:
        from rkvoice.models.manifest import load_manifest
        from rkvoice.models.verify import verify_file
    except ImportError as exc:
        st.notes.append(f"checksums not checked ({exc})")
        return
    root = cfg.models.path.parent
    wanted = {p.resolve() for p in found}
    for model in load_manifest(manifest).models:
        if model.engine != engine or model.profile != cfg.models.profile:
            continue
        for spec in model.files:
            path = (root / model.dir / spec.path).resolve()
            if path not in wanted:
                continue
            problem = verify_file(model, root, spec)
            if problem is not None:
                st.problems.append(f"{problem.path}: {problem.kind}: {problem.detail}")


def _check_rknn(cfg: Config, st: StageCheck, rknn_files: list[Path]) -> None:
    lite = versions.package_version("rknn-toolkit-lite2")
    rt_path, rt = versions.librknnrt_version()
    if lite is None:
        st.problems.append("rknn-toolkit-lite2 is not installed (py312/bin/pip install "
                           f"rknn-toolkit-lite2=={rt or '<librknnrt version>'}; aarch64 wheels only)")
    if rt_path is None:
        st.problems.append("librknnrt.so not found in /usr/lib (it comes with the board image / rknpu2)")
    elif rt is None:
        st.problems.append(f"cannot read the librknnrt version from {rt_path}")
    if lite and rt and lite != rt:
        st.problems.append(f"version mismatch: librknnrt {rt} ({rt_path}) but rknn-toolkit-lite2 {lite}; "
                           f"install rknn-toolkit-lite2=={rt}")
    for f in rknn_files:
        built = rknn_build_version(f)
        if built and rt and built != rt:
            st.problems.append(f"version mismatch: {f.name} was built by rknn-toolkit2 {built} but librknnrt is {rt}; "
                               f"rebuild it with models/convert_rknn.py under toolkit {rt}")
    drv_path, drv = versions.npu_driver_version()
    if drv:
        st.notes.append(f"RKNPU driver {drv} ({drv_path})")
    else:
        st.notes.append("RKNPU driver version unreadable (" + ", ".join(str(p) for p in versions.NPU_DRIVER_PATHS)
                        + "; debugfs needs root)")
    if rt and lite == rt:
        st.notes.append(f"librknnrt {rt} = rknn-toolkit-lite2 {lite}")


def rknn_build_version(path: Path) -> str | None:
    """The rknn-toolkit2 version stamped into a .rknn file (first 4 MB), if found."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4 << 20)
    except OSError:
        return None
    m = re.search(rb"toolkit[_ ]?version\"?[:=] *\"?v?(\d+\.\d+\.\d+(?:[a-z]+\d*)?)", head, re.IGNORECASE)
    return m.group(1).decode() if m else None


def _check_rkllm(cfg: Config, st: StageCheck) -> None:
    named = Path(cfg.llm.rkllm_lib)
    lib = named if named.is_absolute() and named.exists() else versions.first_existing(versions.LIBRKLLMRT_PATHS)
    if lib is None:
        st.problems.append(f"{cfg.llm.rkllm_lib} not found (the board image ships /usr/lib/librkllmrt.so)")
        return
    from rkvoice.answer.llm.rkllm_abi import runtime_abi, runtime_problem

    ver = versions.so_version(lib, "rkllm")
    if ver is None:
        st.notes.append(f"cannot read the librkllmrt version from {lib}")
        return
    problem = runtime_problem(ver, cfg.llm.rkllm_abi)
    if problem is None:
        st.notes.append(f"librkllmrt {ver}")
    elif runtime_abi(ver) is None:
        st.problems.append(f"{lib}: {problem}")
    else:
        st.problems.append(f"version mismatch: {lib}: {problem}")


def _check_matcha_sidecars(cfg: Config, st: StageCheck, found: list[Path]) -> None:
    """The buckets found, and each .rknn's sidecar: readable, built by the runtime's toolkit version."""
    import json

    models = sorted(p.stem for p in found if p.suffix in (".rknn", ".onnx") and p.stem.startswith(("matcha", "vocos")))
    if models:
        st.notes.append("buckets: " + ", ".join(models))
    _, rt = versions.librknnrt_version()
    for side in (p for p in found if p.suffix == ".json"):
        try:
            built = json.loads(side.read_text(encoding="utf-8")).get("toolkit_version")
        except (OSError, ValueError, AttributeError) as exc:
            st.problems.append(f"{_rel(side, cfg)} is not a readable sidecar ({exc}); rebuild it with "
                               "models/convert_rknn.py (./install.sh --profile board)")
            continue
        if built and rt and str(built) != rt:
            st.problems.append(f"version mismatch: {side.name} says its model was built by rknn-toolkit2 {built} but "
                               f"librknnrt is {rt}; rebuild it (./install.sh --profile board converts with {rt})")


def _check_sherpa_model(cfg: Config, engine: str, st: StageCheck) -> None:
    """What sherpa-onnx would exit the process on (metadata, tokens, the wake phrase's tokens)."""
    from rkvoice.errors import RkvoiceError

    try:
        if engine == "kws":
            from rkvoice.hear.kws import check_kws

            st.notes.append(f"keywords: {check_kws(cfg)}")
        else:
            from rkvoice.hear.paraformer_asr import check_paraformer

            st.notes.append(f"model {_rel(check_paraformer(cfg)[0], cfg)}")
    except RkvoiceError as err:
        st.problems.append(err.message)


def _check_espeak(cfg: Config, st: StageCheck) -> None:
    lib_dir = espeak_lib_dir(cfg)
    if lib_dir is not None:
        from rkvoice.board.espeak import PRELOAD_ORDER

        missing = [n for n in PRELOAD_ORDER if not (lib_dir / n).exists()]
        if not (lib_dir / "espeak-ng-data" / "phontab").exists():
            missing.append("espeak-ng-data/phontab")
        if missing:
            st.notes.append(f"espeak-ng copy in {lib_dir} lacks {', '.join(missing)}: English words will be skipped")
    elif ctypes.util.find_library("espeak-ng") is None:
        st.notes.append("no espeak-ng (no unpacked copy at tts.matcha.espeak_lib_dir, none on the system): "
                        "English words are skipped")


def has_input_device() -> bool:
    pcm = ASOUND / "pcm"
    if pcm.exists() and "capture" in pcm.read_text(errors="replace"):
        return True
    try:
        import sounddevice as sd

        return any(d.get("max_input_channels", 0) > 0 for d in sd.query_devices())
    except Exception:  # no PortAudio or no devices
        return False


def _output_device() -> str | None:
    from rkvoice.audio.players import has_sound_device

    return has_sound_device()


def check_stage(cfg: Config, stage: str, engine: str, manifest: Path = MANIFEST,
                output_device: Callable[[], str | None] = _output_device,
                input_device: Callable[[], bool] = has_input_device) -> StageCheck:
    st = StageCheck(stage, engine)
    if stage == "audio":
        dev = output_device()
        if engine in ("aplay", "sounddevice") and dev is None:
            st.problems.append(f"audio.player is {engine} but there is no sound output device")
        elif engine == "aplay" and shutil.which("aplay") is None:
            st.problems.append("aplay not found (apt-get install alsa-utils)")
        elif engine == "auto":
            st.notes.append(f"output: {dev}" if dev else "no audio device: answers are written to WAV files")
        if not input_device():
            st.notes.append("no microphone: the live loop cannot listen (--text and --file still work)")
        return st
    if engine == "asr-match":
        st.notes.append("wake by ASR + pinyin match (needs the asr stage)")
        st.problems += [f"python package {p} is not installed" for p in _PACKAGES[engine] if module_missing(p)]
        return st
    found = _check_files(cfg, engine, st)
    _check_checksums(cfg, engine, st, found, manifest)
    for pkg in _PACKAGES.get(engine, []):
        if module_missing(pkg):
            st.problems.append(f"python package {pkg} is not installed (./install.sh --profile {cfg.models.profile})")
    if engine in ("kws", "paraformer") and not st.problems:
        _check_sherpa_model(cfg, engine, st)
    if engine == "rkllm":
        _check_rkllm(cfg, st)
        _check_rknn_driver_only(st)
    if engine == "matcha":
        configured = [alts[0] for alts in _engine_files(cfg, engine)]
        if any(p.suffix == ".rknn" for p in configured):
            _check_rknn(cfg, st, [p for p in found if p.suffix == ".rknn"])
        if any(p.suffix == ".onnx" for p in configured) and module_missing("onnxruntime"):
            st.problems.append("python package onnxruntime is not installed")
        _check_matcha_sidecars(cfg, st, found)
        _check_espeak(cfg, st)
    if engine == "fastspeech2":
        _check_fastspeech2_vocoder(cfg, st, found)
    return st


def _check_fastspeech2_vocoder(cfg: Config, st: StageCheck, found: list[Path]) -> None:
    """A configured .rknn vocoder (config.board.yaml) needs the NPU runtime and a valid core mask."""
    from rkvoice.npu.runtime import CORE_MASKS
    from rkvoice.tts.fastspeech2 import vocoder_path

    fs = cfg.tts.fastspeech2
    if not fs.vocoder.strip():
        return
    vocoder = vocoder_path(cfg)
    st.notes.append(f"vocoder {_rel(vocoder, cfg)} in {fs.vocoder_frames}-frame windows, context {fs.vocoder_context}")
    if vocoder.suffix == ".rknn":
        _check_rknn(cfg, st, [p for p in found if p == vocoder])
        if fs.core_mask.strip().lower() not in CORE_MASKS:
            st.problems.append(f"tts.fastspeech2.core_mask {fs.core_mask!r} is not one of: {', '.join(CORE_MASKS)}")
    elif vocoder.suffix != ".onnx":
        st.problems.append(f"tts.fastspeech2.vocoder {fs.vocoder!r} must end in .rknn (NPU) or .onnx (CPU)")


def _check_rknn_driver_only(st: StageCheck) -> None:
    drv_path, drv = versions.npu_driver_version()
    st.notes.append(f"RKNPU driver {drv} ({drv_path})" if drv else "RKNPU driver version unreadable")


def check_pipeline(cfg: Config, manifest: Path = MANIFEST, **probes: Callable) -> list[StageCheck]:
    return [check_stage(cfg, stage, engine, manifest, **probes) for stage, engine in resolve_engines(cfg).items()]


def render(checks: list[StageCheck]) -> str:
    lines = []
    for st in checks:
        mark = "ok  " if st.ok else "FAIL"
        lines.append(f"[{mark}] {st.stage:<5} {st.engine}")
        lines += [f"         - {p}" for p in st.problems]
        lines += [f"         . {n}" for n in st.notes]
    bad = [st.stage for st in checks if not st.ok]
    lines.append("pipeline can run" if not bad else f"pipeline cannot run: {', '.join(bad)} not usable")
    return "\n".join(lines) + "\n"


def run_check(cfg: Config, out: TextIO, manifest: Path = MANIFEST, **probes: Callable) -> int:
    """Print the report; 0 when the configured pipeline can run, 1 otherwise."""
    checks = check_pipeline(cfg, manifest, **probes)
    out.write(f"profile {cfg.models.profile}, models in {cfg.models.path}\n")
    out.write(render(checks))
    return 0 if all(st.ok for st in checks) else 1


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    from rkvoice.config import load_config, parse_override

    ap = argparse.ArgumentParser(prog="python -m rkvoice.board.check")
    ap.add_argument("--set", action="append", default=[], help="config override KEY=VALUE")
    args = ap.parse_args(argv)
    cfg = load_config([parse_override(s) for s in args.set])
    return run_check(cfg, sys.stdout)


if __name__ == "__main__":
    raise SystemExit(main())
