"""What the board has before (and after) the install, checked rather than assumed: SoC, kernel, RKNPU
driver, the NPU runtimes against what the models were built for, the sound devices (the one used
marked, and the key that chooses another), free memory and disk against what the profile needs.

Every probe reads under the roots it is given (``Roots``: /proc, /sys, the library files, the install
directory, the free-space probe), so tests run on fake trees. ``install.sh --profile board`` and
``assistant.py --check`` print the same report; each missing piece is one line naming its fix.
``python -m rkvoice.board.prereqs`` prints it (exit 1 when a piece is missing).
"""

from __future__ import annotations

import ctypes.util
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rkvoice.board import runtimes, versions
from rkvoice.errors import RkvoiceError

if TYPE_CHECKING:
    from rkvoice.config import Config

NPU_DRIVER_MIN = (0, 9, 8)
"""librkllmrt's floor (Rockchip's RKLLM notes; rknn-llm ships rknpu_driver_0.9.8)."""
BOARD_MEMORY_MB = 1500
"""Free memory the board install needs: the on-board Matcha conversion peaks at 1.36 GB (rknn-toolkit2
build of the 64-token bucket, docs/performance.md); the daemon's own figure on a board is not measured."""
BOARD_DISK_MB = 4000
"""Free disk the board install needs, estimated: py312/ (~1.2 GB), the models (~0.6 GB with their
downloads, deleted after), the throw-away converter venv (~1.5 GB with torch while it runs), the RKLLM
model (~0.5 GB)."""
SOC = "rockchip,rk3576"


def _has_library(name: str) -> bool:
    return ctypes.util.find_library(name) is not None


def _has_program(name: str) -> bool:
    return shutil.which(name) is not None


def _free_bytes(path: Path) -> int:
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


@dataclass(frozen=True)
class Roots:
    """Where the probes read; None: the real system paths (rkvoice.board.versions)."""

    proc: Path = Path("/proc")
    sys: Path | None = None
    lib_dirs: tuple[Path, ...] | None = None
    install: Path = Path(".")
    free_bytes: Callable[[Path], int] = _free_bytes
    library: Callable[[str], bool] = _has_library
    """Is a shared library (``portaudio``) installed?"""
    program: Callable[[str], bool] = _has_program
    """Is a program (``arecord``, ``aplay``) on the PATH?"""

    def libs(self, name: str, default: tuple[Path, ...]) -> tuple[Path, ...]:
        return default if self.lib_dirs is None else tuple(d / name for d in self.lib_dirs)

    def driver_paths(self) -> tuple[Path, ...] | None:
        return None if self.sys is None else versions.npu_driver_paths(self.proc, self.sys)


@dataclass(frozen=True)
class Item:
    """One prerequisite: what was found, and the fix when it is missing (empty: nothing to do)."""

    what: str
    found: str
    fix: str = ""
    lines: tuple[str, ...] = ()
    """More facts under it (the sound devices)."""

    @property
    def ok(self) -> bool:
        return not self.fix

    def __str__(self) -> str:
        return f"{self.what}: {self.found}" + (f": {self.fix}" if self.fix else "")


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return None


def board(roots: Roots) -> Item:
    """SoC and model from the device tree."""
    compatible = [c for c in (_read(roots.proc / "device-tree/compatible") or "").split("\0") if c]
    model = (_read(roots.proc / "device-tree/model") or "").strip("\0\n ")
    socs = [c for c in compatible if c.startswith("rockchip,rk")]
    found = ", ".join(filter(None, [model, socs[-1] if socs else ""])) or "no device tree (not an ARM board)"
    if SOC in compatible:
        return Item("board", found)
    return Item("board", found, "the board profile is built for the RK3576 (rockchip,rk3576); "
                "elsewhere use the portable profile (./install.sh)")


def kernel(roots: Roots) -> Item:
    release = (_read(roots.proc / "sys/kernel/osrelease") or "").strip()
    return Item("kernel", release or "unknown (no /proc/sys/kernel/osrelease)")


