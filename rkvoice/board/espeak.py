"""espeak-ng without root: ``dpkg-deb -x`` the Debian packages into a private dir and preload them by
absolute path with ``RTLD_GLOBAL``, dependencies first (``LD_LIBRARY_PATH`` is read only at process
start), so a later ``dlopen`` by soname finds them. ``Espeak.phonemize`` gives IPA through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from rkvoice.errors import RkvoiceError, Stage

if TYPE_CHECKING:
    from rkvoice.config import Config

log = logging.getLogger(__name__)

PACKAGES = ("libpcaudio0", "libsonic0", "libespeak-ng1", "espeak-ng-data")
"""Debian packages the board install unpacks (apt-get download on a machine with apt, or the URLs in the manifest)."""
PRELOAD_ORDER = ("libpcaudio.so.0", "libsonic.so.0", "libespeak-ng.so.1")
"""Dependencies first: libespeak-ng.so.1 needs the other two by soname."""

_AUDIO_OUTPUT_RETRIEVAL = 1
_CHARS_UTF8 = 1
_PHONEMES_IPA = 0x02
INITIALIZE_DONT_EXIT = 0x8000
"""espeakINITIALIZE_DONT_EXIT: without it espeak_Initialize calls exit() on a data error (missing or
unreadable espeak-ng-data), which would take the whole resident assistant down."""


def unpack_debs(debs: list[Path], dest: Path) -> Path:
    """``dpkg-deb -x`` each package into ``dest/root``; returns ``dest/lib``, holding the .so files and an
    ``espeak-ng-data`` link to the unpacked data."""
    if shutil.which("dpkg-deb") is None:
        raise RkvoiceError(Stage.INSTALL, "missing-tool", "dpkg-deb not found; it ships with dpkg on Debian-based boards")
    root, lib = dest / "root", dest / "lib"
    for d in (root, lib):
        d.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        if not deb.is_file():
            raise RkvoiceError(Stage.INSTALL, "missing-file", f"Debian package {deb} not found")
        res = subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True)
        if res.returncode != 0:
            raise RkvoiceError(Stage.INSTALL, "bad-deb", f"dpkg-deb -x {deb} failed: {res.stderr.strip()}")
    for so in root.rglob("*.so*"):
        if so.is_file() and so.name.split(".so")[0] in ("libespeak-ng", "libpcaudio", "libsonic"):
            target = lib / so.name
            target.unlink(missing_ok=True)
            if so.is_symlink():
                target.symlink_to(Path(so.readlink()).name)
            else:
                shutil.copy2(so, target)
    data = next((p.parent for p in root.rglob("espeak-ng-data/phontab")), None)
    if data is not None:
        link = lib / "espeak-ng-data"
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(data, lib))  # relative: the install dir may move
    missing = [n for n in PRELOAD_ORDER if not (lib / n).exists()]
    if missing:
        raise RkvoiceError(Stage.INSTALL, "bad-deb", f"after unpacking, {lib} lacks {', '.join(missing)}; "
                           f"unpack all of: {', '.join(PACKAGES)}")
    log.info("espeak-ng unpacked into %s", lib)
    return lib


def espeak_lib_dir(cfg: Config) -> Path | None:
    """``tts.matcha.espeak_lib_dir`` (relative to models.dir) when it holds an unpacked copy, else None."""
    raw = cfg.tts.matcha.espeak_lib_dir
    p = cfg.models.path / raw  # an absolute raw path stays itself
    return p if raw and p.is_dir() else None


def espeak_lack(cfg: Config) -> str | None:
    """What the preload would miss (said by ``--check``), None when espeak-ng is there to load."""
    lib_dir = espeak_lib_dir(cfg)
    if lib_dir is not None:
        lacking = [n for n in (*PRELOAD_ORDER, "espeak-ng-data/phontab") if not (lib_dir / n).exists()]
        return f"espeak-ng copy in {lib_dir} lacks {', '.join(lacking)}: English words will be skipped" if lacking else None
    if ctypes.util.find_library("espeak-ng") is None:
        return "no espeak-ng (no unpacked copy at tts.matcha.espeak_lib_dir, none on the system): English words are skipped"
    return None


def preload(lib_dir: Path) -> ctypes.CDLL:
    """Load libpcaudio, libsonic, libespeak-ng from ``lib_dir`` by absolute path, RTLD_GLOBAL."""
    handle = None
    for name in PRELOAD_ORDER:
        path = lib_dir.resolve() / name
        if not path.exists():
            raise RkvoiceError(Stage.TTS, "missing-espeak", f"{path} not found; run ./install.sh --profile board "
                               "(it unpacks libespeak-ng1, libpcaudio0, libsonic0 there)")
        try:
            handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise RkvoiceError(Stage.TTS, "missing-espeak", f"cannot load {path}: {exc}") from exc
    assert handle is not None
    return handle


class Espeak:
    """An initialised espeak-ng (one per process: the library keeps global state)."""

    _instance: Espeak | None = None
    _opening = threading.Lock()

    def __init__(self, lib: ctypes.CDLL, data_parent: Path | None) -> None:
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        self._lib = lib
        self._lock = threading.Lock()
        path = str(data_parent).encode() if data_parent else None
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_RETRIEVAL, 0, path, INITIALIZE_DONT_EXIT)
        if rate <= 0:
            raise RkvoiceError(Stage.TTS, "espeak-init", f"espeak_Initialize failed ({rate}); espeak-ng-data "
                               f"missing under {data_parent or 'the default location'}")
        if lib.espeak_SetVoiceByName(b"en-us") != 0:
            raise RkvoiceError(Stage.TTS, "espeak-init", "espeak-ng has no voice 'en-us'")

    @classmethod
    def open(cls, lib_dir: Path | None = None) -> Espeak:
        """espeak-ng from a private ``lib_dir`` (preloaded by path), else the system's library; the
        first one opened serves the whole process."""
        with cls._opening:
            if cls._instance is not None:
                return cls._instance
            if lib_dir is not None:
                data = lib_dir / "espeak-ng-data" / "phontab"
                if not data.exists():  # espeak-ng exits the process when its data is missing: check first
                    raise RkvoiceError(Stage.TTS, "missing-espeak", f"{data} not found; unpack espeak-ng-data too "
                                       "(python -m rkvoice.board.espeak unpack DEST *.deb)")
                cls._instance = cls(preload(lib_dir), lib_dir.resolve())
            else:
                name = ctypes.util.find_library("espeak-ng")
                if name is None:
                    raise RkvoiceError(Stage.TTS, "missing-espeak", "espeak-ng is not installed; apt-get install "
                                       "libespeak-ng1, or set tts.matcha.espeak_lib_dir to an unpacked copy")
                cls._instance = cls(ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL), None)
            return cls._instance

    def phonemize(self, text: str) -> str:
        """Text -> IPA phonemes (clauses joined with spaces)."""
        buf = ctypes.create_string_buffer(text.encode("utf-8"))
        ptr = ctypes.c_void_p(ctypes.addressof(buf))
        out = []
        with self._lock:
            while ptr.value:
                res = self._lib.espeak_TextToPhonemes(ctypes.byref(ptr), _CHARS_UTF8, _PHONEMES_IPA)
                if res:
                    out.append(res.decode("utf-8", "replace").strip())
        return " ".join(p for p in out if p)


def main(argv: list[str] | None = None) -> int:
    """``python -m rkvoice.board.espeak unpack DEST DEB...``: the board-espeak-ng model's install step."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m rkvoice.board.espeak")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("unpack", help="unpack the espeak-ng .deb files into DEST/lib")
    u.add_argument("dest", type=Path)
    u.add_argument("debs", type=Path, nargs="+")
    args = ap.parse_args(argv)
    try:
        sys.stdout.write(f"{unpack_debs(args.debs, args.dest)}\n")
    except RkvoiceError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
