"""IP addresses of this device (IPv4, loopback left out), read with ioctl: no extra packages."""

from __future__ import annotations

import fcntl
import socket
import struct

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.match import has_any
from rkvoice.text.spoken_numbers import cn_digits

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


_LABELS = ((("wlan", "wlp", "wl"), "无线网"), (("eth", "enp", "eno", "ens", "en", "end"), "有线网"),
           (("usb", "rndis"), "USB网络"), (("docker", "br", "veth", "virbr"), "虚拟网卡"))


def interface_label(name: str) -> str:
    return next((label for prefixes, label in _LABELS if name.startswith(prefixes)), "网卡")


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    if not has_any(text, IP_WORDS) or len(text) > 20:
        return None
    addrs = ip_addresses()
    if not addrs:
        return ToolAnswer(NAME, "现在没有联网，没有网络地址。")
    parts = [f"{interface_label(n)}{cn_digits(a)}" for n, a in addrs]
    return ToolAnswer(NAME, "本机地址：" + "；".join(parts) + "。")
