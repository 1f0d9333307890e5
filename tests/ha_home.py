"""A real Home Assistant with a home in it, for the home-route and satellite tests (shared harness).

API::

    from tests.ha_home import HOME, HomeHa, home_ha, require_ha_venv

    require_ha_venv()                        # pytest.skip naming how to build the venv, when it is missing
    with home_ha(work_dir) as ha:            # HA started, onboarded, home built; stopped on exit
        ha.base                              # "http://127.0.0.1:PORT" (internal_url is the same)
        ha.token, ha.token_file              # a long-lived access token, and a chmod-600 file holding it
        ha.light, ha.thermostat              # entity ids of HOME.light and HOME.thermostat
        ha.state(ha.light)                   # {"state": "on", "attributes": {...}} (REST /api/states)
        ha.wait_state(ha.light, "on")        # the state once it reads "on" (AssertionError after 10 s)
        with ha.ws() as sock: sock.call(type, **fields)   # an authenticated websocket (rkvoice.home.ws)
        entry = ha.add_wyoming("127.0.0.1", port)         # a Wyoming config entry (HA's config flow), its result
        ents = ha.wyoming_entities(entry["entry_id"], n)  # {domain: entity_id} of that entry, once n exist
        ha.set_pipeline(stt_engine=..., tts_engine=..., ...)  # fields of HA's preferred pipeline
        ha.log()                             # the tail of HA's log (for assertion messages)
        ha.stop()                            # stop HA now (the tests of a dead HA); idempotent

``HOME`` holds the names the home is built with (light 客厅灯 with alias 大灯 in area 客厅, thermostat
空调); set RKVOICE_HA_LIGHT / _ALIAS / _AREA / _THERMOSTAT to build it with other names: the product
knows none of them. HA is 2026.2.3 from the venv tests/test_ha_e2e.py builds, run with the same launcher
(its Python 3.13.0 under HA's declared 3.13.2), core language zh-Hans, internal_url set (announcements
carry audio only then), onboarded over REST, the token made over the websocket, both entities in the
entity registry (unique_id) with area and alias, exposed to Assist.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rkvoice.home.ws import HaSocket
from tests.support.net import free_port
from tests.test_ha_e2e import HA_VENV, HA_VERSION, LAUNCH, venv_ready


@dataclass(frozen=True)
class Names:
    light: str = os.environ.get("RKVOICE_HA_LIGHT", "客厅灯")
    alias: str = os.environ.get("RKVOICE_HA_ALIAS", "大灯")
    area: str = os.environ.get("RKVOICE_HA_AREA", "客厅")
    thermostat: str = os.environ.get("RKVOICE_HA_THERMOSTAT", "空调")


HOME = Names()
START_S = 240.0
PASSWORD = "rkvoice-home-pass"

CONFIGURATION = """homeassistant:
  name: rkvoice-home
  language: zh-Hans
  country: CN
  time_zone: Asia/Shanghai
  unit_system: metric
  internal_url: "{base}"
http:
  server_host: 127.0.0.1
  server_port: {port}
api:
config:
onboarding:
conversation:
intent:
assist_pipeline:
stt:
tts:
wake_word:
ffmpeg:
  ffmpeg_bin: {ffmpeg}
logger:
  default: warning
input_boolean:
  light_power:
    name: light power
  heater_power:
    name: heater power
input_number:
  room_temperature:
    name: room temperature
    min: 0
    max: 40
    initial: 20
template:
  - light:
      - name: {light}
        unique_id: rkvoice_home_light
        state: "{{{{ is_state('input_boolean.light_power', 'on') }}}}"
        turn_on:
          action: input_boolean.turn_on
          target:
            entity_id: input_boolean.light_power
        turn_off:
          action: input_boolean.turn_off
          target:
            entity_id: input_boolean.light_power
    sensor:
      - name: room temperature sensor
        unique_id: rkvoice_home_room_temperature
        unit_of_measurement: "°C"
        device_class: temperature
        state: "{{{{ states('input_number.room_temperature') }}}}"