def npu_driver(roots: Roots) -> Item:
    path, version = versions.npu_driver_version(roots.driver_paths())
    floor = ".".join(map(str, NPU_DRIVER_MIN))
    if version is None:
        return Item("NPU driver", "version not readable",
                    f"sudo cat /sys/kernel/debug/rknpu/version (debugfs needs root); {floor} or later is needed, "
                    "the board image's vendor kernel brings it")
    if tuple(int(x) for x in version.split(".")) < NPU_DRIVER_MIN:
        return Item("NPU driver", f"RKNPU {version} ({path})",
                    f"older than {floor}, which librkllmrt needs: update the board image (its kernel)")
    return Item("NPU driver", f"RKNPU {version} ({path})")


def _sidecar_versions(models: Path) -> dict[str, list[str]]:
    """rknn-toolkit2 version -> the NPU files (their JSON sidecars) built with it."""
    out: dict[str, list[str]] = {}
    for side in sorted(models.glob("board/*/*.json")):
        if not side.with_suffix(".rknn").is_file():
            continue
        try:
            out.setdefault(runtimes.sidecar_version(side), []).append(side.with_suffix(".rknn").name)
        except RkvoiceError:
            out.setdefault("unreadable", []).append(side.name)
    return out


def librknnrt(roots: Roots) -> Item:
    """librknnrt.so and its version, against the toolkit that built the installed .rknn files."""
    path, version = versions.librknnrt_version(roots.libs("librknnrt.so", versions.LIBRKNNRT_PATHS))
    built = _sidecar_versions(roots.install / "models")
    if path is None:
        return Item("librknnrt", "not found", "it comes with the board image (Rockchip rknpu2 runtime); or copy "
                    "rknpu2/runtime/Linux/librknn_api/aarch64/librknnrt.so of an airockchip/rknn-toolkit2 release "
                    "to /usr/lib")
    if version is None:
        return Item("librknnrt", f"{path}, version unreadable",
                    f"strings {path} | grep 'librknnrt version'; then ./install.sh --profile board --toolkit-version V")
    other = {v: files for v, files in built.items() if v != version}
    found = f"{version} ({path})" + (f"; NPU files built with {version}" if version in built else "")
    if other:
        which = "; ".join(f"{', '.join(f)} built with {v}" for v, f in other.items())
        return Item("librknnrt", found, f"{which}: rebuild them with ./install.sh --profile board "
                    f"(it converts with rknn-toolkit2 {version})")
    return Item("librknnrt", found if built else found + "; no NPU files built yet (the install converts "
                f"them with rknn-toolkit2 {version})")


def librkllmrt(roots: Roots, abi: str | None = None) -> Item:
    """librkllmrt.so and its version, against the binding (``llm.rkllm_abi`` = ``abi`` when given)."""
    path = versions.first_existing(roots.libs("librkllmrt.so", versions.LIBRKLLMRT_PATHS))
    if path is None:
        return Item("librkllmrt", "not found", versions.LIBRKLLMRT_FIX)
    version = versions.so_version(path, "rkllm")
    if version is None:
        return Item("librkllmrt", f"{path}, version unreadable", f"strings {path} | grep 'rkllm-runtime version'; "
                    f"rkvoice drives {versions.RKLLM_RUNTIMES}")
    want = versions.rkllm_runtime_abi(version)
    problem = versions.rkllm_runtime_problem(version, abi or want or "")
    found = f"{version} ({path}); convert the RKLLM model with rkllm-toolkit {version} (models/convert_rkllm.py)"
    return Item("librkllmrt", found, problem or "")


@dataclass(frozen=True)
class Pcm:
    card: int
    device: int
    card_id: str
    name: str
    playback: bool
    capture: bool

    @property
    def hw(self) -> str:
        return f"hw:{self.card},{self.device}"


