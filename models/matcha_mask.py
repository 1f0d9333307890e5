"""Masking Matcha's decoder to the length the original graph would use (models/matcha_split.py).

The NPU decoder runs over a fixed window of W frames; the original ran it over T' (the true frame
count rounded up for the U-Net). Every GroupNorm (exported as Reshape -> InstanceNormalization)
gets its statistics over the first T' frames only (per channel, then per group: see
``_masked_instance_norm``), and every
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
    """The frame axis at each U-Net resolution: W, W/2, ... A length equal to the token bucket is fine:
    the split decoder has no token axis (the text encoder runs on the CPU), so no Softmax or GroupNorm
    over tokens can be taken for a frame one. (The whole-graph rewrite refused such windows; kept
    here, it refused every W in 497..512 for 32 tokens, the default window of a ~12.5 frames/token voice.)
    W, W/2 and W/4 (T' is rounded to 4 for two halvings) always, however short; then down to 8."""
    lengths, length = [], rw.frames
    while length >= 8 or len(lengths) < 3:
        lengths.append(length)
        length = -(-length // 2)
    return lengths


def _masked_instance_norm(model: Any, node: Any, before: list[int], after: list[int],
                          mask_frac: tuple[str, str]) -> None:
    """GroupNorm over the first T' frames: [N, C, L] -> the same, statistics per group of channels.

    The exported GroupNorm reshapes [N, C, L] to [N, G, (C/G)*L] and normalises over that long last
    axis; reducing over it on the NPU overflows rknn-toolkit2's REGTASK register fields (value
    (C/G)*L - 1 against a limit of 0x1fff: 32*W - 1 for 256 channels in 8 groups, 64*W - 1 for 512;
    the simulator does not notice, a board may). So the statistics are taken in two short steps in
    the [N, C, L] layout: a masked mean over the frames per channel ([N, C, 1]), then the mean over
    each group's channels (a MatMul with a constant block-averaging [C, C] matrix: equal counts per
    channel, so this is the same mean). The Reshape back to [N, C, L] that follows
    the InstanceNormalization is bypassed: no [N, G, (C/G)*L] tensor is left."""
    import onnx

    graph = model.graph
    mask, frac = mask_frac
    prods = _producers(graph)
    x = prods[node.input[0]].input[0]  # the GroupNorm Reshape's input, [N, C, L]
    n, c, length = before
    g = after[1]
    eps = 1e-5
    for a in node.attribute:
        if a.name == "epsilon":
            eps = onnx.helper.get_attribute_value(a)
    p = node.name or node.output[0]
    m3 = f"_dec_m3_{length}"
    if not any(o == m3 for nd in graph.node for o in nd.output):
        _node(graph, "Reshape", [mask, _const(graph, m3 + "_shape", np.array([1, 1, length], np.int64))], m3)
    inv = f"{frac}_inv"
    if not any(o == inv for nd in graph.node for o in nd.output):
        _node(graph, "Reciprocal", [frac], inv)
    avg = f"_dec_group_avg_{c}x{g}"  # [C, C]: the mean over each channel's group, block by block
    if not any(i.name == avg for i in graph.initializer):
        _const(graph, avg, np.kron(np.eye(g), np.full((c // g, c // g), g / c)).astype(np.float32))

    def group_mean(t: str, tag: str) -> str:
        """masked mean over frames and the group's channels of t [N, C, L] -> [N, C, 1]."""
        chan = _node(graph, "ReduceMean", [_node(graph, "Mul", [t, m3], f"{p}_{tag}_m")], f"{p}_{tag}_c",
                     axes=[2], keepdims=1)
        grp = _node(graph, "MatMul", [avg, chan], f"{p}_{tag}_g")
        return _node(graph, "Mul", [grp, inv], f"{p}_{tag}")

    centred = _node(graph, "Sub", [x, group_mean(x, "mean")], p + "_c")
    var = group_mean(_node(graph, "Mul", [centred, centred], p + "_sq"), "var")
    std = _node(graph, "Sqrt", [_node(graph, "Add", [var, _const(graph, p + "_eps", np.array(eps, np.float32))],
                                      p + "_ve")], p + "_std")
    normed = _node(graph, "Div", [centred, std], p + "_n")
    scale_v, bias_v = _initializer(graph, node.input[1]), _initializer(graph, node.input[2])
    if not (np.all(scale_v == 1) and np.all(bias_v == 0)):  # torch's GroupNorm export applies its affine after
        scale = _const(graph, p + "_scale3", np.repeat(scale_v, c // g).reshape(1, c, 1))
        bias = _const(graph, p + "_bias3", np.repeat(bias_v, c // g).reshape(1, c, 1))
        normed = _node(graph, "Add", [_node(graph, "Mul", [normed, scale], p + "_scaled"), bias], p + "_affine")
    out = node.output[0]
    graph.node.remove(node)
    back = [nd for nd in graph.node if out in nd.input]
    if len(back) == 1 and back[0].op_type == "Reshape" and _shape(model, back[0].output[0]) == before:
        reshape = back[0]  # [N, G, (C/G)*L] -> [N, C, L]: now the identity
        reshape.op_type = "Identity"
        del reshape.input[:]
        del reshape.attribute[:]
        reshape.input.append(normed)
    else:
        _node(graph, "Reshape", [normed, _const(graph, p + "_after", np.array(after, np.int64))], out)


def _initializer(graph: Any, name: str) -> np.ndarray:
    value = _constant_value(graph, _producers(graph), name)
    if value is None:
        raise GraphError(f"InstanceNormalization scale/bias {name} is not a constant")
    return value.astype(np.float32)