climate:
  - platform: generic_thermostat
    name: {thermostat}
    unique_id: rkvoice_home_thermostat
    heater: input_boolean.heater_power
    target_sensor: sensor.room_temperature_sensor
    min_temp: 16
    max_temp: 30
    target_temp: 22
    precision: 1.0
"""


def require_ha_venv() -> None:
    if not venv_ready():
        pytest.skip(f"no Home Assistant {HA_VERSION} venv at {HA_VENV}: build it once with "
                    "`py312/bin/python tests/test_ha_e2e.py --build-venv` (about 2 minutes, needs PyPI)")


@dataclass
class HomeHa:
    base: str
    work: Path
    process: subprocess.Popen[bytes]
    token: str = ""
    token_file: Path = field(default_factory=Path)
    light: str = ""
    thermostat: str = ""
    devices: dict[str, str] = field(default_factory=dict)

    # -- REST --------------------------------------------------------------------------------------------
    def rest(self, method: str, path: str, body: Any = None, token: str | None = None, form: bool = False) -> Any:
        data = None
        headers = {"Authorization": f"Bearer {token or self.token}"} if (token or self.token) else {}
        if body is not None:
            data = urllib.parse.urlencode(body).encode() if form else json.dumps(body).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded" if form else "application/json"
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path}: HTTP {exc.code} {exc.read()[:300]!r}") from exc
        return json.loads(raw) if raw else None

    def state(self, entity_id: str) -> dict[str, Any]:
        got = self.rest("GET", f"/api/states/{entity_id}")
        return {"state": got["state"], "attributes": got["attributes"]}

    def wait_state(self, entity_id: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.state(entity_id)
            if got["state"] == state or time.monotonic() > deadline:
                assert got["state"] == state, f"{entity_id} reads {got['state']!r}, not {state!r}"
                return got
            time.sleep(0.1)

    def log(self, chars: int = 3000) -> str:
        return (self.work / "ha.log").read_text(errors="replace")[-chars:]

    # -- websocket ---------------------------------------------------------------------------------------
    def ws(self, token: str | None = None) -> HaSocket:
        return HaSocket(self.base, token or self.token, 30.0)

    def add_wyoming(self, host: str, port: int) -> dict[str, Any]:
        """Add a Wyoming service (or satellite) at host:port through HA's config flow; the flow's result
        (``type`` "create_entry" and ``result`` the entry with ``entry_id`` when HA accepted it)."""
        flow = self.rest("POST", "/api/config/config_entries/flow", {"handler": "wyoming"})
        got = self.rest("POST", f"/api/config/config_entries/flow/{flow['flow_id']}", {"host": host, "port": port})
        assert got.get("type") == "create_entry", f"the wyoming flow ended with {got}"
        return {"entry_id": got["result"]["entry_id"], **got}

    def wyoming_entities(self, entry_id: str, count: int, timeout: float = 30.0) -> dict[str, str]:
        """{domain: entity_id} of the config entry's entities, once ``count`` of them exist."""
        deadline = time.monotonic() + timeout
        with self.ws() as sock:
            while True:
                found = {e["entity_id"].split(".")[0]: e["entity_id"] for e in sock.call("config/entity_registry/list")
                         if e.get("config_entry_id") == entry_id}
                if len(found) >= count or time.monotonic() > deadline:
                    assert len(found) >= count, f"entry {entry_id} has {found} after {timeout} s\n{self.log()}"
                    return found
                time.sleep(0.2)

    def set_pipeline(self, **fields: Any) -> dict[str, Any]:
        """Change fields of HA's preferred pipeline (stt_engine, tts_engine, conversation_engine, ...)."""
        with self.ws() as sock:
            listed = sock.call("assist_pipeline/pipeline/list")
            pipeline = next(p for p in listed["pipelines"] if p["id"] == listed["preferred_pipeline"])
            keep = {k: v for k, v in pipeline.items() if k != "id"}
            return dict(sock.call("assist_pipeline/pipeline/update", pipeline_id=pipeline["id"], **{**keep, **fields}))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _onboard(ha: HomeHa) -> str:
    """The owner (zh-Hans) over REST; a long-lived token made over the websocket."""
    client = ha.base + "/"
    user = ha.rest("POST", "/api/onboarding/users", {"client_id": client, "name": "rkvoice", "username": "rkvoice",
                                                    "password": PASSWORD, "language": "zh-Hans"}, token="")
    tokens = ha.rest("POST", "/auth/token", {"grant_type": "authorization_code", "code": user["auth_code"],
                                             "client_id": client}, token="", form=True)
    with ha.ws(tokens["access_token"]) as sock:
        return str(sock.call("auth/long_lived_access_token", client_name="rkvoice-tests", lifespan=1))


