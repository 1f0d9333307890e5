"""The needs vocabulary: what each kind of need lacks on a probed machine, and the fix it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from rkvoice.config import Config, ModelsConfig
from rkvoice.needs import (
    FileNeed,
    Needs,
    PackageNeed,
    Probe,
    ProgramNeed,
    RuntimeNeed,
    installed,
    missing,
)
from rkvoice.registry import Registry


def probe(modules=(), programs=(), output=None, microphone=False, npu=False) -> Probe:
    return Probe(sound_output=lambda: output, microphone=lambda: microphone, npu=lambda: npu,
                 module=lambda m: m in modules, program=lambda p: p in programs)


def test_files_any_alternative_will_do_and_empty_files_count_as_missing(tmp_path: Path) -> None:
    a, b = tmp_path / "model.int8.onnx", tmp_path / "model.onnx"
    needs = Needs(files=(FileNeed("model", (a, b)),), profile="board")
    [lack] = missing(needs, probe(), relative_to=tmp_path)
    assert (lack.kind, lack.name) == ("file", str(a))
    assert str(lack) == "missing model.int8.onnx or model.onnx (run ./install.sh --profile board)"
    b.write_bytes(b"")
    assert missing(needs, probe())  # an empty model is as good as none
    b.write_bytes(b"x")
    assert missing(needs, probe()) == [] and installed(needs, probe())


def test_packages_programs_and_devices_name_their_fix() -> None:
    needs = Needs(packages=(PackageNeed("sherpa_onnx", "sherpa-onnx"), PackageNeed("rknnlite", "rknn-toolkit-lite2")),
                  programs=(ProgramNeed("aplay", "apt-get install alsa-utils"),),
                  devices=("sound-output", "microphone", "npu"), profile="board")
    lacks = {lack.name: str(lack) for lack in missing(needs, probe())}
    assert lacks["sherpa_onnx"] == ("python package sherpa_onnx is not installed (py312/bin/pip install -r "
                                    "requirements/board.txt, which pins sherpa-onnx; ./install.sh does it)")
    assert "rknn-toolkit-lite2==<the librknnrt version>" in lacks["rknnlite"]
    assert lacks["aplay"] == "aplay not found (apt-get install alsa-utils)"
    assert lacks["sound-output"].startswith("no sound output device (") and "audio.player" in lacks["sound-output"]
    assert lacks["microphone"].startswith("no microphone device (") and "--text" in lacks["microphone"]
    assert lacks["npu"].startswith("no npu device (")
    everything = probe(modules={"sherpa_onnx", "rknnlite"}, programs={"aplay"}, output="aplay", microphone=True,
                       npu=True)
    assert missing(needs, everything) == []


def test_installed_ignores_devices_and_runtimes_but_not_packages() -> None:
    needs = Needs(packages=(PackageNeed("onnxruntime", "onnxruntime"),), devices=("npu",),
                  runtimes=(RuntimeNeed("librknnrt"),))
    assert installed(needs, probe(modules={"onnxruntime"}))
    assert not installed(needs, probe())
    assert [lack.name for lack in missing(needs, probe(modules={"onnxruntime"}))] == ["npu"]
    assert missing(needs, probe(modules={"onnxruntime"}), devices=False) == []


def test_needs_add_up_and_keep_the_first_profile() -> None:
    a = Needs(packages=(PackageNeed("pypinyin", "pypinyin"),), profile="board")
    b = Needs(devices=("microphone",), profile="portable")
    both = a + b
    assert both.packages == a.packages and both.devices == b.devices and both.install == "./install.sh --profile board"
    assert (Needs() + b).profile == "portable" and Needs().install == "./install.sh"


def test_registry_entries_carry_their_needs() -> None:
    reg = Registry("thing")
    reg.register("with", "x:Y", "declares", needs=lambda cfg, **kw: Needs(profile=cfg.models.profile, **kw))
    reg.register("without", "x:Z", "declares nothing")
    cfg = Config(models=ModelsConfig(profile="board"))
    assert reg.needs("with", cfg).install == "./install.sh --profile board"
    assert reg.needs("without", cfg) == Needs()


@pytest.mark.parametrize("module", ["rkvoice.tts.registry", "rkvoice.hear.asr", "rkvoice.hear.wake_registry",
                                    "rkvoice.answer.llm.registry", "rkvoice.audio.players"])
def test_every_engine_declares_its_needs(module: str) -> None:
    import importlib

    mod = importlib.import_module(module)
    reg = next(v for v in vars(mod).values() if isinstance(v, Registry))
    for name in reg.names():
        needs = reg.needs(name, Config())
        if name not in ("wav", "null"):  # the two players that need nothing
            assert needs != Needs(), name
