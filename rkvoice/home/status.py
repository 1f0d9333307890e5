"""What ``--check`` says about Home Assistant: reachable with the token or not, its version, how many
entities it exposes to Assist (the ones home commands can name), and how many names of the home
(``vocab``) the assistant has and from when: read now, or the cache when HA cannot be read."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from rkvoice.config import Config
from rkvoice.home.client import HaClient, HomeFailure
from rkvoice.home.route import WS_TIMEOUT_S
from rkvoice.home.vocab import fetch_vocabulary
from rkvoice.home.ws import HaSocket, WsError
from rkvoice.home_names import CACHE_FILE, Vocabulary, read_cache

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
    read: Vocabulary | None = None
    try:
        got = client.get("/api/config")
        status.version = str(got.get("version", "")) if isinstance(got, dict) else ""
        if not status.version:
            status.problems.append(f"{client.where}/api/config names no version: is home_assistant.url Home Assistant?")
            return status
        with HaSocket(ha.url, client.token(), max(WS_TIMEOUT_S, ha.timeout_s)) as sock:
            read = fetch_vocabulary(sock, ha.url)
        count = read.entities
        status.notes.append(f"{count} entities exposed to Assist" + ("" if count else
                            ": expose the devices to name (Settings -> Voice assistants -> Expose)"))
    except HomeFailure as failure:
        status.problems.append(failure.message + "; until then questions go to the LLM")
    except (WsError, AttributeError, TypeError) as exc:
        status.notes.append(f"exposed entities not read over the websocket ({exc})")
    finally:
        client.close()
    status.notes.append(names_note(read, cfg.state.path / CACHE_FILE, ha.url))
    return status


def names_note(read: Vocabulary | None, cache: Path, url: str) -> str:
    """How many names of the home commands are corrected towards, and from when."""
    if read is not None:
        kinds = ", ".join(f"{len(v)} {k}" for k, v in read.names.items() if v)
        return f"{read.count()} home names read now ({kinds or 'none'})"
    cached = read_cache(cache, url)
    if cached is None:
        return f"no home names: none read from Home Assistant and none cached in {cache}; spoken names go uncorrected"
    return f"{cached.count()} home names cached from {cached.when()} (Home Assistant not read now)"
