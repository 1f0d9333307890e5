"""``assistant.py --check``: can the configured pipeline run here, and if not, why (exit 1).

Each stage's registry says which engine the daemon would choose and what it needs (``rkvoice.needs``);
without loading a model, found files are also checked against the manifest's size/sha256, the NPU
runtimes' versions and the entry's own ``Backend.check``. A missing microphone is a note.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from rkvoice.board import prereqs, runtimes
from rkvoice.config import ROOT, Config
from rkvoice.errors import Code, RkvoiceError
from rkvoice.needs import Needs, Probe, missing, module_found, present_file
from rkvoice.registry import Registry

log = logging.getLogger(__name__)

MANIFEST = ROOT / "models" / "manifest.yaml"
RUNTIME_PACKAGES = ("rknnlite",)
"""Judged with their runtime's version (rkvoice.board.runtimes), not as a bare import."""
REGISTRIES = {"wake": "rkvoice.hear.wake_registry:WAKE", "asr": "rkvoice.hear.asr:ASR",
              "llm": "rkvoice.answer.llm.registry:LLM", "tts": "rkvoice.tts.registry:TTS",
              "audio": "rkvoice.audio.players:PLAYERS"}
"""Each stage's registry (``module:attribute``), imported when first asked."""
PROBE = Probe(module=lambda name: module_found(name))  # looked up per call: tests replace it
"""How this machine is asked; tests pass ``probe=`` with their own devices."""
ROOTS = prereqs.Roots(install=ROOT)
"""Where the board's prerequisites are read; tests pass ``roots=`` with fake trees."""


@dataclass
class StageCheck(runtimes.Findings):
    stage: str
    engine: str
    absent: list[str] = field(default_factory=list)
    """What is not installed but the pipeline runs without (the RKLLM model, a board prerequisite),
    each with its next step."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def mark(self) -> str:
        return "FAIL" if self.problems else "MISS" if self.absent else "ok  "


def _players(cfg: Config, probe: Probe) -> tuple[str, str]:
    """(daemon's player, command line's player): the choice both make, on this probe's device."""
    from rkvoice.audio.players import choose_player

    return (choose_player(cfg, daemon=True, device=probe.sound_output, warn=False),
            choose_player(cfg, daemon=False, device=probe.sound_output))


def _tts_choice(cfg: Config, probe: Probe, text: str) -> tuple[str, dict[str, Any], str | None]:
    """(engine, kwargs, why it cannot be built): ``create_tts``'s choice; with no voice installed,
    the profile's own voice (whose missing files the report names)."""
    from rkvoice.tts.registry import profile_engine, resolve

    try:
        return (*resolve(cfg, None, text, probe), None)
    except RkvoiceError as err:
        if err.code != Code.NO_VOICE:
            return cfg.tts.engine, {}, err.message
        return (*profile_engine(cfg, text), err.message)


def _choices(cfg: Config, probe: Probe) -> dict[str, tuple[str, str | None]]:
    """Stage -> (engine the daemon runs, why it cannot be chosen or None), from the registries."""
    from rkvoice.answer.llm.registry import engine_name
    from rkvoice.hear.asr import asr_name
    from rkvoice.hear.wake_registry import wake_name
    from rkvoice.tts.registry import CHINESE

    def pick(choose: Callable[[], str], configured: str) -> tuple[str, str | None]:
        try:
            return choose(), None
        except RkvoiceError as err:  # an unknown name: reported on its stage
            return configured, err.message

    tts, _, why = _tts_choice(cfg, probe, CHINESE)
    return {"wake": pick(lambda: wake_name(cfg), cfg.hear.wake), "vad": ("silero", None),
            "asr": pick(lambda: asr_name(cfg), cfg.hear.asr), "llm": pick(lambda: engine_name(cfg), cfg.llm.engine),
            "tts": (tts, why),
            "audio": pick(lambda: _players(cfg, probe)[0], cfg.audio.player)}


def _registry(stage: str) -> Registry:
    module, _, attr = REGISTRIES[stage].partition(":")
    return getattr(importlib.import_module(module), attr)


