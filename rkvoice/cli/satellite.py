"""``assistant.py --satellite URI``: the board as a Home Assistant Assist satellite on the microphone,
until Ctrl-C or SIGTERM; with ``--file WAV`` one request from a recording played as the microphone
(``--out`` keeps what was played: HA's reply)."""

from __future__ import annotations

import argparse
import logging
import signal
from dataclasses import replace
from types import FrameType

from rkvoice.config import Config

log = logging.getLogger(__name__)


def run_satellite(uri: str, args: argparse.Namespace, cfg: Config) -> int:
    from rkvoice.endpoint import parse_uri
    from rkvoice.satellite.file_mode import serve_file
    from rkvoice.satellite.run import Satellite, board_vad
    from rkvoice.stages import Hear, Speak

    cfg = replace(cfg, satellite=replace(cfg.satellite, uri=uri))  # checked as satellite.uri is
    logging.getLogger("rkvoice").setLevel(logging.DEBUG if getattr(args, "verbose", False) else logging.INFO)
    if getattr(args, "file", None):
        run = serve_file(cfg, uri, args.file, getattr(args, "out", None), ready=lambda sat: print(
            f"satellite on tcp://{parse_uri(uri).host}:{sat.link.port}: waiting for Home Assistant to connect",
            flush=True))
        reply_s = run.reply.audio_s if run.reply is not None else 0.0
        print(f"satellite: Home Assistant heard {run.transcript!r}; its reply ({reply_s:.2f} s) played"
              + (f" and was written to {args.out}" if getattr(args, "out", None) else ""), flush=True)
        return 0
    from rkvoice.hear.sources import microphone
    from rkvoice.stages import daemon_player

    hear, speak = Hear(cfg), Speak(cfg, player=daemon_player)
    hear.load()
    speak.load()
    from rkvoice.esphome import link_for

    sat = Satellite(cfg, hear, speak, uri=uri, segmenter=board_vad(cfg), link=link_for(cfg))
    add = ("ESPHome, this host and port " + str(cfg.satellite.esphome.port) if cfg.satellite.protocol == "esphome"
           else "Wyoming Protocol, this host and port")

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping the satellite", signal.Signals(signum).name)
        sat.interrupt()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        sat.start()
        print(f"satellite on {uri}: add it in Home Assistant (Settings > Devices & services > Add integration > "
              f"{add}); Ctrl-C stops", flush=True)
        sat.run(microphone(cfg))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sat.close()
        speak.close()
        hear.close()
    return 0