def _named(sock: HaSocket, wanted: set[tuple[str, str]], timeout: float = 60.0) -> dict[tuple[str, str], str]:
    """{(domain, friendly name): entity_id} of HA's states, once every ``wanted`` one exists (its
    platforms, the thermostat's among them, may still be setting up after onboarding)."""
    deadline = time.monotonic() + timeout
    while True:
        named = {(s["entity_id"].split(".")[0], s["attributes"].get("friendly_name")): s["entity_id"]
                 for s in sock.call("get_states")}
        if wanted <= named.keys() or time.monotonic() > deadline:
            return named
        time.sleep(0.2)


def _build_home(ha: HomeHa) -> None:
    """Area and alias on the light, both entities exposed to Assist (by the names in HOME)."""
    with ha.ws() as sock:
        named = _named(sock, {("light", HOME.light), ("climate", HOME.thermostat)})
        ha.light = named.get(("light", HOME.light), "")
        ha.thermostat = named.get(("climate", HOME.thermostat), "")
        assert ha.light and ha.thermostat, f"no light {HOME.light} / climate {HOME.thermostat} in {sorted(named)}\n" \
                                           + ha.log()
        areas = {a["name"]: a["area_id"] for a in sock.call("config/area_registry/list")}
        area_id = areas.get(HOME.area) or sock.call("config/area_registry/create", name=HOME.area)["area_id"]
        sock.call("config/entity_registry/update", entity_id=ha.light, area_id=area_id, aliases=[HOME.alias])
        sock.call("homeassistant/expose_entity", assistants=["conversation"], entity_ids=[ha.light, ha.thermostat],
                  should_expose=True)


@dataclass(frozen=True)
class Device:
    """One entity of a generated home (``home_ha(work, devices)``): a template light, switch, fan or cover
    (each on an input_boolean of its own) or a generic_thermostat climate, in ``area`` with ``aliases``."""

    domain: str
    name: str
    area: str
    aliases: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return "d" + hashlib.blake2b(f"{self.domain}.{self.name}".encode(), digest_size=4).hexdigest()


