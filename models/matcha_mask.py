"""Masking Matcha's decoder to the length the original graph would use (step 5 of matcha_graph).

The fixed-window graph runs the decoder over W frames; the original ran it over T' (the true frame
count rounded up for the U-Net). Every GroupNorm (exported as Reshape -> InstanceNormalization)
gets its statistics over the first T' frames only, in its own 3-D layout (a tiled mask), and every
decoder attention gets ``MASK_NEG`` on keys at or beyond T', from a chain of its own: one mask
tensor shared by both made rknn-toolkit2 2.3.2 fuse the decoder into one mesh (a build > 25 min).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from onnx_edit import (
    GraphError,
    const as _const,
    constant_value as _constant_value,
    node as _node,
    producers as _producers,
    shape as _shape,
)

if TYPE_CHECKING:
    from matcha_graph import Rewrite

DEC_LEN = "_decoder_frames"  # T' while rewriting; dropped from the deployed graph
MASK_NEG = -1e4  # not -1e9: fp16 on the NPU turns that into -inf and then NaN


def mask_decoder(model: Any, rw: Rewrite) -> None:
    """Masked GroupNorm statistics and attention keys beyond T' for every decoder length."""
    import onnx

    graph = model.graph
    prods = _producers(graph)
    lengths = _decoder_lengths(rw)
    rw.decoder_lengths = lengths
    masks: dict[int, tuple[str, str]] = {}

    def mask_for(length: int) -> tuple[str, str]:
        """(mask [L] float 1/0 for frame < T' at this resolution, valid fraction [1])."""
        if length not in masks:
            ratio = rw.frames / length
            scaled = _node(graph, "Div", [DEC_LEN, _const(graph, f"_dec_ratio_{length}", np.array([ratio], np.float32))],
                           f"_dec_scaled_{length}")
            neg = _node(graph, "Neg", [scaled], f"_dec_neg_{length}")
            valid = _node(graph, "Neg", [_node(graph, "Floor", [neg], f"_dec_floor_{length}")], f"_dec_valid_{length}")
            idx = _const(graph, f"_dec_idx_{length}", np.arange(length, dtype=np.float32))
            diff = _node(graph, "Sub", [valid, idx], f"_dec_diff_{length}")
            mask = _node(graph, "Clip", [diff, _const(graph, f"_dec_zero_{length}", np.array(0, np.float32)),
                                         _const(graph, f"_dec_one_{length}", np.array(1, np.float32))],
                         f"_dec_mask_{length}")
            frac = _node(graph, "Div", [valid, _const(graph, f"_dec_len_{length}", np.array([length], np.float32))],
                         f"_dec_frac_{length}")
            masks[length] = (mask, frac)
        return masks[length]

    biases: dict[int, str] = {}

    def key_bias_for(length: int) -> str:
        """-1e4 on keys at or past T' (0 before): its own small chain from T', not the GroupNorm mask's
        (one tensor feeding both the norms and the attentions ties the whole decoder into one
        layout mesh, and rknn-toolkit2's transpose passes then take ~10x longer to build it)."""
        if length not in biases:
            ratio = rw.frames / length
            scaled = _node(graph, "Div", [DEC_LEN, _const(graph, f"_key_ratio_{length}", np.array([ratio], np.float32))],
                           f"_key_scaled_{length}")
            start = _node(graph, "Neg", [_node(graph, "Floor", [_node(graph, "Neg", [scaled], f"_key_neg_{length}")],
                                               f"_key_floor_{length}")], f"_key_valid_{length}")
            idx = _const(graph, f"_key_idx_{length}", np.arange(1, length + 1, dtype=np.float32))
            past = _node(graph, "Clip", [_node(graph, "Sub", [idx, start], f"_key_over_{length}"),
                                         _const(graph, f"_key_zero_{length}", np.array(0, np.float32)),
                                         _const(graph, f"_key_one_{length}", np.array(1, np.float32))],
                         f"_key_past_{length}")
            biases[length] = _node(graph, "Mul", [past, _const(graph, f"_key_neg_big_{length}",
                                                               np.array(MASK_NEG, np.float32))], f"_key_bias_{length}")
        return biases[length]

    for n in list(graph.node):
        if n.op_type == "InstanceNormalization":
            src = prods.get(n.input[0])
            if src is None or src.op_type != "Reshape":
                continue
            before = _shape(model, src.input[0])  # [N, C, L] before the GroupNorm reshape
            after = _shape(model, n.input[0])  # [N, G, C/G * L]
            if not before or not after or len(before) != 3 or before[-1] not in lengths:
                continue
            _masked_instance_norm(model, n, before, after, mask_for(before[-1]))
            rw.count("GroupNorm")
        elif n.op_type == "Softmax":
            shape = _shape(model, n.input[0])
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            if not shape or shape[-1] not in lengths or attrs.get("axis", -1) not in (-1, len(shape) - 1):
                continue
            bias = key_bias_for(shape[-1])
            biased = _node(graph, "Add", [n.input[0], bias], n.name + "_biased")
            n.input[0] = biased
            rw.count("attention")
    if not rw.replaced.get("GroupNorm"):
        raise GraphError("found no decoder GroupNorm to mask: unexpected Matcha decoder layout")


