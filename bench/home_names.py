"""Spoken home commands with and without the home's names (rkvoice.home.vocab + correct), read back
from the real Home Assistant (tests/ha_home.py, 2026.2.3).

    py312/bin/python -m bench.home_names [--voices fastspeech2] [--out home_names.json] [-v]

The test home: ``DEVICES``, 24 entities (lights, switches, fans, covers, climates) in 7 rooms, names
and aliases of two to five characters, some sharing syllables with common words (电视, 台灯, 筒灯).
Each command (打开/关闭 a device or its alias, 关闭<room>的灯, <climate>调到<N>度) is said by every
installed Chinese voice and heard by the portable ASR (Whisper base); the device is first set to
the other state, then the command is carried out or not as read back from HA:

- ``typed``: the command as written, sent to HA's agent (what HA can do at all; only these count);
- path ``local``: the home route (``HomeRoute.ask``: the microphone, ``--file`` and daemon path);
- path ``satellite``: the transcript rkvoice-asr returns, as HA's agent receives it (the satellite
  and HA's own pipelines), sent to HA's conversation API;

each ``without`` the vocabulary (the transcript as heard), ``with`` it (heard with the names as
Whisper's hotwords, then corrected) and corrected without the hotwords (``carried_out_corrected_unbiased``).
``match_p90_ms``: the matcher's cost per transcript with 2,000 names (every transcript heard here and
the assistant's own questions, 5 times each). ``sweep``: for thresholds per syllable, the share of
transcripts (both kinds) whose command is whole after the correction, the rewrites naming something
not said, commands naming what the home does not have rewritten, the assistant's own questions changed (the
threshold of docs/decisions/0012-home-names.md).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.config import HomeAssistantConfig, load_config
from rkvoice.home.client import HaClient
from rkvoice.home.correct import NameMatcher, clean
from rkvoice.home.route import HomeRoute
from rkvoice.home.vocab import HomeNames
from rkvoice.turn import Turn
from tests.ha_home import Device, HomeHa, home_ha
from tests.support.report import bench_run

log = logging.getLogger("bench.home_names")

DEVICES = [
    Device("light", "客厅吊灯", "客厅", ("大灯",)), Device("light", "筒灯", "客厅"), Device("switch", "电视", "客厅"),
    Device("cover", "客厅窗帘", "客厅"), Device("climate", "客厅空调", "客厅"),
    Device("light", "主卧台灯", "主卧", ("床头灯",)), Device("climate", "主卧空调", "主卧"),
    Device("cover", "主卧窗帘", "主卧"),
    Device("light", "次卧灯", "次卧"), Device("fan", "次卧风扇", "次卧"), Device("switch", "加湿器", "次卧"),
    Device("light", "小夜灯", "次卧"),
    Device("light", "书房台灯", "书房", ("护眼灯",)), Device("switch", "打印机", "书房"), Device("fan", "落地扇", "书房"),
    Device("light", "厨房灯", "厨房"), Device("switch", "油烟机", "厨房"), Device("switch", "热水壶", "厨房"),
    Device("light", "阳台灯", "阳台"), Device("cover", "晾衣架", "阳台"), Device("switch", "洗衣机", "阳台"),
    Device("fan", "排气扇", "卫生间"), Device("light", "镜前灯", "卫生间"), Device("switch", "热水器", "卫生间"),
]
TEMPERATURES = {"客厅空调": (25, "二十五"), "主卧空调": (26, "二十六")}
AREA_LIGHTS = ("主卧", "书房", "卫生间")
"""Rooms commanded by area (关闭<room>的灯)."""
ROOMS_2000 = ("客厅", "主卧", "次卧", "书房", "厨房", "阳台", "卫生间", "餐厅", "玄关", "走廊", "儿童房", "老人房", "衣帽间",
              "储藏室", "车库", "花园", "阁楼", "地下室", "健身房", "影音室", "茶室", "洗衣房", "客房", "保姆房", "露台",
              "一楼", "二楼", "三楼", "东屋", "西屋", "南屋", "北屋", "前院", "后院", "门厅", "楼梯", "过道", "天台", "工作室",
              "琴房")
DEVICES_2000 = ("灯", "台灯", "吊灯", "筒灯", "射灯", "灯带", "夜灯", "壁灯", "空调", "风扇", "窗帘", "纱帘", "电视", "音箱",
                "插座", "开关", "加湿器", "除湿机", "净化器", "热水器", "地暖", "暖气", "新风", "排气扇", "油烟机", "冰箱",
                "洗衣机", "烘干机", "扫地机", "投影仪", "电脑", "路由器", "摄像头", "门锁", "窗户", "水壶", "电饭煲", "烤箱",
                "微波炉", "咖啡机", "饮水机", "鱼缸", "香薰机", "晾衣架", "镜前灯", "浴霸", "马桶", "电热毯", "落地灯", "书桌灯")


@dataclass(frozen=True)
class Command:
    said: str
    """As the voice says it (numbers in words)."""
    typed: str
    """As typed (HA's own sentence)."""
    names: tuple[str, ...]
    """The names of the home in it (for the sweep)."""
    targets: tuple[tuple[str, str, Any], ...]
    """(entity_id, "state" or "temperature", the expected value)."""
    before: tuple[tuple[str, str, Any], ...]
    """The same, set before the command (the other state)."""


def commands(ha: HomeHa) -> list[Command]:
    out = []
    on_off = {"light": ("on", "off"), "switch": ("on", "off"), "fan": ("on", "off"), "cover": ("open", "closed")}
    for d in DEVICES:
        eid = ha.devices[d.name]
        if d.domain == "climate":
            value, words = TEMPERATURES[d.name]
            out.append(Command(f"{d.name}调到{words}度", f"{d.name}调到{value}度", (d.name,),
                               ((eid, "temperature", value),), ((eid, "temperature", 20),)))
            continue
        on, off = on_off[d.domain]
        for name in (d.name, *d.aliases):
            out.append(Command(f"打开{name}", f"打开{name}", (name,), ((eid, "state", on),), ((eid, "state", off),)))
        out.append(Command(f"关闭{d.name}", f"关闭{d.name}", (d.name,), ((eid, "state", off),), ((eid, "state", on),)))
    for area in AREA_LIGHTS:
        lights = [ha.devices[d.name] for d in DEVICES if d.area == area and d.domain == "light"]
        out.append(Command(f"关闭{area}的灯", f"关闭{area}的灯", (area,), tuple((e, "state", "off") for e in lights),
                           tuple((e, "state", "on") for e in lights)))
    return out


def set_state(ha: HomeHa, eid: str, what: str, value: Any) -> None:
    domain = eid.split(".")[0]
    if what == "temperature":
        ha.rest("POST", "/api/services/climate/set_temperature", {"entity_id": eid, "temperature": value})
    elif domain == "cover":
        ha.rest("POST", f"/api/services/cover/{'open_cover' if value == 'open' else 'close_cover'}", {"entity_id": eid})
    else:
        ha.rest("POST", f"/api/services/{domain}/{'turn_on' if value == 'on' else 'turn_off'}", {"entity_id": eid})


def reads(ha: HomeHa, targets: tuple[tuple[str, str, Any], ...], wait_s: float = 1.5) -> bool:
    """Every target reads its value (polled for ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        states = {eid: ha.state(eid) for eid, _, _ in targets}
        ok = all((states[e]["state"] if w == "state" else states[e]["attributes"].get("temperature")) == v
                 for e, w, v in targets)
        if ok or time.monotonic() > deadline:
            return ok
        time.sleep(0.1)


def carried_out(ha: HomeHa, command: Command, send: Any) -> bool:
    """Set the other state, send, read back."""
    for eid, what, value in command.before:
        set_state(ha, eid, what, value)
    if not reads(ha, command.before, 3.0):
        raise RuntimeError(f"HA did not take the state before {command.typed!r}")
    send()
    return reads(ha, command.targets)


def hear_all(voices: list[str], said: list[str], bias: list[str]) -> dict[str, dict[str, tuple[str, str]]]:
    """voice -> said -> (transcript, transcript with the names as hotwords): the voice at 16 kHz, Whisper base."""
    import soxr

    from rkvoice.hear.whisper_asr import WhisperAsr
    from rkvoice.tts.registry import create_tts

    cfg = load_config()
    asr = WhisperAsr(cfg)
    asr.load()
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for name in voices:
        tts = create_tts(cfg, name)
        tts.load()
        out[name] = {}
        for text in said:
            audio, rate = tts.generate(text)
            audio = soxr.resample(np.asarray(audio, np.float32), rate, 16000).astype(np.float32)
            pad = np.zeros(8000, np.float32)
            samples = np.concatenate([pad, audio, pad])
            asr.bias([])
            plain = asr.transcribe(samples)
            asr.bias(bias)
            out[name][text] = (plain, asr.transcribe(samples))
            log.info("%s: %r heard %r, biased %r", name, text, *out[name][text])
    return out


def match_p90_ms(texts: list[str]) -> tuple[float, int]:
    names = [room + device for room in ROOMS_2000 for device in DEVICES_2000]
    matcher = NameMatcher(names)
    took = []
    for _ in range(5):
        for text in texts:
            t0 = time.perf_counter()
            matcher.correct(text)
            took.append((time.perf_counter() - t0) * 1000.0)
    return round(float(np.percentile(took, 90)), 3), len(matcher)


def absent_commands(names: frozenset[str]) -> list[str]:
    """Commands naming what the home does not have (2,000-odd room + device names, devices, rooms)."""
    out = [f"打开{r}{d}" for r in ROOMS_2000 for d in DEVICES_2000 if r + d not in names]
    return out + [f"打开{d}" for d in DEVICES_2000 if d not in names] + \
        [f"关闭{r}的灯" for r in ROOMS_2000 if r not in names]


def sweep(names: frozenset[str], heard: list[tuple[Command, str]], corpus: list[str]) -> dict[str, Any]:
    """Per threshold: transcripts whose command is whole after the correction, names brought in that
    were not said, commands naming what the home does not have rewritten, own questions changed."""
    absent = absent_commands(names)
    out = {}
    for t in (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5):
        m = NameMatcher(names, t)
        right = wrong = 0
        for command, text in heard:
            fixed = clean(m.correct(text))
            right += clean(command.typed) in fixed
            wrong += any(n in fixed and n not in clean(text) and n not in clean(command.typed) for n in names)
        out[f"{t:g}"] = {"commands_whole": round(right / len(heard), 3), "names_not_said": wrong,
                         "absent_rewritten": sum(m.correct(a) != a for a in absent), "absent": len(absent),
                         "questions_changed": sum(m.correct(q) != q for q in corpus)}
    return out


def main(argv: list[str] | None = None) -> int:
    from rkvoice.tts.registry import installed_voices
    from tests.test_home_names import corpus

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--voices", default="", help="comma-separated voices (default: every installed Chinese voice)")
    args, run = bench_run("home_names", ap, argv)
    cfg = load_config()
    voices = [v for v in args.voices.split(",") if v] or [v.name for v in installed_voices(cfg).values()
                                                           if "zh" in v.languages]
    with tempfile.TemporaryDirectory(prefix="home-names-") as tmp, home_ha(Path(tmp) / "ha", DEVICES) as ha:
        cmds = commands(ha)
        names = HomeNames(ha.base, lambda: ha.token, None)
        assert names.refresh() and names.vocabulary is not None, "the names could not be read from HA"
        heard = hear_all(voices, [c.said for c in cmds], names.vocabulary.all())
        ha_cfg = HomeAssistantConfig(url=ha.base, token_file=str(ha.token_file), timeout_s=10.0)
        client = HaClient(ha.base, ha.token_file, 10.0)
        typed = [c for c in cmds if carried_out(ha, c, lambda c=c: client.converse(c.typed))]
        log.info("typed: %d of %d carried out", len(typed), len(cmds))

        class Unnamed(HomeNames):
            def start(self) -> None:  # never reads HA: the route as it was before the vocabulary
                pass

        routes = {False: HomeRoute(ha_cfg, ha.token_file, names=Unnamed(ha.base, lambda: ha.token, None)),
                  True: HomeRoute(ha_cfg, ha.token_file, names=names)}
        kinds = {"without": (0, False), "corrected": (0, True), "with": (1, True)}
        """kind -> (which transcript: plain or biased, corrected or not)"""
        tables: dict[str, dict[str, dict[str, float]]] = {kind: {} for kind in kinds}
        misses: list[dict[str, str]] = []
        for voice in voices:
            for path in ("local", "satellite"):
                for kind, (biased, fix) in kinds.items():
                    done = 0
                    for c in typed:
                        text = heard[voice][c.said][biased]
                        if path == "local":
                            ok = carried_out(ha, c, lambda text=text, fix=fix: routes[fix].ask(text, Turn()))
                        else:
                            sent = names.correct(text) if fix else text
                            ok = carried_out(ha, c, lambda sent=sent: client.converse(sent))
                        done += ok
                        if not ok and kind == "with":
                            misses.append({"voice": voice, "path": path, "said": c.said, "heard": text,
                                           "corrected": names.correct(text)})
                    tables[kind].setdefault(voice, {})[path] = round(done / len(typed), 3)
        everything = [t for v in heard.values() for pair in v.values() for t in pair]
        p90, count = match_p90_ms(everything + corpus())
        pairs = [(c, heard[v][c.said][i]) for v in voices for c in cmds for i in (0, 1)]
        result = {
            "voices": voices, "entities": len(DEVICES), "rooms": len({d.area for d in DEVICES}),
            "names": len(names.names), "commands": len(cmds), "carried_out_typed": len(typed),
            "carried_out_without": tables["without"], "carried_out_with": tables["with"],
            "carried_out_corrected_unbiased": tables["corrected"], "match_p90_ms": p90, "match_names": count,
            "sweep": sweep(names.names, pairs, corpus()), "misses_with": misses,
            "heard": {v: {c.said: heard[v][c.said] for c in cmds} for v in voices},
        }
        client.close()
        for route in routes.values():
            route.close()
    run.emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