def sound_devices(proc: Path) -> list[Pcm]:
    """ALSA's PCM devices from /proc/asound (``pcm``: ``00-00: id : name : playback 1 : capture 1``)."""
    ids = {int(m.group(1)): m.group(2).strip() for m in
           re.finditer(r"^\s*(\d+)\s+\[([^\]]+)\]", _read(proc / "asound/cards") or "", re.MULTILINE)}
    out = []
    for line in (_read(proc / "asound/pcm") or "").splitlines():
        m = re.match(r"(\d+)-(\d+):\s*([^:]*):\s*([^:]*)(.*)", line)
        if m:
            card, dev = int(m.group(1)), int(m.group(2))
            out.append(Pcm(card, dev, ids.get(card, str(card)), m.group(4).strip() or m.group(3).strip(),
                           "playback" in m.group(5), "capture" in m.group(5)))
    return out


def chosen(devices: list[Pcm], setting: str) -> Pcm | None:
    """The device an ALSA name or sounddevice name picks: default (card 0 unless /etc/asound.conf says
    otherwise), hw:/plughw:C,D or CARD=id,DEV=d, else the first whose card id or name contains it."""
    if not devices:
        return None
    s = setting.strip()
    if s in ("", "default", "sysdefault", "pulse", "pipewire"):
        return min(devices, key=lambda d: (d.card, d.device))
    m = re.match(r"^(?:plug)?hw:(?:CARD=)?([^,]+)(?:,(?:DEV=)?(\d+))?$", s) or re.match(
        r"^(?:sysdefault|front|dsnoop|dmix):(?:CARD=)?([^,]+)()$", s)
    if m:
        card, dev = m.group(1), int(m.group(2) or 0)
        for d in devices:
            if (str(d.card) == card or d.card_id == card) and d.device == dev:
                return d
        return None
    low = s.lower()
    return next((d for d in devices if low in d.card_id.lower() or low in d.name.lower()), None)


PORTAUDIO_FIX = "sudo apt-get install libportaudio2 (sounddevice plays and records through PortAudio)"
ALSA_UTILS_FIX = "sudo apt-get install alsa-utils (arecord, aplay)"


def _sound(what: str, devices: list[Pcm], key: str, setting: str, lister: str, none_fix: str,
           backend: str, backend_fix: str) -> Item:
    used = chosen(devices, setting)
    lines = tuple(f"{'*' if d is used else ' '} {d.hw} {d.card_id}: {d.name}" for d in devices)
    how = f"choose another with {key}: hw:CARD,DEV (config.yaml, or --set {key}=...; {lister} lists them)"
    if not devices:
        return Item(what, "none", none_fix)
    if used is None:
        return Item(what, f"{len(devices)} device(s)", f"{key} {setting!r} matches none of them: set {key} to one "
                    f"listed ({lister})", lines)
    return Item(what, f"{used.hw} {used.card_id} via {backend} ({key}: {setting}, marked *)", backend_fix,
                lines + (how,))


def microphone(roots: Roots, setting: str = "default", backend: str = "sounddevice") -> Item:
    """Capture devices, the one ``audio.input_device`` = ``setting`` picks, and what ``audio.input`` =
    ``backend`` needs (sounddevice: PortAudio; arecord: alsa-utils)."""
    fix = ""
    if backend == "sounddevice" and not roots.library("portaudio"):
        fix = f"{PORTAUDIO_FIX}; or set audio.input: arecord"
    elif backend == "arecord" and not roots.program("arecord"):
        fix = ALSA_UTILS_FIX
    return _sound("input", [d for d in sound_devices(roots.proc) if d.capture], "audio.input_device", setting,
                  "arecord -l", "no capture device: plug in a microphone (USB or the board's codec), then arecord -l",
                  backend, fix)


