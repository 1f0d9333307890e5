"""Split a published Matcha ONNX graph at its length regulator: CPU encoder | numpy | NPU decoder.

The published export (``x``, ``x_length``, ``noise_scale``, ``length_scale`` -> ``mel``) runs the
text encoder and the duration predictor, rounds the durations up (``Ceil``), sums them (``CumSum``)
into an alignment path over a data-dependent frame count, multiplies the encoder output by that
path (``mu_y``), draws the ODE start noise (``RandomNormalLike``) and runs the flow-matching decoder
over ``T'`` frames (``T`` rounded up to 4), then cuts the mel at ``T``.

Computing the durations on the NPU in fp16 moves a token whose duration lies within fp16's error
of a whole frame by one frame (measured: 287 frames where fp32 gives 286), so this module cuts the
graph where the frame axis starts, like the FastSpeech2 NPU path (models/rknn_graphs.py regulate):

- **encoder** (``matcha-encoder.onnx``, dynamic shapes, onnxruntime fp32 on the CPU): the original
  nodes that compute the encoder output and the durations, unchanged; outputs ``mu_x`` [1, N, C]
  (the encoder output as the alignment MatMul reads it), ``cum_durations`` [1, N] (the CumSum the
  path is built from), ``mel_frames`` [1] (T, the original's own mel length) and ``decoder_frames``
  [1] (T'). Every frame count is then fp32 and equal to the original's by construction;
- **alignment** in numpy (``rkvoice.npu.length_regulator.align``): ``mu`` [1, C, W] and ``mask``
  [1, 1, W] for a fixed window W, exactly the original's ``mu_y`` and ``y_mask`` padded with zeros;
- **decoder** (``matcha-t{K}.onnx`` -> ``.rknn``): the original decoder nodes over W frames, with
  inputs ``mu``, ``mask``, ``noise`` [1, n_mels, W] (replacing ``RandomNormalLike``),
  ``noise_scale`` and ``decoder_frames`` (T' for the GroupNorm/attention masks of
  models/matcha_mask.py), output ``mel`` [1, n_mels, W]. No data-dependent op is left in it.

Only ``onnx``, ``numpy`` and ``onnxsim`` are needed (the toolkit venv, a PC or the board).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from matcha_graph import NOISE, Rewrite, check_matcha, find_length_points, simplify, tainted_tensors, vocab_size
from matcha_mask import DEC_LEN, mask_decoder
from onnx_edit import (
    GraphError,
    const as _const,
    consumers as _consumers,
    node as _node,
    producers as _producers,
    toposort as _toposort,
)

ENCODER_OUTPUTS = ("mu_x", "cum_durations", "mel_frames", "decoder_frames")
DECODER_INPUTS = ("mu", "mask", NOISE, "noise_scale", "decoder_frames")
DECODER_OUTPUT = "mel"
ENCODER_FILE = "matcha-encoder.onnx"


@dataclass
class Cut:
    """Tensor names of the original graph where it is cut."""

    mu_y: str
    """aligned encoder output [1, C, T'] (what RandomNormalLike copies the shape of)."""
    y_mask: str
    """float frame mask [1, 1, T'] the decoder multiplies by."""
    mu_xt: str
    """encoder output [1, N, C] as the alignment MatMul reads it."""
    cum: str
    """cumulative durations [1, N] (CumSum output)."""
    frames: str
    """T: the end of the final mel Slice."""
    dec_len: str
    """T': the limit of the frame Range."""
    noise: str
    """RandomNormalLike output."""
    mel_slice: str
    """name of the Slice node that cuts the mel at T."""


def _only(nodes: list[Any], what: str) -> Any:
    if len(nodes) != 1:
        raise GraphError(f"expected one {what}, found {len(nodes)}: not the published Matcha layout")
    return nodes[0]


def find_cut(model: Any) -> Cut:
    """Locate the length regulator's tensors in a published-style Matcha graph (refusing others)."""
    import onnx

    check_matcha(model)
    graph = model.graph
    prods, cons = _producers(graph), _consumers(graph)
    rnd = _only([n for n in graph.node if n.op_type in ("RandomNormalLike", "RandomNormal")], "RandomNormalLike")
    mu_y = rnd.input[0] if rnd.op_type == "RandomNormalLike" else ""
    cumsum = _only([n for n in graph.node if n.op_type == "CumSum"], "CumSum (the alignment path)")
    ranges, slices = find_length_points(model)
    limits = {n.input[1] for n in ranges}
    if len(limits) != 1:
        raise GraphError(f"expected one frame-count tensor feeding the frame Ranges, found {sorted(limits)}")
    dec_len = limits.pop()
    frame_side = tainted_tensors(model, [n.output[0] for n in ranges])
    # mu_y = Transpose(MatMul(path^T, mu_x^T)): the operand not on the frame axis is the encoder output
    tr = prods.get(mu_y)
    mm = prods.get(tr.input[0]) if tr is not None and tr.op_type == "Transpose" else None
    if mm is None or mm.op_type != "MatMul":
        raise GraphError("the decoder's mu is not Transpose(MatMul(path, encoder output)): unexpected Matcha layout")
    off_axis = [i for i in mm.input if i not in frame_side]
    if len(off_axis) != 1:
        raise GraphError(f"{mm.name}: cannot tell the encoder output from the alignment path")
    perm = [list(onnx.helper.get_attribute_value(a)) for a in tr.attribute if a.name == "perm"]
    if perm != [[0, 2, 1]]:
        raise GraphError(f"{tr.name}: expected a [0, 2, 1] transpose after the alignment MatMul")
    # y_mask: the frame Range -> Unsqueeze -> Less -> Unsqueeze -> Cast(float) chain
    y_mask, t = None, ranges[0].output[0]
    for _ in range(8):
        nxt = [c for c in cons.get(t, []) if c.op_type in ("Unsqueeze", "Less", "Cast", "Reshape")]
        if len(nxt) != 1:
            break
        t = nxt[0].output[0]
        to = [onnx.helper.get_attribute_value(a) for a in nxt[0].attribute if a.name == "to"]
        if nxt[0].op_type == "Cast" and to == [onnx.TensorProto.FLOAT]:
            y_mask = t
            break
    if y_mask is None:
        raise GraphError("found no float frame mask (Range -> Less -> Cast) feeding the decoder")
    mel_slices = [n for n in slices if _feeds(model, n.output[0], DECODER_OUTPUT)]
    mel_slice = _only(mel_slices, "data-dependent Slice cutting the mel")
    return Cut(mu_y=mu_y, y_mask=y_mask, mu_xt=off_axis[0], cum=cumsum.output[0], frames=mel_slice.input[2],
               dec_len=dec_len, noise=rnd.output[0], mel_slice=mel_slice.name)


def _feeds(model: Any, tensor: str, output: str) -> bool:
    from onnx_edit import feeds_output

    return feeds_output(model, tensor, output)


def _closure(graph: Any, outputs: list[str], stop: set[str]) -> tuple[list[Any], set[str]]:
    """Nodes needed for ``outputs`` when ``stop`` tensors are given; and the non-constant leaves reached."""
    prods = _producers(graph)
    consts = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    seen: set[str] = set()
    nodes: dict[int, Any] = {}
    leaves: set[str] = set()
    todo = list(outputs)
    while todo:
        t = todo.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        p = prods.get(t)
        if t in stop or p is None:
            if t not in consts or t in stop:
                leaves.add(t)
            continue
        nodes[id(p)] = p
        todo.extend(p.input)
    order = {id(n): k for k, n in enumerate(graph.node)}
    return sorted(nodes.values(), key=lambda n: order[id(n)]), leaves


def _subgraph(model: Any, nodes: list[Any], inputs: list[Any], outputs: list[Any], name: str) -> Any:
    import onnx

    used = {i for n in nodes for i in n.input}
    inits = [i for i in model.graph.initializer if i.name in used]
    graph = onnx.helper.make_graph(list(nodes), name, inputs, outputs, initializer=inits)
    out = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), producer_name="rkvoice")
    out.ir_version = model.ir_version
    for p in model.metadata_props:
        q = out.metadata_props.add()
        q.key, q.value = p.key, p.value
    return out


