"""Rewrite a published Matcha ONNX graph into a fixed-shape graph that rknn-toolkit2 can build.

The published export (icefall/sherpa-onnx ``model-steps-N.onnx``: ``x``, ``x_length``,
``noise_scale``, ``length_scale`` -> ``mel``) sizes everything after the duration predictor by a
data-dependent frame count: ``Range(0, T')`` builds the frame mask (T' = the true frame count T
rounded up for the U-Net), ``CumSum`` + ``Range`` build the alignment path, ``Ceil`` rounds
durations, ``RandomNormalLike`` draws the ODE start noise, and a final ``Slice`` cuts the mel at T.
The NPU compiler needs static shapes. For a token bucket K and a frame window W this module

1. replaces ``RandomNormalLike`` by a model input ``noise`` [1, n_mels, W] (the caller draws it:
   reproducible, and the same noise can be fed to the original graph to compare the two),
2. fixes ``x`` to [1, K] and replaces every data-dependent ``Range`` limit by W and every
   data-dependent ``Slice`` end by "to the end", refusing any other data-dependent shape input,
3. replaces ``Ceil(x)`` by ``-Floor(-x)`` and ``CumSum`` over the K durations by a MatMul with a
   constant triangular matrix,
4. keeps the true frame count T as a second output ``mel_frames`` (float32 [1]), so the engine cuts
   the mel exactly instead of guessing, and
5. masks the decoder to the length the original would have used (T'): every GroupNorm (exported as
   Reshape -> InstanceNormalization) computes its statistics over the first T' frames only, and
   every decoder attention gets -1e4 on keys at or beyond T'. Without this the padded frames leak
   into the mel (measured: 39 dB at 64 tokens, 9 dB at 20 tokens); with it the fixed graph matches
   the original to float rounding.

Everything here needs only ``onnx`` and ``numpy`` (plus ``onnxsim`` for the shape folding), so it
runs in the toolkit venv on a PC or on the board.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matcha_mask import DEC_LEN, mask_decoder
from onnx_edit import (
    GraphError,
    const as _const,
    constant_value as _constant_value,
    elem_type as _elem_type,
    feeds_output as _feeds_output,
    node as _node,
    output_dims as _output_dims,
    producers as _producers,
    rename_input as _rename_input,
    set_input_shape as _set_input_shape,
    shape as _shape,
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


def fix_lengths(model: Any, rw: Rewrite) -> None:
    """Range limits -> W (keeping T' as an output), Slice ends -> end; T as the ``mel_frames`` output."""
    import onnx

    graph = model.graph
    ranges, slices = find_length_points(model)
    if not ranges:
        raise GraphError("no data-dependent Range found: is this the dynamic published Matcha export?")
    limits = {n.input[1] for n in ranges}
    if len(limits) != 1:
        raise GraphError(f"expected one frame-count tensor feeding the frame Ranges, found {sorted(limits)}")
    dec_len = limits.pop()
    for n in ranges:
        dtype = _elem_type(model, n.input[0])
        np_type = onnx.helper.tensor_dtype_to_np_dtype(dtype) if dtype else np.int64
        n.input[1] = _const(graph, f"{n.name}_fixed_limit", np.array(rw.frames, dtype=np_type))
        rw.count("Range")
    mel_slice = None
    for n in slices:
        ends = n.input[2]
        n.input[2] = _const(graph, f"{n.name}_fixed_end", np.array([np.iinfo(np.int64).max], np.int64))
        rw.count("Slice")
        if _feeds_output(model, n.output[0], "mel"):
            mel_slice = ends
    if mel_slice is None:  # an export that returns the decoder's whole length: T' is the frame count
        log.warning("no data-dependent Slice cuts the mel: reporting the decoder length as mel_frames")
        mel_slice = dec_len
    frames_f = _node(graph, "Cast", [mel_slice], FRAMES + "_f", to=onnx.TensorProto.FLOAT)
    _node(graph, "Reshape", [frames_f, _const(graph, FRAMES + "_shape", np.array([1], np.int64))], FRAMES)
    dec_f = _node(graph, "Cast", [dec_len], DEC_LEN + "_f", to=onnx.TensorProto.FLOAT)
    _node(graph, "Reshape", [dec_f, _const(graph, DEC_LEN + "_shape", np.array([1], np.int64))], DEC_LEN)
    graph.output.append(onnx.helper.make_tensor_value_info(FRAMES, onnx.TensorProto.FLOAT, [1]))
    graph.output.append(onnx.helper.make_tensor_value_info(DEC_LEN, onnx.TensorProto.FLOAT, [1]))


def replace_ceil(model: Any, rw: Rewrite) -> None:
    """Ceil(x) -> -Floor(-x): the toolkit has no Ceil."""
    graph = model.graph
    for n in [n for n in graph.node if n.op_type == "Ceil"]:
        idx = list(graph.node).index(n)
        x, y = n.input[0], n.output[0]
        graph.node.remove(n)
        from onnx import helper

        new = [helper.make_node("Neg", [x], [y + "_neg"], name=y + "_neg"),
               helper.make_node("Floor", [y + "_neg"], [y + "_floor"], name=y + "_floor"),
               helper.make_node("Neg", [y + "_floor"], [y], name=y + "_ceil")]
        for k, m in enumerate(new):
            graph.node.insert(idx + k, m)
        rw.count("Ceil")


def replace_cumsum(model: Any, rw: Rewrite) -> None:
    """CumSum over the last axis of a static [.., K] tensor -> MatMul with an upper-triangular K x K."""
    import onnx

    graph = model.graph
    prods = _producers(graph)
    for n in [n for n in graph.node if n.op_type == "CumSum"]:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        if attrs.get("exclusive", 0) or attrs.get("reverse", 0):
            raise GraphError(f"{n.name}: exclusive/reverse CumSum is not supported")
        axis = _constant_value(graph, prods, n.input[1])
        shape = _shape(model, n.input[0])
        if axis is None or shape is None:
            raise GraphError(f"{n.name}: CumSum needs a constant axis and a static input shape")
        axis = int(np.asarray(axis).reshape(-1)[0]) % len(shape)
        if axis != len(shape) - 1:
            raise GraphError(f"{n.name}: CumSum over axis {axis} of {shape} (only the last axis is supported)")
        k = shape[-1]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(_elem_type(model, n.input[0]) or onnx.TensorProto.FLOAT)
        tri = np.triu(np.ones((k, k), dtype=dtype))
        idx = list(graph.node).index(n)
        graph.node.remove(n)
        graph.node.insert(idx, onnx.helper.make_node("MatMul", [n.input[0], _const(graph, n.output[0] + "_tri", tri)],
                                                     [n.output[0]], name=n.output[0] + "_matmul"))
        rw.count("CumSum")


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


def rewrite(model: Any, tokens: int, frames: int, fuse_qkv: bool = False) -> tuple[Any, Any, Rewrite]:
    """(fixed graph, reference graph with T' output, report) for one token bucket and frame window."""
    import onnx

    check_matcha(model)
    if frames % 4:
        raise GraphError(f"--frames {frames}: use a multiple of 4 (the decoder halves the length twice)")
    if frames <= 2 * tokens:
        raise GraphError(f"--frames {frames} is too small for a {tokens}-token bucket (a token lasts several "
                         f"frames); pass a larger --frames, or none for the default")
    rw = Rewrite(tokens=tokens, frames=frames, vocab=vocab_size(model),
                 pad_id=int({p.key: p.value for p in model.metadata_props}.get("pad_id", 0)))
    out_shape = _output_dims(model, "mel")
    rw.n_mels = out_shape[1] if out_shape and isinstance(out_shape[1], int) else 80
    m = onnx.ModelProto()
    m.CopyFrom(model)
    noise_as_input(m, rw.n_mels, frames)
    _set_input_shape(m, "x", [1, tokens])
    _set_input_shape(m, "x_length", [1])
    for name in ("noise_scale", "length_scale"):
        _set_input_shape(m, name, [1])
    fix_lengths(m, rw)
    replace_ceil(m, rw)
    _toposort(m.graph)
    m = onnx.shape_inference.infer_shapes(simplify(m, fuse_qkv))
    replace_cumsum(m, rw)
    mask_decoder(m, rw)
    _toposort(m.graph)
    m = onnx.shape_inference.infer_shapes(simplify(m, fuse_qkv))
    reference = onnx.ModelProto()
    reference.CopyFrom(m)
    outs = [o for o in m.graph.output if o.name != DEC_LEN]
    del m.graph.output[:]
    m.graph.output.extend(outs)
    m = simplify(m, fuse_qkv)
    left = sorted({n.op_type for n in m.graph.node} & {"Range", "CumSum", "Ceil", "RandomNormalLike", "Loop", "If"})
    if left:
        raise GraphError(f"rewrite left unsupported ops: {left}")
    _copy_metadata(model, m, rw)
    _copy_metadata(model, reference, rw)
    return m, reference, rw


def _copy_metadata(src: Any, dst: Any, rw: Rewrite) -> None:
    meta = {p.key: p.value for p in src.metadata_props}
    meta.update({"rkvoice_tokens": str(rw.tokens), "rkvoice_frames": str(rw.frames),
                 "rkvoice_rewrite": ",".join(f"{k}={v}" for k, v in sorted(rw.replaced.items()))})
    del dst.metadata_props[:]
    for k, v in meta.items():
        p = dst.metadata_props.add()
        p.key, p.value = k, v


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
    """Frame window for a token bucket: the field's 64 tokens -> 600 (599 in seeds/001), rounded up to 4."""
    return int(-(-int(np.ceil(tokens * frames_per_token)) // 4) * 4)
