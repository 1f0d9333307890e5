"""The board's prerequisites on fake trees: /proc (device tree, kernel, ALSA, meminfo), /sys (the RKNPU
driver's version), library directories, an install directory with NPU sidecars and a free-space probe.
Each missing piece is one line naming its fix; ``--check`` shows the same report."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from rkvoice.board import prereqs
from rkvoice.board.prereqs import Roots
from rkvoice.cli import check
from rkvoice.config import Config, ModelsConfig

CARDS = """\
 0 [rockchipes8388 ]: rockchip-es8388 - rockchip-es8388
                      rockchip-es8388
 1 [Device         ]: USB-Audio - USB PnP Sound Device
                      C-Media Electronics Inc. USB PnP Sound Device at usb-xhci-hcd.0.auto-1, full speed
 2 [rockchiphdmi0  ]: rockchip-hdmi0 - rockchip-hdmi0
"""
PCM = """\
00-00: fe470000.i2s-ES8323 HiFi es8323.7-0011-0 : fe470000.i2s-ES8323 HiFi es8323.7-0011-0 : playback 1 : capture 1
01-00: USB Audio : USB Audio : playback 1 : capture 1
02-00: fe8a0000.i2s-i2s-hifi i2s-hifi-0 : fe8a0000.i2s-i2s-hifi i2s-hifi-0 : playback 1
"""
MEMINFO = "MemTotal:        3982012 kB\nMemFree:          812345 kB\nMemAvailable:    2811904 kB\n"


def fake_board(tmp: Path, *, soc: str = "rockchip,rk3576", driver: str | None = "RKNPU driver: v0.9.8\n",
               rknnrt: str | None = "2.3.2", rkllmrt: str | None = "1.2.1", cards: str = CARDS, pcm: str = PCM,
               meminfo: str = MEMINFO, free_mb: int = 20_000, sidecar: str | None = "2.3.2",
               libraries: tuple[str, ...] = ("portaudio",), programs: tuple[str, ...] = ("arecord", "aplay")) -> Roots:
    proc, sys_, libs, install = tmp / "proc", tmp / "sys", tmp / "lib", tmp / "install"
    for d in (proc / "device-tree", proc / "sys/kernel", proc / "asound", sys_, libs, install):
        d.mkdir(parents=True, exist_ok=True)
    (proc / "device-tree/compatible").write_bytes(f"radxa,rock-4d\0{soc}\0".encode())
    (proc / "device-tree/model").write_bytes(b"Radxa ROCK 4D\0")
    (proc / "sys/kernel/osrelease").write_text("6.1.99-rk3576\n")
    (proc / "asound/cards").write_text(cards)
    (proc / "asound/pcm").write_text(pcm)
    (proc / "meminfo").write_text(meminfo)
    if driver is not None:
        (sys_ / "kernel/debug/rknpu").mkdir(parents=True)
        (sys_ / "kernel/debug/rknpu/version").write_text(driver)
    if rknnrt is not None:
        (libs / "librknnrt.so").write_bytes(f"\0junk librknnrt version: {rknnrt} (429f97ae6b@2025-04-09T09:09:27)\0".encode())
    if rkllmrt is not None:
        (libs / "librkllmrt.so").write_bytes(f"\0rkllm-runtime version: {rkllmrt} (0123456@2025-01-01T00:00:00)\0".encode())
    if sidecar is not None:
        d = install / "models/board/matcha-rknn"
        d.mkdir(parents=True)
        (d / "matcha-t32.rknn").write_bytes(b"RKNN")
        (d / "matcha-t32.json").write_text(json.dumps({"toolkit_version": sidecar}))
    return Roots(proc=proc, sys=sys_, lib_dirs=(libs,), install=install, free_bytes=lambda _p: free_mb << 20,
                 library=lambda name: name in libraries, program=lambda name: name in programs)


def by_name(items: list[prereqs.Item]) -> dict[str, prereqs.Item]:
    return {it.what: it for it in items}


def test_a_complete_board_reports_every_fact_and_nothing_missing(tmp_path):
    items = by_name(prereqs.report(fake_board(tmp_path)))
    assert all(it.ok for it in items.values()), [str(it) for it in items.values() if not it.ok]
    assert items["board"].found == "Radxa ROCK 4D, rockchip,rk3576"
    assert items["kernel"].found == "6.1.99-rk3576"
    assert items["NPU driver"].found.startswith("RKNPU 0.9.8")
    assert items["librknnrt"].found.startswith("2.3.2") and "NPU files built with 2.3.2" in items["librknnrt"].found
    assert "convert the RKLLM model with rkllm-toolkit 1.2.1" in items["librkllmrt"].found
    assert items["memory"].found == "2746 MB free of 3888 MB (the install needs 1500 MB)"
    mic = items["input"]
    assert mic.found.startswith("hw:0,0 rockchipes8388 via sounddevice (audio.input_device: default, marked *)")
    assert mic.lines[0].startswith("* hw:0,0 rockchipes8388") and mic.lines[1].startswith("  hw:1,0 Device")
    assert "choose another with audio.input_device: hw:CARD,DEV" in mic.lines[-1]
    out = items["output"]
    assert out.found.startswith("hw:0,0 rockchipes8388 via aplay (audio.device: default")
    assert [line[:9] for line in out.lines[:3]] == ["* hw:0,0 ", "  hw:1,0 ", "  hw:2,0 "]  # HDMI plays only


@pytest.mark.parametrize("setting, marked", [("hw:1,0", "hw:1,0"), ("plughw:CARD=Device,DEV=0", "hw:1,0"),
                                             ("sysdefault:CARD=Device", "hw:1,0"), ("USB Audio", "hw:1,0"),
                                             ("default", "hw:0,0")])
def test_the_configured_microphone_is_the_one_marked(tmp_path, setting, marked):
    mic = prereqs.microphone(fake_board(tmp_path), setting)
    assert mic.ok and mic.found.startswith(marked)
    assert [line for line in mic.lines if line.startswith("*")] == [
        next(line for line in mic.lines if line.startswith(f"* {marked}"))]


MISSING = {
    "not an rk3576": (dict(soc="rockchip,rk3588"), "board", "built for the RK3576"),
    "driver unreadable": (dict(driver=None), "NPU driver", "sudo cat /sys/kernel/debug/rknpu/version"),
    "driver too old": (dict(driver="RKNPU driver: v0.9.6\n"), "NPU driver", "older than 0.9.8"),
    "no librknnrt": (dict(rknnrt=None), "librknnrt", "it comes with the board image"),
    "models of another toolkit": (dict(sidecar="2.5.0"), "librknnrt",
                                  "matcha-t32.rknn built with 2.5.0: rebuild them with ./install.sh --profile board"),
    "no librkllmrt": (dict(rkllmrt=None), "librkllmrt", "rkllm-runtime/Linux/librkllm_api/aarch64/librkllmrt.so"),
    "unsupported librkllmrt": (dict(rkllmrt="1.2.0"), "librkllmrt", "1.2.0 has another RKLLMInput"),
    "no microphone": (dict(pcm=PCM.replace(" : capture 1", "")), "input", "plug in a microphone"),
    "no speaker": (dict(pcm="01-00: USB Audio : USB Audio : capture 1\n"), "output", "connect a speaker"),
    "little memory": (dict(meminfo="MemTotal: 3982012 kB\nMemAvailable: 512000 kB\n"), "memory",
                      "sudo systemctl stop rkvoice"),
    "little disk": (dict(free_mb=900), "disk", "free space there"),
    "no PortAudio": (dict(libraries=()), "input", "sudo apt-get install libportaudio2"),
    "no aplay, no PortAudio": (dict(libraries=(), programs=("arecord",)), "input", "libportaudio2"),
}


@pytest.mark.parametrize("case", list(MISSING))
def test_each_missing_piece_is_one_line_naming_its_fix(tmp_path, case):
    kwargs, what, fix = MISSING[case]
    items = prereqs.report(fake_board(tmp_path, **kwargs))
    bad = [it for it in items if not it.ok]
    if case == "no aplay, no PortAudio":  # the microphone and the speaker both lack their backend
        assert [it.what for it in bad] == ["input", "output"]
        assert bad[1].fix == ("sudo apt-get install alsa-utils (arecord, aplay) or sudo apt-get install "
                              "libportaudio2 (sounddevice plays and records through PortAudio)")
        bad = bad[:1]
    assert [it.what for it in bad] == [what], [str(it) for it in bad]
    assert fix in bad[0].fix
    text = prereqs.render(items)
    line = next(x for x in text.splitlines() if x.startswith(f"  [MISS] {what}"))
    assert fix in line  # the piece and its fix, on one line


def test_the_input_backend_decides_what_the_microphone_needs(tmp_path):
    roots = fake_board(tmp_path, libraries=(), programs=())
    assert "or set audio.input: arecord" in prereqs.microphone(roots, "default", "sounddevice").fix
    assert prereqs.microphone(roots, "default", "arecord").fix == "sudo apt-get install alsa-utils (arecord, aplay)"
    assert prereqs.microphone(replace(roots, program=lambda n: True), "default", "arecord").ok


def test_the_rkllm_abi_setting_is_judged_against_the_runtime(tmp_path):
    item = prereqs.librkllmrt(fake_board(tmp_path, rkllmrt="1.3.0"), abi="1.2")
    assert not item.ok and 'set llm.rkllm_abi: "1.3"' in item.fix


def test_a_configured_device_that_is_not_there_names_the_key(tmp_path):
    mic = prereqs.microphone(fake_board(tmp_path), "hw:5,0")
    assert not mic.ok and "audio.input_device 'hw:5,0' matches none of them" in mic.fix and len(mic.lines) == 2


def test_check_on_a_board_without_its_llm_shows_the_board_and_the_llm_missing(tmp_path):
    """--check, board profile, fake board: the prerequisites are a stage of their own, the LLM is
    missing with its recipe, and neither stops the pipeline's verdict on its own."""
    roots = fake_board(tmp_path, pcm=PCM.replace(" : capture 1", ""))
    cfg = Config(models=ModelsConfig(dir=str(tmp_path / "models"), profile="board"))
    probe = replace(check.PROBE, sound_output=lambda: None, microphone=lambda: False)
    out = io.StringIO()
    check.run_check(cfg, out, Path("/nonexistent"), probe, roots)
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[1] == "[MISS] board Radxa ROCK 4D, rockchip,rk3576"
    assert "         - input: none: no capture device: plug in a microphone (USB or the board's codec), then " \
           "arecord -l" in lines
    assert "         . kernel: 6.1.99-rk3576" in lines
    assert "[MISS] llm   rkllm" in lines
    (step,) = [x for x in lines if "next step:" in x]
    assert "models/convert_rkllm.py" in step and "./install.sh --profile board --rkllm FILE_OR_HTTPS_URL" in step
    checks = {c.stage: c for c in check.check_pipeline(cfg, Path("/x"), probe, roots)}
    assert checks["llm"].ok and checks["board"].ok  # missing, not failing


def test_the_module_prints_the_report_and_exits_1_when_a_piece_is_missing(tmp_path, capsys, monkeypatch):
    roots = fake_board(tmp_path, rkllmrt=None)
    monkeypatch.setattr(prereqs, "Roots", lambda install: replace(roots, install=install))
    assert prereqs.main(["--root", str(roots.install)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("board prerequisites:\n") and out.rstrip().endswith("missing: librkllmrt (each with its fix above)")