def _decoder_lengths(rw: Rewrite) -> list[int]:
    lengths, length = [], rw.frames
    while length >= 8:
        lengths.append(length)
        length = -(-length // 2)
    if rw.tokens in lengths:
        raise GraphError(f"frame window {rw.frames} gives a decoder length equal to the {rw.tokens}-token "
                         "bucket; choose another --frames")
    return lengths


def _masked_instance_norm(model: Any, node: Any, before: list[int], after: list[int],
                          mask_frac: tuple[str, str]) -> None:
    """y [N, G, (C/G)*L] -> normalised over the first T' frames of each group; scale/bias kept.

    Stays in the GroupNorm's own 3-D layout (the mask tiled over the group's channels once per
    shape) so the toolkit sees the same Reshape/ReduceMean shapes it fuses in a LayerNorm."""
    import onnx

    graph = model.graph
    mask, frac = mask_frac
    _, c, length = before
    g = after[1]
    eps = 1e-5
    for a in node.attribute:
        if a.name == "epsilon":
            eps = onnx.helper.get_attribute_value(a)
    p = node.name or node.output[0]
    y = node.input[0]
    flat = f"_dec_mflat_{c // g}x{length}"
    if not any(n.output[0] == flat for n in graph.node):
        m3 = _node(graph, "Reshape", [mask, _const(graph, flat + "_3d", np.array([1, 1, length], np.int64))], flat + "_m3")
        _node(graph, "Tile", [m3, _const(graph, flat + "_reps", np.array([1, 1, c // g], np.int64))], flat)
    inv = f"{frac}_inv"
    if not any(n.output[0] == inv for n in graph.node):
        _node(graph, "Reciprocal", [frac], inv)
    axes = [2]
    mean = _node(graph, "Mul", [_node(graph, "ReduceMean", [_node(graph, "Mul", [y, flat], p + "_ym")], p + "_sum",
                                      axes=axes, keepdims=1), inv], p + "_mean")
    centred = _node(graph, "Sub", [y, mean], p + "_c")
    cm = _node(graph, "Mul", [centred, flat], p + "_cm")
    var = _node(graph, "Mul", [_node(graph, "ReduceMean", [_node(graph, "Mul", [cm, cm], p + "_sq")], p + "_vsum",
                                     axes=axes, keepdims=1), inv], p + "_var")
    std = _node(graph, "Sqrt", [_node(graph, "Add", [var, _const(graph, p + "_eps", np.array(eps, np.float32))],
                                      p + "_ve")], p + "_std")
    normed = _node(graph, "Div", [centred, std], p + "_n")
    scale_v, bias_v = _initializer(graph, node.input[1]), _initializer(graph, node.input[2])
    out = node.output[0]
    graph.node.remove(node)
    if np.all(scale_v == 1) and np.all(bias_v == 0):  # torch's GroupNorm export: affine applied after
        _node(graph, "Identity", [normed], out)
        return
    scale = _const(graph, p + "_scale3", scale_v.reshape(1, g, 1))
    bias = _const(graph, p + "_bias3", bias_v.reshape(1, g, 1))
    _node(graph, "Add", [_node(graph, "Mul", [normed, scale], p + "_scaled"), bias], out)


def _initializer(graph: Any, name: str) -> np.ndarray:
    value = _constant_value(graph, _producers(graph), name)
    if value is None:
        raise GraphError(f"InstanceNormalization scale/bias {name} is not a constant")
    return value.astype(np.float32)
