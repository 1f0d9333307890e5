"""IP addresses of this device (IPv4, loopback left out), read with ioctl: no extra packages."""

from __future__ import annotations

import fcntl
import socket
import struct

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.match import has_any
from rkvoice.text.cn import cn_digits

NAME = "ip"
_SIOCGIFADDR = 0x8915

IP_WORDS = ("ip", "艾批", "爱批", "爱皮", "网络地址", "本机地址", "局域网地址", "内网地址", "联网了吗",
            "有网吗", "连网了吗", "网络连接", "地址是多少")


def ip_addresses() -> list[tuple[str, str]]:
    """(interface, IPv4 address) for every interface that has one, loopback excluded."""
    out: list[tuple[str, str]] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            if name == "lo":
                continue
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # interface without an IPv4 address
            out.append((name, socket.inet_ntoa(packed[20:24])))
    return out


def interface_label(name: str) -> str:
    if name.startswith(("wlan", "wlp", "wl")):
        return "无线网"
    if name.startswith(("eth", "enp", "eno", "ens", "en", "end")):
        return "有线网"
    if name.startswith(("usb", "rndis")):
        return "USB网络"
    if name.startswith(("docker", "br", "veth", "virbr")):
        return "虚拟网卡"
    return "网卡"


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    if not has_any(text, IP_WORDS) or len(text) > 20:
        return None
    lister = ctx.extra.get("ip_addresses", ip_addresses)
    addrs = lister()  # type: ignore[operator]
    if not addrs:
        return ToolAnswer(NAME, "现在没有联网，没有网络地址。")
    parts = [f"{interface_label(n)}{cn_digits(a)}" for n, a in addrs]
    return ToolAnswer(NAME, "本机地址：" + "；".join(parts) + "。")
