"""Smart Turn v3.2's int8 CPU build as an equivalent float graph (for rknn-toolkit2, which builds it fp16).

The published ``smart-turn-v3.2-cpu.onnx`` is a static QDQ graph (counted with ``onnx``: 114
DequantizeLinear, 78 QuantizeLinear; no MatMulInteger/ConvInteger/DynamicQuantizeLinear/QLinear* ops):

- 36 weights and biases are int8/int32 initializers read through a DequantizeLinear: each becomes a
  float32 initializer holding ``(q - zero_point) * scale`` (per tensor or along ``axis``), under the
  DequantizeLinear's output name;
- 78 activations (the input among them) pass a QuantizeLinear -> DequantizeLinear pair (uint8): the
  pair is removed and its consumers read the float tensor.

What stays is plain float MatMul/Gemm/Conv/LayerNormalization/Softmax/Erf... The activation pairs are
rounding steps, so the float graph is not bit-equal to the int8 one: tests/test_turn_npu.py bounds the
difference on real speech. Needs only ``onnx`` and ``numpy`` (runs in py312 and the toolkit venv).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
INTEGER_OPS = ("MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "QLinearMatMul", "QLinearConv",
               "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QGemm", "QAttention",
               "DynamicQuantizeMatMul", "MatMulIntegerToFloat")


class FloatGraphError(ValueError):
    """The graph holds quantization the rewrite does not understand; the message names the node."""


def _dequantize(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int) -> np.ndarray:
    """DequantizeLinear's own arithmetic: (q - zero_point) * scale in float32 (bit-equal to onnxruntime's)."""
    x = q.astype(np.int64) - (0 if zero is None else zero.astype(np.int64).reshape(_bcast(zero, q, axis)))
    return x.astype(np.float32) * scale.astype(np.float32).reshape(_bcast(scale, q, axis))


def _bcast(param: np.ndarray, q: np.ndarray, axis: int) -> tuple[int, ...]:
    if param.ndim == 0 or param.size == 1:
        return ()
    shape = [1] * q.ndim
    shape[axis % q.ndim] = param.size
    return tuple(shape)


def float_model(model: Any, activations: bool = True) -> tuple[Any, dict[str, int]]:
    """A float copy of the QDQ ``model`` (an onnx ModelProto, changed in place) and what was rewritten;
    ``activations=False`` keeps the activation pairs (only the weights dequantized: the int8 graph's
    arithmetic, which tests/test_turn_npu.py compares with the file unoptimised)."""
    from onnx import numpy_helper

    graph = model.graph
    integer = sorted({n.op_type for n in graph.node if n.op_type in INTEGER_OPS})
    if integer:
        raise FloatGraphError(f"integer ops {', '.join(integer)} are not rewritten here (only QDQ graphs: "
                              "DequantizeLinear weights, QuantizeLinear->DequantizeLinear activations)")
    inits = {i.name: i for i in graph.initializer}
    users: dict[str, list[Any]] = {}
    for n in graph.node:
        for name in n.input:
            users.setdefault(name, []).append(n)
    outputs = {o.name for o in graph.output}
    rename: dict[str, str] = {}  # a pair's DequantizeLinear output -> the float tensor it stands for
    drop: set[int] = set()
    new_inits: list[Any] = []
    counts = {"weights": 0, "activation_pairs": 0}
    for n in graph.node:
        if n.op_type not in QDQ_OPS:
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:
            params = [numpy_helper.to_array(inits[name]) if name in inits else None for name in n.input[1:3]]
            if params[0] is None:
                raise FloatGraphError(f"{n.name}: its scale {n.input[1]} is not a constant")
            w = _dequantize(numpy_helper.to_array(inits[n.input[0]]), params[0],
                            params[1] if len(params) > 1 else None, axis)
            new_inits.append(numpy_helper.from_array(w, n.output[0]))
            drop.add(id(n))
            counts["weights"] += 1
        elif n.op_type == "QuantizeLinear" and activations:
            after = users.get(n.output[0], [])
            if not after or any(u.op_type != "DequantizeLinear" for u in after) or n.output[0] in outputs:
                raise FloatGraphError(f"{n.name}: a QuantizeLinear not read only by DequantizeLinear "
                                      f"({[u.op_type for u in after]}); not a QDQ pair")
            for dq in after:
                rename[dq.output[0]] = n.input[0]
                drop.add(id(dq))
            drop.add(id(n))
            counts["activation_pairs"] += 1
        elif id(n) not in drop and activations:
            raise FloatGraphError(f"{n.name}: a DequantizeLinear of {n.input[0]}, which is neither a constant "
                                  "nor a QuantizeLinear's output")
    if set(rename) & outputs:
        raise FloatGraphError("a graph output is a DequantizeLinear's; not rewritten")
    kept = [n for n in graph.node if id(n) not in drop]
    for n in kept:
        for k, name in enumerate(n.input):
            n.input[k] = rename.get(name, name)
    del graph.node[:]
    graph.node.extend(kept)
    used = {name for n in kept for name in n.input}
    keep_inits = [i for i in graph.initializer if i.name in used] + [i for i in new_inits if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep_inits)
    del graph.value_info[:]  # the quantized tensors' types are stale
    return model, counts


def write_float(src: Path, dst: Path, fixed_batch: int | None = None, activations: bool = True) -> dict[str, Any]:
    """``src`` (the int8 file) -> ``dst`` (float); with ``fixed_batch`` the input's batch is fixed
    (rknn-toolkit2 builds fixed shapes). Returns the counts and the op types left."""
    import onnx

    model = onnx.load(str(src))
    model, counts = float_model(model, activations)
    if fixed_batch is not None:
        dims = model.graph.input[0].type.tensor_type.shape.dim
        dims[0].Clear()
        dims[0].dim_value = fixed_batch
    onnx.checker.check_model(model)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst))
    return {**counts, "ops": sorted({n.op_type for n in model.graph.node})}


def probabilities(path: Path, features: Iterable[np.ndarray], optimize: bool = True) -> np.ndarray:
    """The model's output (a probability: the graph ends in a sigmoid) for each [80, 800] feature, one
    at a time, on onnxruntime's CPU provider (``optimize=False``: no graph fusions, so a QDQ graph
    runs as written, in float, instead of on int8 kernels)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return np.array([float(np.asarray(sess.run(None, {name: f[None].astype(np.float32)})[0]).reshape(-1)[0])
                     for f in features])


def agreement(ref: np.ndarray, test: np.ndarray, threshold: float, margin: float = 0.0) -> dict[str, Any]:
    """Max |difference| of two probability lists and how often they decide differently at ``threshold``,
    an input whose ``ref`` lies within ``margin`` of it aside (``near_threshold``: a build's rounding
    decides those, not the build)."""
    ref, test = np.asarray(ref, np.float64), np.asarray(test, np.float64)
    near = np.abs(ref - threshold) <= margin
    flips = int((((ref >= threshold) != (test >= threshold)) & ~near).sum())
    return {"inputs": int(ref.size), "max_abs_diff": round(float(np.abs(ref - test).max()), 5),
            "mean_abs_diff": round(float(np.abs(ref - test).mean()), 5), "verdict_flips": flips,
            "threshold": threshold, "margin": margin, "near_threshold": int(near.sum())}
