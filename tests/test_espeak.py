import ast
import ctypes
import ctypes.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rkvoice.board import espeak
from rkvoice.errors import RkvoiceError


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("needs apt-get and dpkg-deb (Debian) to fetch the espeak-ng packages")
    d = tmp_path_factory.mktemp("debs")
    res = subprocess.run(["apt-get", "download", *espeak.PACKAGES], cwd=d, capture_output=True, text=True,
                         timeout=120)
    files = sorted(d.glob("*.deb"))
    if res.returncode != 0 or len(files) < len(espeak.PACKAGES):
        pytest.skip(f"apt-get download {' '.join(espeak.PACKAGES)} failed (run apt-get update; "
                    f"is the archive reachable?): {res.stderr.strip()[:200]}")
    return files


def test_unpack_preload_by_path_then_phonemize(debs, tmp_path):
    if ctypes.util.find_library("pulse-simple") is None:
        pytest.skip("Debian's libpcaudio0 links libpulse-simple.so.0: apt-get install libpulse0 "
                    "(the board image has it)")
    lib = espeak.unpack_debs(debs, tmp_path / "espeak")
    assert (lib / "libespeak-ng.so.1").exists() and (lib / "espeak-ng-data" / "phontab").exists()
    # links are relative, so the install directory can move
    moved = tmp_path / "moved"
    (tmp_path / "espeak").rename(moved)
    lib = moved / "lib"
    assert (lib / "espeak-ng-data" / "phontab").exists()
    # In a fresh interpreter: preload by absolute path, then a by-soname load must hit our copy.
    code = (
        "import ctypes, sys\n"
        "from pathlib import Path\n"
        "from rkvoice.board.espeak import Espeak\n"
        f"e = Espeak.open(Path({str(lib)!r}))\n"
        "ctypes.CDLL('libespeak-ng.so.1')\n"
        "maps = open('/proc/self/maps').read()\n"
        "paths = {l.split()[-1] for l in maps.splitlines() if 'libespeak-ng.so' in l}\n"
        "print(sorted(paths)); print(e.phonemize('hello')); print(e.phonemize('Python'))\n"
    )
    res = subprocess.run([sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    loaded = ast.literal_eval(lines[0])
    assert loaded and all(p.startswith(str(tmp_path)) for p in loaded), loaded
    assert lines[1] == "həlˈoʊ"
    assert lines[2] == "pˈaɪθən"


def test_unpack_rejects_missing_and_incomplete_packages(debs, tmp_path):
    with pytest.raises(RkvoiceError, match="not found"):
        espeak.unpack_debs([tmp_path / "nope.deb"], tmp_path / "x")
    sonic = [d for d in debs if d.name.startswith("libsonic0")]
    with pytest.raises(RkvoiceError, match="libespeak-ng.so.1"):
        espeak.unpack_debs(sonic, tmp_path / "y")


def test_preload_missing_library_names_path_and_fix(tmp_path):
    with pytest.raises(RkvoiceError, match=r"libpcaudio\.so\.0 not found; run ./install.sh --profile board"):
        espeak.preload(tmp_path)


def test_open_without_data_refuses_before_espeak_can_exit(tmp_path, monkeypatch):
    monkeypatch.setattr(espeak.Espeak, "_instance", None)
    with pytest.raises(RkvoiceError, match="phontab not found"):
        espeak.Espeak.open(tmp_path)
