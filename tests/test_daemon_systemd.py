"""The systemd unit: systemd-analyze accepts it, and it carries the promised settings."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "systemd" / "install-service.sh"


def _render(tmp_path: Path, install_dir: Path = ROOT) -> str:
    out = tmp_path / "rkvoice.service"
    subprocess.run([str(SCRIPT), "--render", str(out), "--install-dir", str(install_dir)],
                   check=True, capture_output=True, text=True, timeout=30)
    return out.read_text(encoding="utf-8")


def _directives(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    if not (ROOT / "py312" / "bin" / "python").exists():
        pytest.skip("py312/bin/python is missing: verify checks that ExecStart's binary exists")
    _render(tmp_path)
    out = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "rkvoice.service")],
                         check=False, capture_output=True, text=True, timeout=60)
    # verify only warns (exit 0) about unknown or unparsable settings: any output is a finding
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "", out.stderr


def test_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    unit = _render(tmp_path).replace("Type=notify", "Type=notifyy")
    (tmp_path / "rkvoice.service").write_text(unit, encoding="utf-8")
    out = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "rkvoice.service")],
                         check=False, capture_output=True, text=True, timeout=60)
    assert "notifyy" in out.stderr


def test_unit_settings(tmp_path: Path) -> None:
    unit = _render(tmp_path)
    assert "@INSTALL_DIR@" not in unit and "@PROTECT_HOME@" not in unit
    d = _directives(unit)
    assert d["Type"] == ["notify"]
    assert int(d["WatchdogSec"][0]) >= 10
    assert d["Restart"] == ["always"]
    assert d["User"] == ["rkvoice"] and d["SupplementaryGroups"] == ["audio"]
    assert d["ExecStart"] == [f"{ROOT}/py312/bin/python {ROOT}/assistant.py"]
    for key, value in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateTmp", "yes"),
                       ("StateDirectory", "rkvoice"), ("ReadWritePaths", "/var/lib/rkvoice"),
                       ("RestrictAddressFamilies", "AF_UNIX")]:
        assert d[key] == [value], key
    assert d["ProtectHome"] in (["yes"], ["read-only"])
    # the daemon's state dir resolves to the unit's StateDirectory
    assert "XDG_STATE_HOME=/var/lib" in d["Environment"]


def test_install_dir_under_home_keeps_it_readable(tmp_path: Path) -> None:
    home = Path("/home")
    if not home.is_dir() or not os.access(home, os.W_OK):
        pytest.skip("needs a writable /home to place a fake install dir")
    fake = Path(subprocess.run(["mktemp", "-d", "-p", "/home"], capture_output=True, text=True,
                               check=True).stdout.strip())
    try:
        assert _directives(_render(tmp_path, fake))["ProtectHome"] == ["read-only"]
    finally:
        fake.rmdir()


def test_install_refuses_an_install_dir_without_the_interpreter(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the install path of install-service.sh runs as root only")
    if shutil.which("systemctl") is None:
        pytest.skip("systemctl is not installed")
    out = subprocess.run([str(SCRIPT), "--install-dir", str(tmp_path), "--no-start"],
                         check=False, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "py312/bin/python is missing: run ./install.sh first" in out.stderr
