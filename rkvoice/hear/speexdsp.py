"""speexdsp's echo canceller + preprocessor (residual echo and noise suppression) on 10 ms frames of
16 kHz int16, from the system's libspeexdsp (``apt-get install libspeexdsp1``) or the fixed-point build
inside the ``pyaec`` wheel. pyaec's own wrapper never tells the canceller its rate: it adapts with its
8 kHz constants (twice too fast at 16 kHz) and its DC notch cuts the microphone below ~250 Hz, so its
speexdsp functions are called at their symbol-table addresses and the rate fields are set here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import struct
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rkvoice.errors import RkvoiceError, Stage

RATE = 16000
FRAME = 160  # 10 ms: the frame both libraries (and WebRTC's) take
SPEEX_TAIL = 2048  # 128 ms of echo path after the estimated delay

SET_SAMPLING_RATE = 24  # speex_echo.h: SPEEX_ECHO_SET_SAMPLING_RATE
SET_ECHO_STATE = 24  # speex_preprocess.h: SPEEX_PREPROCESS_SET_ECHO_STATE
NOTCH_AT = 288  # byte offset of (preemph, notch_radius) in a fixed-point 64-bit SpeexEchoState
Q15_0_9, Q15_0_982 = 29491, 32178  # QCONST16(.9, 15) (preemph; notch radius under 12 kHz), QCONST16(.982, 15)

_HANDLE, _PCM = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int16)
FUNCTIONS: dict[str, tuple[Any, list[Any]]] = {  # name -> (restype, argtypes)
    "speex_echo_state_init": (_HANDLE, [ctypes.c_int, ctypes.c_int]),
    "speex_echo_cancellation": (None, [_HANDLE, _PCM, _PCM, _PCM]),
    "speex_echo_state_destroy": (None, [_HANDLE]),
    "speex_preprocess_state_init": (_HANDLE, [ctypes.c_int, ctypes.c_int]),
    "speex_preprocess_ctl": (ctypes.c_int, [_HANDLE, ctypes.c_int, ctypes.c_void_p]),
    "speex_preprocess_run": (ctypes.c_int, [_HANDLE, _PCM]),
    "speex_preprocess_state_destroy": (None, [_HANDLE]),
}


def _pcm(x: np.ndarray) -> Any:
    """An int16 pointer to ``x`` (converted if need be; the pointer keeps the array alive)."""
    return np.ascontiguousarray(x, np.int16).ctypes.data_as(_PCM)


class UnexpectedBuild(ImportError):
    """pyaec's library is not the one this module knows (symbols stripped, another state layout)."""


def system_speexdsp() -> str | None:
    """The system's libspeexdsp, if there is one."""
    return ctypes.util.find_library("speexdsp")


def load_pyaec() -> tuple[ctypes.CDLL, Path]:
    """pyaec's libaec.so, loaded, and its path (ImportError when pyaec is not installed or it cannot load)."""
    spec = importlib.util.find_spec("pyaec")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pyaec is not installed", name="pyaec")
    path = Path(next(iter(spec.submodule_search_locations))) / "libaec.so"
    try:
        return ctypes.CDLL(str(path)), path
    except OSError as exc:
        raise ImportError(f"cannot load {path}: {exc}", name="pyaec") from exc