def encoder_graph(model: Any, cut: Cut) -> Any:
    """The CPU half: the original nodes up to the encoder output and the durations (dynamic shapes)."""
    import onnx

    wanted = [cut.mu_xt, cut.cum, cut.frames, cut.dec_len]
    nodes, leaves = _closure(model.graph, wanted, set())
    inputs = {i.name: i for i in model.graph.input}
    stray = sorted(leaves - set(inputs))
    if stray:
        raise GraphError(f"the encoder half needs tensors it cannot compute: {stray[:3]}")
    extra = []
    for src, dst, dtype in zip(wanted, ENCODER_OUTPUTS, ("f", "f", "i", "i")):
        if dtype == "f":
            extra.append(onnx.helper.make_node("Identity", [src], [dst], name=f"out_{dst}"))
        else:
            cast = onnx.helper.make_node("Cast", [src], [dst + "_i64"], name=f"cast_{dst}", to=onnx.TensorProto.INT64)
            shape = onnx.helper.make_tensor(dst + "_shape", onnx.TensorProto.INT64, [1], [1])
            extra += [cast, onnx.helper.make_node("Constant", [], [dst + "_shape"], name=f"shape_{dst}", value=shape),
                      onnx.helper.make_node("Reshape", [dst + "_i64", dst + "_shape"], [dst], name=f"out_{dst}")]
    outs = [onnx.helper.make_tensor_value_info("mu_x", onnx.TensorProto.FLOAT, [1, "N", "C"]),
            onnx.helper.make_tensor_value_info("cum_durations", onnx.TensorProto.FLOAT, [1, "N"]),
            onnx.helper.make_tensor_value_info("mel_frames", onnx.TensorProto.INT64, [1]),
            onnx.helper.make_tensor_value_info("decoder_frames", onnx.TensorProto.INT64, [1])]
    used = [inputs[n] for n in inputs if n in leaves]
    enc = _subgraph(model, nodes + extra, used, outs, "matcha_encoder")
    onnx.checker.check_model(enc)
    return enc


