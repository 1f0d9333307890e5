"""espeak-ng is initialised so that a data error returns an error instead of exiting the process.

A fake libespeak-ng built here with gcc behaves like the real one on a data error: it calls
exit() unless the options carry espeakINITIALIZE_DONT_EXIT (0x8000), and returns
EE_INTERNAL_ERROR (-1) when they do. The engine must come back with an RkvoiceError and the
process must live on.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rkvoice.board import espeak
from rkvoice.config import ROOT

FAKE = r"""
#include <stdlib.h>
#include <string.h>
static int g_options = -1;
int fake_options(void) { return g_options; }
int espeak_Initialize(int output, int buflength, const char* path, int options) {
  (void)output; (void)buflength; g_options = options;
  if (path && strstr(path, "nodata")) {      /* espeak-ng-data missing */
    if (!(options & 0x8000)) exit(1);          /* what espeak-ng does without DONT_EXIT */
    return -1;                                 /* EE_INTERNAL_ERROR */
  }
  return 22050; }
int espeak_SetVoiceByName(const char* name) { return strcmp(name, "en-us") == 0 ? 0 : 1; }
const char* espeak_TextToPhonemes(const void** text, int textmode, int phonememode) {
  (void)textmode; (void)phonememode; *text = NULL; return "h\xc9\x99l\xcb\x88o\xca\x8a"; }
"""


@pytest.fixture(scope="module")
def fake_espeak(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build the fake libespeak-ng")
    d = tmp_path_factory.mktemp("espeak")
    (d / "fake.c").write_text(FAKE)
    lib = d / "libespeak-ng-fake.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(d / "fake.c")], check=True)
    return lib


def test_initialise_passes_dont_exit(fake_espeak: Path, tmp_path: Path) -> None:
    lib = ctypes.CDLL(str(fake_espeak))
    e = espeak.Espeak(lib, tmp_path / "data")
    assert lib.fake_options() & espeak.INITIALIZE_DONT_EXIT == 0x8000
    assert e.phonemize("hello") == "həlˈoʊ"


def _in_subprocess(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)


def test_data_error_is_an_error_not_an_exit(fake_espeak: Path, tmp_path: Path) -> None:
    code = (
        "import ctypes\nfrom pathlib import Path\nfrom rkvoice.board.espeak import Espeak\n"
        "from rkvoice.errors import RkvoiceError\n"
        f"lib = ctypes.CDLL({str(fake_espeak)!r})\n"
        "try:\n"
        f"    Espeak(lib, Path({str(tmp_path / 'nodata')!r}))\n"
        "except RkvoiceError as exc:\n"
        "    print('error:', exc)\n"
        "print('still alive')\n"
    )
    res = _in_subprocess(code)
    assert res.returncode == 0, res.stderr
    assert "espeak_Initialize failed (-1)" in res.stdout and "still alive" in res.stdout


def test_the_fake_exits_without_the_option(fake_espeak: Path, tmp_path: Path) -> None:
    # the counterfactual: the same data error with options 0 ends the process, as espeak-ng does
    code = (f"import ctypes\nlib = ctypes.CDLL({str(fake_espeak)!r})\n"
            f"lib.espeak_Initialize(2, 0, {str(tmp_path / 'nodata')!r}.encode(), 0)\nprint('still alive')\n")
    res = _in_subprocess(code)
    assert res.returncode == 1 and "still alive" not in res.stdout
