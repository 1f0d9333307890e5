"""What ``--check`` says about Home Assistant: reachable with the token or not, its version, and how
many entities it exposes to Assist (the ones home commands can name)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from rkvoice.config import Config
from rkvoice.home.client import HaClient, HomeFailure
from rkvoice.home.route import WS_TIMEOUT_S
from rkvoice.home.ws import HaSocket, WsError

log = logging.getLogger(__name__)


@dataclass
class HomeStatus:
    where: str
    version: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def home_status(cfg: Config) -> HomeStatus:
    """Ask the configured HA (``home_assistant.url`` set) over REST and its websocket."""
    ha = cfg.home_assistant
    client = HaClient(ha.url, ha.token_path(cfg.state.path), ha.timeout_s, ha.language)
    status = HomeStatus(client.where)
    try:
        got = client.get("/api/config")
        status.version = str(got.get("version", "")) if isinstance(got, dict) else ""
        if not status.version:
            status.problems.append(f"{client.where}/api/config names no version: is home_assistant.url Home Assistant?")
            return status
        with HaSocket(ha.url, client.token(), max(WS_TIMEOUT_S, ha.timeout_s)) as sock:
            exposed = sock.call("homeassistant/expose_entity/list").get("exposed_entities", {})
        count = sum(1 for v in exposed.values() if isinstance(v, dict) and v.get("conversation"))
        status.notes.append(f"{count} entities exposed to Assist" + ("" if count else
                            ": expose the devices to name (Settings -> Voice assistants -> Expose)"))
    except HomeFailure as failure:
        status.problems.append(failure.message + "; until then questions go to the LLM")
    except WsError as exc:
        status.notes.append(f"exposed entities not read over the websocket ({exc})")
    finally:
        client.close()
    return status
