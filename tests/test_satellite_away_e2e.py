"""The satellite as the daemon runs it (SatelliteListener) against the REAL Home Assistant (tests/ha_home.py),
stopped and started mid-run: while HA runs the satellite a spoken request goes to HA's pipeline; once HA
is stopped a wake on the board is answered by the local assistant (the tools: 现在几点); once HA is
started again (the same configuration: it reconnects to the satellite by itself) requests go to HA again.
Requests are spoken by the portable voice into the satellite's microphone in real time and woken by the
real portable wake engine. Skips (saying why) without the HA venv or the models.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from typing import Any

from fakes import wait_until

from tests.ha_home import HA_VENV, HOME, HomeHa, home_ha, require_ha_venv
from tests.support.satellite_home import SatelliteHome, satellite_home

START_S = 240.0


def start_again(ha: HomeHa) -> None:
    """Start the stopped HA on its configuration (onboarded, the Wyoming entries kept); returns once its
    API answers."""
    with (ha.work / "ha.log").open("ab") as log:
        ha.process = subprocess.Popen([str(HA_VENV / "bin" / "python"), str(ha.work / "launch.py"), "-c",
                                       str(ha.work / "config"), "--skip-pip"], stdout=log, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while True:
        assert ha.process.poll() is None, f"Home Assistant exited:\n{ha.log()}"
        assert time.monotonic() - t0 < START_S, f"Home Assistant did not start again\n{ha.log()}"
        request = urllib.request.Request(ha.base + "/api/", headers={"Authorization": f"Bearer {ha.token}"})
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)


def test_while_the_real_home_assistant_is_stopped_the_local_assistant_answers(hear_asr, hear_voice, tmp_path):
    from rkvoice.satellite.run import Mode

    require_ha_venv()
    with home_ha(tmp_path / "ha") as ha, satellite_home(tmp_path, hear_asr, hear_voice, ha=ha, local=True) as home:
        listener: Any = home.listener
        assert listener.mode is Mode.SATELLITE
        run = home.ask(f"打开{HOME.alias}")
        ha.wait_state(ha.light, "on")
        assert run.reply is not None and run.reply.kind == "reply"
        assert home.reports == []  # HA answered, not the local assistant

        away_and_back(home)


def away_and_back(home: SatelliteHome) -> None:
    """HA (running the satellite of ``home``, made with ``local``) stopped: the local assistant answers 现在几点
    with the tools; HA started again: it runs the satellite again by itself and 打开大灯 reaches it, no
    local turn (tests/test_esphome_e2e.py runs it for the ESPHome device)."""
    from rkvoice.satellite.run import Mode

    ha, listener = home.ha, home.listener
    assert listener.mode is Mode.SATELLITE
    reports = len(home.reports)
    ha.stop()
    assert wait_until(lambda: listener.mode is Mode.LOCAL, 30), "the satellite did not notice HA leave"
    turn = home.ask_local("现在几点")
    assert "几点" in turn.text and turn.route.startswith("tool"), (turn.text, turn.route)
    assert turn.exception is None and turn.result

    start_again(ha)
    assert wait_until(lambda: listener.mode is Mode.SATELLITE and home.satellite.link.running.is_set(), 120), \
        f"HA did not run the satellite again\n{ha.log()}"
    ha.rest("POST", "/api/services/light/turn_off", {"entity_id": ha.light})
    ha.wait_state(ha.light, "off")
    home.ask(f"打开{HOME.alias}")
    ha.wait_state(ha.light, "on")
    assert len(home.reports) == reports + 1  # HA's again
