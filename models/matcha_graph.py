"""What the Matcha split (models/matcha_split.py) needs to know about a published Matcha ONNX graph.

The published export (icefall/sherpa-onnx ``model-steps-N.onnx``: ``x``, ``x_length``,
``noise_scale``, ``length_scale`` -> ``mel``) sizes everything after the duration predictor by a
data-dependent frame count: ``Range(0, T')`` builds the frame mask (T' = the true frame count T
rounded up for the U-Net), ``CumSum`` builds the alignment path, ``Ceil`` rounds durations,
``RandomNormalLike`` draws the ODE start noise, and a final ``Slice`` cuts the mel at T.

Here: the I/O check, the ODE noise as a model input ``noise`` (the caller draws it: reproducible,
and the same noise can be fed to the original graph and to the split to compare them), the
data-dependence analysis that finds the frame Range and the mel Slice (refusing any other
data-dependent shape), the vocabulary size, onnxsim with q/k/v kept separate, and the original
graph with its noise as an input and T' as an output (check A's reference). An earlier version
rewrote the whole graph to a fixed shape (Ceil -> -Floor(-x), CumSum -> triangular MatMul, Range
limits -> W); with the durations on the CPU (the split) none of that is needed any more.

Everything here needs only ``onnx`` and ``numpy`` (plus ``onnxsim``), so it runs in the toolkit
venv on a PC or on the board.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matcha_mask import DEC_LEN
from onnx_edit import (
    GraphError,
    const as _const,
    constant_value as _constant_value,
    node as _node,
    producers as _producers,
    rename_input as _rename_input,
    toposort as _toposort,
)

log = logging.getLogger("matcha_graph")

MATCHA_INPUTS = ("x", "x_length", "noise_scale", "length_scale")
NOISE = "noise"
FRAMES = "mel_frames"
SHAPE_INPUTS = {  # op -> indices of inputs that are shapes/extents (must not be data-dependent)
    "Reshape": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Tile": (1,), "Pad": (1,),
    "Resize": (1, 2, 3), "Upsample": (1,), "TopK": (1,), "OneHot": (1,),
}


@dataclass
class Rewrite:
    """What the rewrite did (for the report and the tests)."""

    tokens: int
    frames: int
    n_mels: int = 80
    vocab: int = 0
    pad_id: int = 0
    replaced: dict[str, int] = field(default_factory=dict)
    decoder_lengths: list[int] = field(default_factory=list)

    def count(self, what: str) -> None:
        self.replaced[what] = self.replaced.get(what, 0) + 1


# --------------------------------------------------------------------------------------------
# checks and the noise input


def check_matcha(model: Any) -> None:
    """Refuse what is not a published-style Matcha acoustic graph, naming the expected I/O."""
    names = [i.name for i in model.graph.input]
    outs = [o.name for o in model.graph.output]
    missing = [n for n in MATCHA_INPUTS if n not in names]
    if missing or "mel" not in outs:
        raise GraphError(f"not a Matcha acoustic model: inputs {names}, outputs {outs}; expected inputs "
                         f"{list(MATCHA_INPUTS)} and output mel (sherpa-onnx matcha-icefall-*/model-steps-N.onnx)")
    if FRAMES in outs or NOISE in names:
        raise GraphError("this graph is already rewritten (it has mel_frames/noise); give the published ONNX")


def noise_as_input(model: Any, n_mels: int, frames: int | str) -> str:
    """Replace the one RandomNormalLike by a graph input ``noise`` (times its scale, plus its mean)."""
    import onnx

    graph = model.graph
    rnd = [n for n in graph.node if n.op_type in ("RandomNormalLike", "RandomNormal")]
    if len(rnd) != 1:
        raise GraphError(f"expected one RandomNormalLike (the ODE start noise), found {len(rnd)}")
    node = rnd[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    graph.input.append(onnx.helper.make_tensor_value_info(NOISE, onnx.TensorProto.FLOAT, [1, n_mels, frames]))
    out = node.output[0]
    graph.node.remove(node)
    value = NOISE
    if float(attrs.get("scale", 1.0)) != 1.0:
        value = _node(graph, "Mul", [value, _const(graph, out + "_scale", np.array(attrs["scale"], np.float32))],
                      out + "_scaled")
    if float(attrs.get("mean", 0.0)) != 0.0:
        value = _node(graph, "Add", [value, _const(graph, out + "_mean", np.array(attrs["mean"], np.float32))],
                      out + "_shifted")
    _rename_input(graph, out, value)
    return value


# --------------------------------------------------------------------------------------------
# data-dependence


def tainted_tensors(model: Any, sources: Iterable[str]) -> set[str]:
    """Tensors whose *values* depend on the sources (Shape/Size outputs depend only on shapes)."""
    tainted = set(sources)
    for n in model.graph.node:  # nodes are topologically sorted in a valid ONNX graph
        if n.op_type in ("Shape", "Size"):
            continue
        if any(i in tainted for i in n.input if i):
            tainted.update(n.output)
    return tainted


def find_length_points(model: Any) -> tuple[list[Any], list[Any]]:
    """Ranges with a data-dependent limit and Slices with a data-dependent end (the frame count)."""
    data = [i.name for i in model.graph.input]
    tainted = tainted_tensors(model, data)
    ranges, slices = [], []
    for n in model.graph.node:
        if n.op_type == "Range" and (n.input[0] in tainted or n.input[1] in tainted or n.input[2] in tainted):
            if n.input[0] in tainted or n.input[2] in tainted:
                raise GraphError(f"{n.name}: Range with a data-dependent start/step is not supported")
            ranges.append(n)
        elif n.op_type == "Slice" and any(i in tainted for i in n.input[1:] if i):
            if n.input[1] in tainted or (len(n.input) > 4 and n.input[4] in tainted):
                raise GraphError(f"{n.name}: Slice with a data-dependent start/step is not supported")
            slices.append(n)
        elif n.op_type in SHAPE_INPUTS:
            bad = [n.input[k] for k in SHAPE_INPUTS[n.op_type] if k < len(n.input) and n.input[k] in tainted]
            if bad:
                raise GraphError(f"{n.name}: {n.op_type} takes a data-dependent shape ({bad[0]}); the rewrite "
                                 "handles data-dependent Range limits and Slice ends only")
    return ranges, slices


# --------------------------------------------------------------------------------------------
# the rewrite


def vocab_size(model: Any) -> int:
    """Rows of the embedding table the token ids index (the Gather fed by ``x``)."""
    graph = model.graph
    prods = _producers(graph)
    ids = {"x"}
    for n in graph.node:  # x itself or a Cast of it indexes the table
        if n.op_type == "Cast" and n.input[0] in ids:
            ids.add(n.output[0])
        if n.op_type == "Gather" and n.input[1] in ids:
            table = _constant_value(graph, prods, n.input[0])
            if table is not None:
                return int(table.shape[0])
    raise GraphError("found no embedding Gather on x: cannot tell the vocabulary size")


def simplify(model: Any, fuse_qkv: bool = False) -> Any:
    """onnxsim with static shapes; ``fuse_qkv`` stays off: merged q/k/v MatMuls are read in the wrong
    head order by rknn-toolkit2's fused attention (simulator ~1-13 dB instead of 60+)."""
    import onnxsim

    skipped = [] if fuse_qkv else ["fuse_qkv"]
    out, ok = onnxsim.simplify(model, skipped_optimizers=skipped)
    if not ok:
        raise GraphError("onnxsim could not validate the simplified graph")
    return out


def original_with_noise(model: Any, n_mels: int = 80, noise: bool = True) -> Any:
    """The original dynamic graph with its noise as an input (to compare against the rewrite), and T'
    exposed as ``_decoder_frames`` so the caller can size that noise (``noise=False``: keep the
    graph's own noise, only expose T', e.g. to probe how many frames a bucket needs)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    if noise:
        noise_as_input(m, n_mels, "T")
    ranges, _ = find_length_points(m)
    dec_len = ranges[0].input[1]
    f = _node(m.graph, "Cast", [dec_len], DEC_LEN + "_f", to=onnx.TensorProto.FLOAT)
    _node(m.graph, "Reshape", [f, _const(m.graph, DEC_LEN + "_shape", np.array([1], np.int64))], DEC_LEN)
    m.graph.output.append(onnx.helper.make_tensor_value_info(DEC_LEN, onnx.TensorProto.FLOAT, [1]))
    _toposort(m.graph)
    return m


def default_frames(tokens: int, frames_per_token: float = 9.375) -> int:
    """Frame window for a token bucket: the field's 64 tokens -> 600 (599 in the board figures of docs/performance.md), rounded up to 4."""
    return int(-(-int(np.ceil(tokens * frames_per_token)) // 4) * 4)
