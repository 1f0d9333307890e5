"""What the satellite says of itself: the ``info`` answer to ``describe`` (the satellite alone, so Home
Assistant adds the device as a satellite), the wake phrase's name in ``detection``, and ``--check``'s
line on ``satellite.uri``."""

from __future__ import annotations

from wyoming.info import Attribution, Info, Satellite

from rkvoice import __version__
from rkvoice.config import Config
from rkvoice.endpoint import parse_uri


def satellite_info(cfg: Config) -> Info:
    """The ``info`` answer: the satellite alone (HA reads its name, area and ``installed``)."""
    s = cfg.satellite
    return Info(satellite=Satellite(
        name=s.name, area=s.area or None, attribution=Attribution(name="rkvoice", url=""), installed=True,
        description=f"rkvoice satellite (wake phrase {cfg.hear.wake_phrase})", version=__version__,
        has_vad=True, active_wake_words=[wake_word(cfg)], max_active_wake_words=1, supports_trigger=False))


def wake_word(cfg: Config) -> str:
    """The wake phrase's name in ``detection``: its pinyin, no spaces or tones (as the Wyoming server's)."""
    from pypinyin import lazy_pinyin

    return "".join(lazy_pinyin(cfg.hear.wake_phrase)) or "wake"


def port_note(cfg: Config) -> str:
    """``--check``'s line on ``satellite.uri``: whether its port can be bound now."""
    ep = parse_uri(cfg.satellite.uri)
    return bind_note(ep.host, ep.port, f"add it in Home Assistant (Wyoming Protocol, this host and port) as satellite "
                     f"{cfg.satellite.name!r}" + (f" in area {cfg.satellite.area!r}" if cfg.satellite.area else ""))


def bind_note(host: str, port: int, add: str) -> str:
    """Whether ``host:port`` can be bound now; ``add`` follows when it can (how HA adds the device)."""
    import socket

    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            return (f"tcp://{host}:{port} cannot be bound now ({exc.strerror or exc}): the running daemon "
                    "holds it, or another program does (then pick a free port)")
    return f"tcp://{host}:{port} is free; {add}"