def stage_needs(cfg: Config, stage: str, engine: str, **kwargs: Any) -> Needs:
    """What ``engine`` of ``stage`` declares it needs (its registry entry; vad: the loop's model)."""
    if stage == "vad":
        from rkvoice.hear.wake_registry import vad_needs

        return vad_needs(cfg)
    return _registry(stage).needs(engine, cfg, **kwargs)


def _report_needs(cfg: Config, st: StageCheck, needs: Needs, probe: Probe) -> list[Path]:
    """Missing files, packages, programs and devices into ``st``; returns the files found."""
    for lack in missing(needs, probe, relative_to=cfg.models.path.parent):
        if lack.kind == "package" and lack.name in RUNTIME_PACKAGES and needs.runtimes:
            continue
        if lack.kind == "device" and lack.name == "microphone":
            st.notes.append("no microphone: the live loop cannot listen (--text and --file still work)")
        else:
            st.problems.append(str(lack))
    found = [p for p in (present_file(f) for f in needs.files) if p is not None]
    if needs.runtimes:
        runtimes.check_runtimes(needs.runtimes, cfg.models.path.parent, st)
    return found


def _check_checksums(cfg: Config, engine: str, st: StageCheck, found: list[Path], manifest: Path) -> None:
    """Size/sha256 of the found files against the manifest entries of this engine and profile."""
    if not found or not manifest.is_file():
        return
    try:
        from rkvoice.installer.manifest import load_manifest
        from rkvoice.installer.verify import verify_file
    except ImportError as exc:
        st.notes.append(f"checksums not checked ({exc})")
        return
    root = cfg.models.path.parent
    wanted = {p.resolve() for p in found}
    for model in load_manifest(manifest).models:
        if model.engine != engine or model.profile != cfg.models.profile:
            continue
        for spec in model.files:
            if (root / model.dir / spec.path).resolve() in wanted:
                problem = verify_file(model, root, spec)
                if problem is not None:
                    st.problems.append(f"{problem.path}: {problem.kind}: {problem.detail}")


def _check_audio(cfg: Config, st: StageCheck, probe: Probe) -> None:
    cfg = replace(cfg, audio=replace(cfg.audio, player=st.engine))
    daemon, cli = _players(cfg, probe)
    st.engine = daemon if daemon == cli else f"{daemon} (daemon), {cli} (command line)"
    for name in dict.fromkeys((daemon, cli)):
        _report_needs(cfg, st, stage_needs(cfg, "audio", name), probe)
    device = probe.sound_output()
    if device:
        st.notes.append(f"output: {device}")
    elif daemon != cli:
        st.notes.append("no audio device: the daemon synthesises answers without playing them; "
                        "command-line runs write them to a WAV file (or --out)")


def check_stage(cfg: Config, stage: str, engine: str, manifest: Path = MANIFEST, probe: Probe = PROBE) -> StageCheck:
    """One stage with the given engine (``audio``: the configured player name, auto resolved)."""
    st = StageCheck(stage, engine)
    if stage == "audio":
        _check_audio(cfg, st, probe)
        return st
    kwargs: dict[str, Any] = {}
    if stage == "tts":
        from rkvoice.tts.registry import CHINESE, resolve

        _, kwargs = resolve(cfg, engine, CHINESE, probe)
    found = _report_needs(cfg, st, stage_needs(cfg, stage, engine, **kwargs), probe)
    _check_checksums(cfg, engine, st, found, manifest)
    if stage != "vad" and (check := _registry(stage).backend(engine).check):
        check(cfg, found, st)
    return st


def _check_tts(cfg: Config, name: str, why: str | None, manifest: Path, probe: Probe) -> StageCheck:
    from rkvoice.tts.registry import TTS

    if name not in TTS.names():
        return StageCheck("tts", name, problems=[why or f"unknown tts engine {name!r}"])
    st = check_stage(cfg, "tts", name, manifest, probe)
    if why:
        st.problems.insert(0, why)
        return st
    en, en_kwargs, _ = _tts_choice(cfg, probe, "Hello")
    if en != name or "voice" in en_kwargs:
        voice = f" ({en_kwargs['voice']})" if "voice" in en_kwargs else ""
        st.notes.append(f"English text: {en}{voice}")
    return st