def devices_configuration(devices: list[Device]) -> str:
    """The YAML (after ``homeassistant:`` ... ``logger:``) of ``devices``."""
    lines = ["input_boolean:"]
    lines += [f"  {d.key}:\n    name: {d.key}" for d in devices]
    lines += ["input_number:", "  room_temperature:", "    name: room temperature", "    min: 0", "    max: 40",
              "    initial: 20", "template:", "  - sensor:", "      - name: room temperature sensor",
              "        unique_id: rkvoice_bench_temperature", '        unit_of_measurement: "°C"',
              "        device_class: temperature", '        state: "{{ states(\'input_number.room_temperature\') }}"']
    actions = {"light": ("turn_on", "turn_off"), "switch": ("turn_on", "turn_off"), "fan": ("turn_on", "turn_off"),
               "cover": ("open_cover", "close_cover")}
    for domain, (on, off) in actions.items():
        mine = [d for d in devices if d.domain == domain]
        if not mine:
            continue
        lines.append(f"  - {domain}:")
        for d in mine:
            lines += [f"      - name: {d.name}", f"        unique_id: rkvoice_{d.key}",
                      f"        state: \"{{{{ is_state('input_boolean.{d.key}', 'on') }}}}\""]
            for action, service in ((on, "turn_on"), (off, "turn_off")):
                lines += [f"        {action}:", f"          action: input_boolean.{service}", "          target:",
                          f"            entity_id: input_boolean.{d.key}"]
    climates = [d for d in devices if d.domain == "climate"]
    if climates:
        lines.append("climate:")
    for d in climates:
        lines += ["  - platform: generic_thermostat", f"    name: {d.name}", f"    unique_id: rkvoice_{d.key}",
                  f"    heater: input_boolean.{d.key}", "    target_sensor: sensor.room_temperature_sensor",
                  "    min_temp: 16", "    max_temp: 30", "    target_temp: 22", "    precision: 1.0"]
    return "\n".join(lines) + "\n"


def _build_devices(ha: HomeHa, devices: list[Device]) -> dict[str, str]:
    """Areas, aliases, exposure of ``devices``; {name: entity_id}."""
    found: dict[str, str] = {}
    with ha.ws() as sock:
        named = _named(sock, {(d.domain, d.name) for d in devices})
        areas = {a["name"]: a["area_id"] for a in sock.call("config/area_registry/list")}
        for d in devices:
            eid = named.get((d.domain, d.name), "")
            assert eid, f"no {d.domain} {d.name} in HA\n{ha.log()}"
            if d.area not in areas:
                areas[d.area] = sock.call("config/area_registry/create", name=d.area)["area_id"]
            sock.call("config/entity_registry/update", entity_id=eid, area_id=areas[d.area], aliases=list(d.aliases))
            found[d.name] = eid
        sock.call("homeassistant/expose_entity", assistants=["conversation"], entity_ids=sorted(found.values()),
                  should_expose=True)
    return found


@contextlib.contextmanager
def home_ha(work: Path, devices: list[Device] | None = None) -> Iterator[HomeHa]:
    """Start HA in ``work`` with the home of ``HOME`` (or of ``devices``: ``ha.devices`` maps their names to
    entity ids); stop it on exit."""
    require_ha_venv()
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config"
    config.mkdir(exist_ok=True)
    python = str(HA_VENV / "bin" / "python")
    ffmpeg = subprocess.run([python, "-c", "import imageio_ffmpeg; print(imageio_ffmpeg.get_ffmpeg_exe())"],
                            check=True, capture_output=True, text=True).stdout.strip()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    text = CONFIGURATION.format(base=base, port=port, ffmpeg=ffmpeg, light=HOME.light, thermostat=HOME.thermostat)
    if devices is not None:
        text = text[:text.index("input_boolean:")] + devices_configuration(devices)
    (config / "configuration.yaml").write_text(text, encoding="utf-8")
    (work / "launch.py").write_text(LAUNCH)
    with (work / "ha.log").open("wb") as log:
        process = subprocess.Popen([python, str(work / "launch.py"), "-c", str(config), "--skip-pip"], stdout=log,
                                   stderr=subprocess.STDOUT)
    ha = HomeHa(base, work, process)
    try:
        t0 = time.monotonic()
        while True:
            assert process.poll() is None, f"Home Assistant exited:\n{ha.log()}"
            assert time.monotonic() - t0 < START_S, f"Home Assistant did not answer within {START_S:g} s\n{ha.log()}"
            try:
                with urllib.request.urlopen(base + "/api/onboarding", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        ha.token = _onboard(ha)
        ha.token_file = work / "ha_token"
        ha.token_file.write_text(ha.token + "\n")
        ha.token_file.chmod(0o600)
        if devices is None:
            _build_home(ha)
        else:
            ha.devices = _build_devices(ha, devices)
        yield ha
    finally:
        ha.stop()
