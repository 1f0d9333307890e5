"""The installed Matcha decoder buckets and Vocos frame buckets, and what each model declares.

``models/convert_rknn.py matcha|vocos`` writes, per bucket, ``matcha-t{K}.rknn`` (a split Matcha's
decoder, next to the CPU encoder it names) / ``vocos-f{N}.rknn``, its fixed-shape ``.onnx`` twin and
a ``.json`` sidecar (inputs, outputs, the ONNX metadata). At load every model's declared I/O
(onnxruntime's for .onnx; for .rknn the sidecar, checked against RKNNLite's query where it has one)
is checked: a model the engine cannot feed, or a sidecar that disagrees with it, is a load-time
error naming the file and the fix, never garbage audio later. The published dynamic-shape ONNX
files load too, as *dynamic* buckets (size 0, any length).
"""

from __future__ import annotations

import glob
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.config import MatchaConfig
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.needs import module_found
from rkvoice.npu import runtime as npu_runtime
from rkvoice.npu.runtime import ModelRuntime, OnnxModel, RknnModel, TensorSpec

log = logging.getLogger(__name__)

MATCHA_INPUTS = ("x", "x_length", "noise_scale", "length_scale", "noise", "sid")
"""Every input the engine knows how to feed a Matcha graph."""
DECODER_INPUTS = ("mu", "mask", "noise", "noise_scale", "decoder_frames")
"""A split Matcha's decoder (models/matcha_split.py): the aligned encoder output, its frame mask, the
ODE noise, its scale and T' (the frame count rounded up to 4); the encoder runs on the CPU."""
ENCODER_FILE = "matcha-encoder.onnx"
_INT = ("int64", "int32")
_FLOAT = ("float32", "float16")


def _bad(path: Path, why: str, fix: str = "rebuild it with models/convert_rknn.py") -> RkvoiceError:
    return RkvoiceError(Stage.TTS, "bad-model", f"{path}: {why}; {fix}")


@dataclass
class Bucket:
    """One loaded model of fixed (or dynamic) size."""

    kind: str
    """"matcha" or "vocos"."""
    path: Path
    model: ModelRuntime
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    meta: dict[str, str]
    size: int = 0
    """Tokens (a Matcha decoder's bucket) or frames (Vocos) the model takes; 0 = any (dynamic shape)."""
    window: int = 0
    """Matcha decoder: mel frames of its fixed window (0 = dynamic). Vocos: = size."""
    encoder: Path | None = None
    """A split Matcha's decoder: the CPU encoder it belongs to (None: the dynamic whole graph)."""
    n_mels: int = 80
    mel_index: int = 0
    """A Matcha model's mel among its outputs."""

    @property
    def dynamic(self) -> bool:
        return self.size == 0

    @property
    def label(self) -> str:
        return "dynamic" if self.dynamic else ("t" if self.kind == "matcha" else "f") + str(self.size)

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run with inputs by name (cast to the declared types); outputs in declared order."""
        arrays = [np.ascontiguousarray(np.asarray(feed[s.name]).astype(s.dtype, copy=False)) for s in self.inputs]
        return self.model.run(arrays)

    def mel(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """A Matcha model's mel [1, n_mels, frames] (float32) for ``feed``."""
        mel = np.asarray(self.run(feed)[self.mel_index]).astype(np.float32, copy=False)
        return mel[None] if mel.ndim == 2 else mel


# -- finding the files ---------------------------------------------------------------------

def find_models(base: Path, pattern: str, runtime: str = "auto") -> list[Path]:
    """Model files matching ``pattern`` (a glob, relative to ``base`` unless absolute).

    A pattern ending in .rknn or .onnx is taken as is. Without a suffix the runtime decides:
    ``rknn`` -> the .rknn files, ``onnx`` -> their .onnx twins, ``auto`` -> .rknn when
    rknn-toolkit-lite2 is importable (the board) and there are .rknn files, else .onnx
    (``runtime`` is checked where the config loads: MatchaConfig.runtime).
    """
    full = str(base / pattern)

    def matches(suffix: str) -> list[Path]:
        return sorted(Path(p) for p in glob.glob(full + suffix) if Path(p).is_file())

    if pattern.endswith((".rknn", ".onnx")):
        return matches("")
    rknn, onnx = matches(".rknn"), matches(".onnx")
    if runtime == "rknn" or (runtime == "auto" and rknn and (module_found("rknnlite") or not onnx)):
        return rknn
    return onnx