def _llm_absent(cfg: Config, engine: str, lack: str) -> StageCheck:
    """An optional LLM without its model: missing, with the next step (its runtime is in the board's
    prerequisites)."""
    from rkvoice.answer.llm.absent import RECIPE

    shown = lack.replace(str(cfg.models.path.parent) + "/", "")
    return StageCheck("llm", engine, absent=[
        f"not installed ({shown}): a question for the language model gets one sentence saying so; the local "
        "tools, Home Assistant and the satellite answer as usual", f"next step: {RECIPE}"])


def _board(cfg: Config, roots: prereqs.Roots) -> StageCheck:
    """The board's prerequisites (rkvoice.board.prereqs): facts as notes, missing pieces with their fix."""
    items = prereqs.report(roots, prereqs.audio_of(cfg), cfg.llm.rkllm_abi)
    st = StageCheck("board", items[0].found)
    for it in items[1:]:
        (st.notes if it.ok else st.absent).append(str(it))
        st.notes += list(it.lines)
    if not items[0].ok:
        st.absent.insert(0, str(items[0]))
    return st


def check_pipeline(cfg: Config, manifest: Path = MANIFEST, probe: Probe = PROBE,
                   roots: prereqs.Roots | None = None) -> list[StageCheck]:
    """Every stage with the engine the daemon would run (audio: the daemon's and the CLI's player); on
    the board profile first the board's prerequisites."""
    from rkvoice.answer.llm.registry import not_installed

    out = [_board(cfg, roots or ROOTS)] if cfg.models.profile == "board" else []
    for stage, (engine, why) in _choices(cfg, probe).items():
        lack = not_installed(cfg, engine) if stage == "llm" and why is None else None
        if lack is not None:
            out.append(_llm_absent(cfg, engine, lack))
        elif stage == "tts":
            out.append(_check_tts(cfg, engine, why, manifest, probe))
        elif why is not None:
            out.append(StageCheck(stage, engine, problems=[why]))
        else:
            out.append(check_stage(cfg, stage, cfg.audio.player if stage == "audio" else engine, manifest, probe))
    from rkvoice.hear.aec import describe

    name, problems, notes = describe(cfg.hear.aec, cfg.hear.echo_tail_ms)
    out.append(StageCheck("echo", name, problems=problems, notes=notes))
    if cfg.home_assistant.url:  # home commands through Home Assistant's conversation agent
        from rkvoice.home.status import home_status

        ha = home_status(cfg)
        version = f" (Home Assistant {ha.version})" if ha.version else ""
        out.append(StageCheck("home_assistant", ha.where + version, problems=ha.problems, notes=ha.notes))
    if cfg.satellite.uri and cfg.satellite.protocol == "esphome":  # the board as an ESPHome voice device
        from rkvoice.esphome.identity import check_notes

        out.append(StageCheck("satellite", f"esphome, port {cfg.satellite.esphome.port}", notes=check_notes(cfg)))
    elif cfg.satellite.uri:  # the board as Home Assistant's Wyoming satellite
        from rkvoice.satellite.info import port_note

        out.append(StageCheck("satellite", cfg.satellite.uri, notes=[port_note(cfg)]))
    return out


def render(checks: list[StageCheck]) -> str:
    lines = []
    for st in checks:
        lines.append(f"[{st.mark}] {st.stage:<5} {st.engine}")
        lines += [f"         - {p}" for p in st.problems + st.absent]
        lines += [f"         . {n}" for n in st.notes]
    bad = [st.stage for st in checks if not st.ok]
    without = [st.stage for st in checks if st.ok and st.absent]
    if bad:
        lines.append(f"pipeline cannot run: {', '.join(bad)} not usable")
    else:
        lines.append("pipeline can run" + (f" (missing, see above: {', '.join(without)})" if without else ""))
    return "\n".join(lines) + "\n"


def run_check(cfg: Config, out: TextIO, manifest: Path = MANIFEST, probe: Probe = PROBE,
              roots: prereqs.Roots | None = None) -> int:
    """Print the report; 0 when the configured pipeline can run, 1 otherwise."""
    checks = check_pipeline(cfg, manifest, probe, roots)
    out.write(f"profile {cfg.models.profile}, models in {cfg.models.path}\n")
    out.write(render(checks))
    return 0 if all(st.ok for st in checks) else 1