def speaker(roots: Roots, setting: str = "default", player: str = "auto") -> Item:
    """Playback devices, the one ``audio.device`` = ``setting`` picks, and what ``audio.player`` needs
    (auto: aplay, else sounddevice)."""
    aplay, portaudio = roots.program("aplay"), roots.library("portaudio")
    backend = "aplay" if player == "aplay" or (player == "auto" and aplay) else player if player != "auto" \
        else "sounddevice"
    fix = ""
    if backend == "aplay" and not aplay:
        fix = ALSA_UTILS_FIX
    elif backend == "sounddevice" and not portaudio:
        fix = f"{ALSA_UTILS_FIX} or {PORTAUDIO_FIX}" if player == "auto" else PORTAUDIO_FIX
    return _sound("output", [d for d in sound_devices(roots.proc) if d.playback], "audio.device", setting,
                  "aplay -l", "no playback device: connect a speaker (USB, HDMI or the board's codec), then aplay -l",
                  backend, fix)


def memory(roots: Roots, need_mb: int = BOARD_MEMORY_MB) -> Item:
    info = {m.group(1): int(m.group(2)) for m in
            re.finditer(r"^(\w+):\s+(\d+) kB", _read(roots.proc / "meminfo") or "", re.MULTILINE)}
    if "MemAvailable" not in info:
        return Item("memory", "unknown (no /proc/meminfo)")
    free, total = info["MemAvailable"] // 1024, info.get("MemTotal", 0) // 1024
    found = f"{free} MB free of {total} MB (the install needs {need_mb} MB)"
    if free < need_mb:
        return Item("memory", found, "stop other programs first (a running rkvoice: sudo systemctl stop rkvoice)")
    return Item("memory", found)


def disk(roots: Roots, need_mb: int = BOARD_DISK_MB) -> Item:
    free = roots.free_bytes(roots.install) >> 20
    found = f"{free} MB free in {roots.install} (the install needs {need_mb} MB)"
    if free < need_mb:
        return Item("disk", found, "free space there, or clone rkvoice onto a larger disk")
    return Item("disk", found)


@dataclass(frozen=True)
class Audio:
    """The config keys that choose the sound devices (``audio.*``)."""

    input: str = "sounddevice"
    input_device: str = "default"
    player: str = "auto"
    device: str = "default"


def report(roots: Roots, audio: Audio = Audio(), rkllm_abi: str | None = None) -> list[Item]:
    """Every prerequisite of the board profile, in the order a newcomer fixes them."""
    return [board(roots), kernel(roots), npu_driver(roots), librknnrt(roots), librkllmrt(roots, rkllm_abi),
            microphone(roots, audio.input_device, audio.input), speaker(roots, audio.device, audio.player),
            memory(roots), disk(roots)]


def audio_of(cfg: Config) -> Audio:
    a = cfg.audio
    return Audio(a.input, a.input_device, a.player, a.device)


def render(items: list[Item]) -> str:
    lines = []
    for it in items:
        fix = f"; fix: {it.fix}" if it.fix else ""
        lines.append(f"  [{'ok  ' if it.ok else 'MISS'}] {it.what:<11} {it.found}{fix}")
        lines += [f"         {line}" for line in it.lines]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m rkvoice.board.prereqs [--root DIR] [--config FILE]``: print the report."""
    import argparse
    import sys

    from rkvoice.config import DEFAULT_CONFIG, load_config

    ap = argparse.ArgumentParser(prog="python -m rkvoice.board.prereqs", description=__doc__)
    ap.add_argument("--root", type=Path, default=Path("."), help="the install directory (models/, its disk)")
    ap.add_argument("--config", type=Path, default=None, help="the sound devices and llm.rkllm_abi from this config")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(None, [DEFAULT_CONFIG, args.config] if args.config else None)
    except RkvoiceError as err:
        print(f"rkvoice.board.prereqs: {err.message}", file=sys.stderr)
        return 2
    items = report(Roots(install=args.root.resolve()), audio_of(cfg), cfg.llm.rkllm_abi)
    sys.stdout.write("board prerequisites:\n" + render(items))
    missing = [it.what for it in items if not it.ok]
    if missing:
        sys.stdout.write(f"missing: {', '.join(missing)} (each with its fix above)\n")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