def elf_functions(path: Path) -> dict[str, int]:
    """The function symbols of a little-endian ELF64 file's symbol table (local ones included): name -> value."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found: dict[str, int] = {}
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, _entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        names = sections[link][4]
        for at in range(offset, offset + size, 24):
            name, info, _other, _shndx, value, _size = struct.unpack_from("<IBBHQQ", data, at)
            if info & 0xF == 2 and value:  # STT_FUNC, defined
                found[data[names + name : data.index(b"\0", names + name)].decode()] = value
    return found


class SpeexDspCanceller:
    """The echo canceller told its sampling rate, then the preprocessor's residual echo suppression
    and noise suppression at their defaults, from the library ``build`` names (system or pyaec)."""

    name = "speex"

    def __init__(self, build: Literal["system", "pyaec"]) -> None:
        self.build = build
        self._fn: dict[str, Any] = {}
        if build == "system":
            path = system_speexdsp()
            if path is None:
                raise ImportError("libspeexdsp is not installed (apt-get install libspeexdsp1)", name="speexdsp")
            lib = ctypes.CDLL(path)
            addresses = {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0 for name in FUNCTIONS}
            self._echo_ctl = lib.speex_echo_ctl
            self._echo_ctl.argtypes, self._echo_ctl.restype = [_HANDLE, ctypes.c_int, ctypes.c_void_p], ctypes.c_int
        else:
            lib, lib_path = load_pyaec()
            symbols = elf_functions(lib_path)
            if "AecNew" not in symbols or any(name not in symbols for name in FUNCTIONS):
                raise UnexpectedBuild(f"{lib_path} has no speexdsp symbol table (a stripped pyaec build)", name="pyaec")
            base = (ctypes.cast(lib.AecNew, ctypes.c_void_p).value or 0) - symbols["AecNew"]
            addresses = {name: base + symbols[name] for name in FUNCTIONS}
        self._fn = {name: ctypes.CFUNCTYPE(restype, *argtypes)(addresses[name])
                    for name, (restype, argtypes) in FUNCTIONS.items()}
        self._lib = lib  # keeps the library loaded while its functions are used
        self._echo: int | None = None
        self._pre: int | None = None
        self.reset()

    def reset(self) -> None:
        self.close()
        fn = self._fn
        self._echo = fn["speex_echo_state_init"](FRAME, SPEEX_TAIL)
        self._pre = fn["speex_preprocess_state_init"](FRAME, RATE)
        if not self._echo or not self._pre:
            raise RkvoiceError(Stage.HEAR, "aec-failed", f"speexdsp ({self.build}) could not create an echo canceller")
        if self.build == "system":
            rate = ctypes.c_int(RATE)
            self._echo_ctl(self._echo, SET_SAMPLING_RATE, ctypes.byref(rate))
        else:
            self._set_fixed_point_rate()
        fn["speex_preprocess_ctl"](self._pre, SET_ECHO_STATE, self._echo)

    def _set_fixed_point_rate(self) -> None:
        """What SPEEX_ECHO_SET_SAMPLING_RATE does in speexdsp 1.2.1's fixed-point 64-bit build (mdf.c):
        ``int32 sampling_rate`` after 9 ints, then ``int16 spec_average, beta0, beta_max``, and ``int16
        preemph, notch_radius`` at byte 288. Each field must hold speexdsp's 8 kHz value first."""
        ints = ctypes.cast(self._echo or 0, ctypes.POINTER(ctypes.c_int32))
        shorts = ctypes.cast((self._echo or 0) + 40, ctypes.POINTER(ctypes.c_int16))
        notch = ctypes.cast((self._echo or 0) + NOTCH_AT, ctypes.POINTER(ctypes.c_int16))

        def constants(rate: int) -> tuple[int, int, int]:
            return (FRAME << 15) // rate, (FRAME << 16) // rate, (FRAME << 14) // rate

        if (ints[0] != FRAME or ints[9] != 8000 or (shorts[0], shorts[1], shorts[2]) != constants(8000)
                or (notch[0], notch[1]) != (Q15_0_9, Q15_0_9)):
            self.close()
            raise UnexpectedBuild("pyaec's speexdsp state is not laid out as speexdsp 1.2.1's fixed-point "
                                  "build (another pyaec version?)", name="pyaec")
        ints[9] = RATE
        shorts[0], shorts[1], shorts[2] = constants(RATE)
        notch[1] = Q15_0_982

    def process(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        out = np.empty(FRAME, np.int16)
        self._fn["speex_echo_cancellation"](self._echo, _pcm(mic), _pcm(ref), _pcm(out))
        self._fn["speex_preprocess_run"](self._pre, _pcm(out))
        return out

    def close(self) -> None:
        if self._pre:
            self._fn["speex_preprocess_state_destroy"](self._pre)
            self._pre = None
        if self._echo:
            self._fn["speex_echo_state_destroy"](self._echo)
            self._echo = None

    def __del__(self) -> None:
        if self._fn:
            self.close()


class PyaecWrapperCanceller:
    """pyaec's own entry points (AecNew: the canceller at its 8 kHz constants + the preprocessor),
    for a pyaec build whose speexdsp symbols are stripped."""

    name = "speex"

    def __init__(self) -> None:
        lib, _path = load_pyaec()
        lib.AecNew.argtypes, lib.AecNew.restype = [ctypes.c_size_t, ctypes.c_int32, ctypes.c_int32, ctypes.c_bool], _HANDLE
        lib.AecCancelEcho.argtypes, lib.AecCancelEcho.restype = [_HANDLE, _PCM, _PCM, _PCM, ctypes.c_size_t], None
        lib.AecDestroy.argtypes, lib.AecDestroy.restype = [_HANDLE], None
        self._lib = lib
        self._aec: int | None = None
        self.reset()

    def reset(self) -> None:
        self.close()
        self._aec = self._lib.AecNew(FRAME, SPEEX_TAIL, RATE, True)
        if not self._aec:
            raise RkvoiceError(Stage.HEAR, "aec-failed", "speexdsp could not create an echo canceller")

    def process(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        out = np.empty(FRAME, np.int16)
        self._lib.AecCancelEcho(self._aec, _pcm(mic), _pcm(ref), _pcm(out), FRAME)
        return out

    def close(self) -> None:
        if self._aec:
            self._lib.AecDestroy(self._aec)
            self._aec = None

    def __del__(self) -> None:
        self.close()