def voice_files(base: Path, mc: MatchaConfig) -> dict[str, Path]:
    """Every file a Matcha voice in ``base`` loads (a missing bucket is named by its expected path)."""
    out: dict[str, Path] = {}
    for kind, pattern in (("acoustic", mc.acoustic), ("vocoder", mc.vocoder)):
        found = find_models(base, pattern, mc.runtime)
        if not found:  # named by the path expected (the board install builds .rknn)
            suffix = "" if pattern.endswith((".rknn", ".onnx")) else ".onnx" if mc.runtime == "onnx" else ".rknn"
            out[kind] = base / (pattern + suffix)
        for p in found:
            out[f"{kind} {p.stem}"] = p
            if p.suffix == ".rknn":
                out[f"{kind} {p.stem} sidecar"] = p.with_suffix(".json")
            if kind == "acoustic" and (encoder := named_encoder(p)) is not None:
                out["acoustic encoder"] = encoder
    return out | {"lexicon": base / mc.lexicon, "tokens": base / mc.tokens}


def named_encoder(model: Path) -> Path | None:
    """The CPU encoder a split decoder's sidecar names (None: none named, or no readable sidecar;
    load() reports a bad sidecar with its fix)."""
    try:
        side = json.loads(model.with_suffix(".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    encoder = side.get("encoder") if isinstance(side, dict) else None
    return model.parent / str(encoder) if encoder else None


def read_sidecar(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RkvoiceError(Stage.TTS, "missing-model", f"cannot read {path}: {exc.strerror}; models/convert_rknn.py "
                           "writes it next to the model") from exc
    except json.JSONDecodeError as exc:
        raise _bad(path, f"the sidecar is not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), list) or not isinstance(data.get("outputs"), list):
        raise _bad(path, "the sidecar lacks its inputs/outputs lists")
    return data


# -- loading and checking ------------------------------------------------------------------

def load_bucket(path: Path, kind: str, threads: int = 1, core_mask: str = "auto") -> Bucket:
    """Load one model and check what it declares against its sidecar and against what the engine feeds."""
    side_path = path.with_suffix(".json")
    side = read_sidecar(side_path) if side_path.is_file() else None
    if path.suffix == ".rknn" and side is None:
        raise RkvoiceError(Stage.TTS, "missing-model", f"{path} has no sidecar {side_path.name} (its inputs and "
                           "outputs); rebuild it with models/convert_rknn.py, which writes both")
    if side is not None and side.get("model") not in (None, kind):
        raise _bad(side_path, f"the sidecar describes a {side.get('model')!r} model where a {kind} model belongs")
    what = "Matcha acoustic" if kind == "matcha" else "Vocos vocoder"
    # looked up at call time: a test may run the .rknn files elsewhere (tests/npu_sim.py: the simulator)
    model = npu_runtime.open_model(path, threads=threads, core_mask=core_mask, what=what)
    model.load()
    try:
        bucket = _declared(path, kind, model, side)
        (_check_matcha if kind == "matcha" else _check_vocos)(bucket, side)
    except BaseException:
        model.close()
        raise
    return bucket


def check_pairing(acoustic: list[Bucket], vocoders: list[Bucket], n_fft: int, bins: int) -> None:
    """Every Matcha's mel bins are what every Vocos takes, and each Vocos gives the ``bins`` frequency
    bins the ISTFT of ``n_fft`` needs."""
    for b in acoustic:
        for v in vocoders:
            if b.n_mels != v.n_mels:
                raise RkvoiceError(Stage.TTS, "bad-model", f"{b.path.name} makes {b.n_mels} mel bins but "
                                   f"{v.path.name} takes {v.n_mels}; use the vocoder made for this voice")
    for v in vocoders:
        gives = v.outputs[0].shape[1]
        if isinstance(gives, int) and gives != bins:
            raise RkvoiceError(Stage.TTS, "bad-model", f"{v.path.name} gives {gives} frequency bins but n_fft "
                               f"{n_fft} needs {bins}; check its n_fft metadata")


def _declared(path: Path, kind: str, model: ModelRuntime, side: dict[str, Any] | None) -> Bucket:
    side_in = [TensorSpec.from_json(i) for i in side["inputs"]] if side else None
    side_out = [TensorSpec.from_json(o) for o in side["outputs"]] if side else None
    meta = {str(k): str(v) for k, v in ((side or {}).get("metadata") or {}).items()}
    if isinstance(model, OnnxModel):
        inputs, outputs = model.input_specs(), model.output_specs()
        meta.update(model.metadata)
        if side_in is not None and side_out is not None:
            _same(path, "inputs", side_in, inputs)
            _same(path, "outputs", side_out, outputs)
    else:
        assert side_in is not None and side_out is not None
        inputs, outputs = side_in, side_out
        if isinstance(model, RknnModel):
            queried = model.query_io()
            if queried is None:
                log.debug("%s: RKNNLite offers no I/O query; the sidecar is trusted", path)
            else:
                _same(path, "inputs", inputs, queried[0], rknn=True)
                _same(path, "outputs", outputs, queried[1], rknn=True)
    return Bucket(kind, path, model, inputs, outputs, meta)


def _same(path: Path, what: str, side: list[TensorSpec], model: list[TensorSpec], rknn: bool = False) -> None:
    """The sidecar's specs are the model's own. RKNN may report its own layout and compute type:
    there only the count, names and element counts are compared."""
    if rknn:
        differ = len(side) != len(model) or any(
            (q.name and q.name != s.name) or (q.size is not None and s.size is not None and q.size != s.size)
            for s, q in zip(side, model))
    else:
        differ = [s.describe() for s in side] != [g.describe() for g in model]
    if differ:
        raise _bad(path, f"the model reports {what} {'; '.join(g.describe() for g in model)} but the sidecar's "
                   f"{what} are {'; '.join(s.describe() for s in side)}",
                   "the sidecar belongs to another build: rebuild both with models/convert_rknn.py")


def _check_name(b: Bucket, prefix: str, unit: str) -> None:
    """A file named ``{prefix}{N}`` must take N ``unit``."""
    m = re.fullmatch(prefix + r"(\d+)", b.path.stem)
    if m and int(m[1]) != b.size:
        raise _bad(b.path, f"the file is named for {int(m[1])} {unit} but the model takes {b.size}")


def _agree(path: Path, side: dict[str, Any] | None, key: str, value: int, what: str) -> None:
    if side is not None and side.get(key) is not None and int(side[key]) != value:
        raise _bad(path.with_suffix(".json"), f"the sidecar says {key} {side[key]} but the model takes {value} {what}")


def _check_decoder(b: Bucket, side: dict[str, Any] | None) -> None:
    """A split Matcha's decoder bucket: mu [1, C, W], mask [1, 1, W], noise [1, n_mels, W] -> mel."""
    spec = {s.name: s for s in b.inputs}
    unknown = [n for n in spec if n not in DECODER_INPUTS]
    mel = next((o for o in b.outputs if o.name == "mel"), None)
    if unknown or "mu" not in spec or "mask" not in spec or mel is None or not mel.fixed or len(mel.shape) != 3:
        raise _bad(b.path, f"not a Matcha decoder the engine can feed: inputs {', '.join(spec)}, outputs "
                   f"{', '.join(o.describe() for o in b.outputs)} (it feeds {', '.join(DECODER_INPUTS)} -> mel)",
                   "convert the published ONNX with models/convert_rknn.py matcha")
    b.mel_index = b.outputs.index(mel)
    b.n_mels, b.window = int(mel.shape[1]), int(mel.shape[2])
    for s in spec.values():
        if s.dtype not in _FLOAT:
            raise _bad(b.path, f"input {s.describe()} should be float32")
    want = {"mask": (1, 1, b.window), "noise": (1, b.n_mels, b.window), "noise_scale": (1,), "decoder_frames": (1,)}
    for name, shape in want.items():
        if name in spec and spec[name].shape != shape:
            raise _bad(b.path, f"input {spec[name].describe()} should be [{', '.join(map(str, shape))}]")
    if len(spec["mu"].shape) != 3 or spec["mu"].shape[2] != b.window:
        raise _bad(b.path, f"input {spec['mu'].describe()} should be [1, channels, {b.window}]")
    tokens = (side or {}).get("tokens") or b.meta.get("rkvoice_tokens")
    if not tokens:
        raise _bad(b.path, "a Matcha decoder without its token bucket (sidecar tokens / rkvoice_tokens metadata)")
    b.size = int(tokens)
    encoder = (side or {}).get("encoder") or b.meta.get("rkvoice_encoder") or ENCODER_FILE
    b.encoder = b.path.parent / str(encoder)
    _check_name(b, "matcha-t", "tokens")
    _agree(b.path, side, "frames", b.window, "frames")


def _check_matcha(b: Bucket, side: dict[str, Any] | None) -> None:
    """A split Matcha's decoder bucket, or the dynamic whole graph (the published model-steps-3.onnx)."""
    spec = {s.name: s for s in b.inputs}
    if "mu" in spec:
        _check_decoder(b, side)
        return
    unknown = [n for n in spec if n not in MATCHA_INPUTS]
    if "x" not in spec or unknown:
        raise _bad(b.path, f"not a Matcha acoustic model the engine can feed: inputs {', '.join(spec)} "
                   f"(it feeds {', '.join(MATCHA_INPUTS)})",
                   "give the published model-steps-3.onnx or a bucket from models/convert_rknn.py matcha")
    x = spec["x"]
    if len(x.shape) == 2 and isinstance(x.shape[1], int):  # the converter's output before the split
        raise _bad(b.path, f"input {x.describe()}: a whole-graph Matcha bucket, which rkvoice no longer runs",
                   "rebuild the voice with ./install.sh --profile board (models/convert_rknn.py matcha)")
    for name, s in spec.items():
        want = _INT if name in ("x", "x_length", "sid") else _FLOAT
        if s.dtype not in want:
            raise _bad(b.path, f"input {s.describe()} should be {' or '.join(want)}")
        if name != "x" and name != "noise" and s.fixed and s.shape != (1,):
            raise _bad(b.path, f"input {s.describe()} should be one value [1]")
    if len(x.shape) != 2 or (isinstance(x.shape[0], int) and x.shape[0] != 1):
        raise _bad(b.path, f"input {x.describe()} should be [1, tokens]")
    mel_i = next((i for i, o in enumerate(b.outputs) if o.name == "mel"), None)
    if mel_i is None:
        mel_i = next((i for i, o in enumerate(b.outputs) if len(o.shape) == 3), None)
    if mel_i is None:
        raise _bad(b.path, f"no mel output [1, n_mels, frames] among {', '.join(o.describe() for o in b.outputs)}")
    b.mel_index = mel_i
    mel = b.outputs[mel_i]
    if isinstance(mel.shape[1], int):
        b.n_mels = mel.shape[1]
    if "noise" in spec:  # dynamic tokens: the mel length is the output's
        raise _bad(b.path, f"a dynamic-shape Matcha with input {spec['noise'].describe()}: the noise length "
                   "depends on the predicted durations, which the engine cannot know before the call",
                   "give the published model-steps-3.onnx (noise drawn inside) or a converted bucket")


def _check_vocos(b: Bucket, side: dict[str, Any] | None) -> None:
    if len(b.inputs) != 1 or len(b.inputs[0].shape) != 3 or b.inputs[0].dtype not in _FLOAT:
        raise _bad(b.path, f"not a Vocos vocoder: inputs {'; '.join(s.describe() for s in b.inputs)} (expected one "
                   "float mel input [1, n_mels, frames])", "give vocos-16khz-univ.onnx or models/convert_rknn.py vocos")
    if len(b.outputs) != 3 or any(len(o.shape) != 3 for o in b.outputs):
        raise _bad(b.path, f"not a Vocos vocoder: outputs {'; '.join(o.describe() for o in b.outputs)} (expected "
                   "mag, x, y [1, bins, frames])", "give vocos-16khz-univ.onnx or models/convert_rknn.py vocos")
    mels = b.inputs[0]
    if isinstance(mels.shape[1], int):
        b.n_mels = mels.shape[1]
    if not isinstance(mels.shape[2], int):
        return
    b.size = b.window = mels.shape[2]
    _check_name(b, "vocos-f", "frames")
    _agree(b.path, side, "frames", b.size, "frames")
