"""Device status from /sys and /proc: temperatures, memory, uptime, load. Values a machine does
not have (no NPU zone on a PC, no thermal zones in a container) are left out, never invented."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.match import has_any
from rkvoice.text.spoken_numbers import cn_count, cn_dec, cn_int

log = logging.getLogger(__name__)

NAME = "device"

# thermal zone "type" substrings -> spoken label, in the order they are reported
ZONE_LABELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("芯片", ("soc", "acpitz", "x86_pkg_temp", "package")),
    ("处理器", ("bigcore", "littlecore", "cpu", "coretemp", "core")),
    ("神经网络处理器", ("npu",)),
    ("图形处理器", ("gpu",)),
    ("内存芯片", ("ddr",)),
)

TEMP_WORDS = ("温度", "多少度", "几度", "多热", "烫不烫", "热不热", "发热", "发烫")
NOT_DEVICE_TEMP = ("天气", "气温", "外面", "室外", "体温", "水温", "明天", "最高", "最低")
MEM_WORDS = ("内存",)
UPTIME_WORDS = ("运行多久", "运行了多久", "开机多久", "开机多长时间", "运行时间", "开了多久", "运行多长时间",
                "开机时间", "开了多长时间")
LOAD_WORDS = ("负载", "cpu占用", "处理器占用", "忙不忙", "cpu使用率")
STATUS_WORDS = ("系统状态", "设备状态", "运行状态", "机器状态", "状态怎么样", "状态如何", "系统信息", "设备信息")


def temperature_text(ctx: ToolContext) -> str | None:
    """The hottest zone of each labelled group, in ZONE_LABELS' order."""
    best: dict[str, float] = {}
    for zone in sorted((ctx.sys_root / "class" / "thermal").glob("thermal_zone*")):
        try:
            zone_type = (zone / "type").read_text().strip().lower()
            milli = int((zone / "temp").read_text().strip())
        except (OSError, ValueError):
            continue
        label = next((label for label, keys in ZONE_LABELS if any(k in zone_type for k in keys)), None)
        if label is None or milli <= -273000:
            continue
        best[label] = max(best.get(label, -1e9), milli / 1000.0)
    return "，".join(f"{label}{cn_dec(round(best[label], 1))}度" for label, _ in ZONE_LABELS if label in best) or None


def memory_text(ctx: ToolContext) -> str | None:
    try:
        text = (ctx.proc_root / "meminfo").read_text()
    except OSError:
        return None
    mem = {key: int(kb) for key, kb in re.findall(r"^(MemTotal|MemAvailable):\s*(\d+)", text, re.MULTILINE)}
    if "MemTotal" not in mem:
        return None
    available = f"，可用{cn_int(mem['MemAvailable'] // 1024)}兆" if "MemAvailable" in mem else ""
    return f"内存共{cn_int(mem['MemTotal'] // 1024)}兆{available}"


def _first_number(path: Path) -> float | None:
    """The first field of /proc/uptime or /proc/loadavg."""
    try:
        return float(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def spoken_duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    days, rem = divmod(minutes, 24 * 60)
    hours, mins = divmod(rem, 60)
    text = (f"{cn_count(days)}天" if days else "") + (f"{cn_count(hours)}小时" if hours else "")
    if mins or not text:
        text += f"{cn_count(mins)}分钟"
    return text


def uptime_text(ctx: ToolContext) -> str | None:
    up = _first_number(ctx.proc_root / "uptime")
    return None if up is None else f"已经运行了{spoken_duration(up)}"


def load_text(ctx: ToolContext) -> str | None:
    load = _first_number(ctx.proc_root / "loadavg")
    return None if load is None else f"一分钟平均负载{cn_dec(round(load, 2))}"


_ASKS = ((TEMP_WORDS, temperature_text), (MEM_WORDS, memory_text), (UPTIME_WORDS, uptime_text),
         (LOAD_WORDS, load_text))


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    if len(text) > 20:
        return None
    status = has_any(text, STATUS_WORDS)  # all of them
    wanted = [fn for words, fn in _ASKS if status or has_any(text, words)
              and not (fn is temperature_text and has_any(text, NOT_DEVICE_TEMP))]
    if not wanted:
        return None
    parts = [p for p in (fn(ctx) for fn in wanted) if p]
    if not parts:
        what = "温度" if wanted == [temperature_text] else "这项信息"
        return ToolAnswer(NAME, f"这台设备上读不到{what}。")
    return ToolAnswer(NAME, "，".join(parts) + "。")