def decoder_graph(model: Any, cut: Cut, tokens: int, frames: int, fuse_qkv: bool = False) -> tuple[Any, Rewrite]:
    """The NPU half for a W-frame window: inputs mu, mask, noise, noise_scale, decoder_frames -> mel."""
    import onnx

    if frames % 4:
        raise GraphError(f"--frames {frames}: use a multiple of 4 (the decoder halves the length twice)")
    if frames <= 2 * tokens:
        raise GraphError(f"--frames {frames} is too small for a {tokens}-token bucket (a token lasts several "
                         f"frames); pass a larger --frames, or none for the default")
    rw = Rewrite(tokens=tokens, frames=frames, vocab=vocab_size(model),
                 pad_id=int({p.key: p.value for p in model.metadata_props}.get("pad_id", 0)))
    mel_dims = [d.dim_value if d.HasField("dim_value") else 0
                for o in model.graph.output if o.name == DECODER_OUTPUT for d in o.type.tensor_type.shape.dim]
    rw.n_mels = mel_dims[1] if len(mel_dims) == 3 and mel_dims[1] else 80
    m = onnx.ModelProto()
    m.CopyFrom(model)
    graph = m.graph
    # the mel is no longer cut at T inside the graph: the engine cuts at the encoder's mel_frames
    for n in graph.node:
        if n.name == cut.mel_slice:
            n.input[2] = _const(graph, f"{n.name}_to_end", np.array([np.iinfo(np.int64).max], np.int64))
            rw.count("Slice")
    renames = {cut.mu_y: "mu", cut.y_mask: "mask", cut.noise: NOISE, cut.dec_len: "_dec_len_in"}
    for n in graph.node:
        for k, name in enumerate(n.input):
            if name in renames:
                n.input[k] = renames[name]
    nodes, leaves = _closure(graph, [DECODER_OUTPUT], set(renames.values()) | {"noise_scale"})
    stray = sorted(leaves - set(renames.values()) - {"noise_scale"})
    if stray:
        raise GraphError(f"the decoder half depends on {stray[:3]} besides mu/mask/noise: unexpected Matcha layout")
    vi = onnx.helper.make_tensor_value_info
    inputs = [vi("mu", onnx.TensorProto.FLOAT, [1, _channels(model, cut), frames]),
              vi("mask", onnx.TensorProto.FLOAT, [1, 1, frames]),
              vi(NOISE, onnx.TensorProto.FLOAT, [1, rw.n_mels, frames]),
              vi("noise_scale", onnx.TensorProto.FLOAT, [1]),
              vi("decoder_frames", onnx.TensorProto.FLOAT, [1])]
    rw.count("RandomNormalLike")
    dec = _subgraph(m, nodes, inputs, [vi(DECODER_OUTPUT, onnx.TensorProto.FLOAT, [1, rw.n_mels, frames])],
                    "matcha_decoder")
    # T' arrives as a float input; the original's limit tensor (an integer) is rebuilt from it
    if "_dec_len_in" in leaves:
        _node(dec.graph, "Cast", ["decoder_frames"], "_dec_len_in", to=_dec_len_type(model, cut))
    _toposort(dec.graph)
    dec = onnx.shape_inference.infer_shapes(simplify(dec, fuse_qkv))
    _node(dec.graph, "Identity", ["decoder_frames"], DEC_LEN)
    mask_decoder(dec, rw)
    _toposort(dec.graph)
    dec = simplify(dec, fuse_qkv)
    left = sorted({n.op_type for n in dec.graph.node} & {"Range", "CumSum", "Ceil", "RandomNormalLike", "Loop", "If"})
    if left:
        raise GraphError(f"the decoder half still has data-dependent ops: {left}")
    meta = {p.key: p.value for p in model.metadata_props}
    meta.update({"rkvoice_tokens": str(tokens), "rkvoice_frames": str(frames), "rkvoice_split": "decoder",
                 "rkvoice_encoder": ENCODER_FILE,
                 "rkvoice_rewrite": ",".join(f"{k}={v}" for k, v in sorted(rw.replaced.items()))})
    del dec.metadata_props[:]
    for k, v in meta.items():
        p = dec.metadata_props.add()
        p.key, p.value = k, v
    return dec, rw


def _channels(model: Any, cut: Cut) -> int:
    """C of mu_y: the encoder output's last dimension (the initializer feeding its projection)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    for v in list(inferred.graph.value_info):
        if v.name in (cut.mu_y, cut.noise):
            dims = v.type.tensor_type.shape.dim
            if len(dims) == 3 and dims[1].HasField("dim_value"):
                return int(dims[1].dim_value)
    raise GraphError("cannot tell the channel count of the decoder's mu")


def _dec_len_type(model: Any, cut: Cut) -> int:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    for v in inferred.graph.value_info:
        if v.name == cut.dec_len:
            return int(v.type.tensor_type.elem_type)
    return onnx.TensorProto.INT64
