"""Small ONNX graph-editing helpers for the voice converters (models/matcha_graph.py, matcha_split.py, npu_voice.py).

Plain functions over ``onnx`` protobufs: add constants and nodes, find producers/consumers, read
static shapes and constant values, restore topological order, run onnxsim. Only ``onnx``, ``numpy``
(and ``onnxsim`` for ``simplify``) are needed, so they run in the toolkit venv on a PC or a board.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


class GraphError(ValueError):
    """The graph is not what the rewrite understands; the message says what and how to fix it."""


def const(graph: Any, name: str, value: np.ndarray) -> str:
    from onnx import numpy_helper

    graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return name


def node(graph: Any, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
    from onnx import helper

    graph.node.append(helper.make_node(op, inputs, [output], name=output, **attrs))
    return output


def producers(graph: Any) -> dict[str, Any]:
    return {o: n for n in graph.node for o in n.output}


def consumers(graph: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def rename_input(graph: Any, old: str, new: str) -> None:
    for n in graph.node:
        for k, name in enumerate(n.input):
            if name == old:
                n.input[k] = new
    for o in graph.output:
        if o.name == old:
            o.name = new


def elem_type(model: Any, name: str) -> int:
    import onnx

    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        if vi.name == name:
            return vi.type.tensor_type.elem_type
    for init in model.graph.initializer:
        if init.name == name:
            return init.data_type
    return onnx.TensorProto.UNDEFINED


def shape(model: Any, name: str) -> list[int] | None:
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        if vi.name == name:
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                return [d.dim_value for d in dims]
            return None
    return None


def set_input_shape(model: Any, name: str, dims: Iterable[int | str]) -> None:
    for vi in model.graph.input:
        if vi.name == name:
            shape = vi.type.tensor_type.shape
            del shape.dim[:]
            for d in dims:
                dim = shape.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                else:
                    dim.dim_param = d
            return
    raise GraphError(f"no input {name}")


def feeds_output(model: Any, tensor: str, output: str) -> bool:
    cons = consumers(model.graph)
    seen, todo = set(), [tensor]
    while todo:
        t = todo.pop()
        if t == output:
            return True
        if t in seen:
            continue
        seen.add(t)
        for n in cons.get(t, []):
            todo.extend(n.output)
    return False


def constant_value(graph: Any, prods: dict[str, Any], name: str) -> np.ndarray | None:
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    node = prods.get(name)
    if node is not None and node.op_type == "Constant":
        return numpy_helper.to_array(node.attribute[0].t)
    return None


def toposort(graph: Any) -> None:
    """Appended nodes go where their inputs exist (ONNX requires topological order)."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        progressed = False
        rest = []
        for n in pending:
            if all(i in available for i in n.input):
                ordered.append(n)
                available.update(n.output)
                progressed = True
            else:
                rest.append(n)
        if not progressed:
            raise GraphError(f"graph has a cycle or a missing input near {rest[0].name}")
        pending = rest
    del graph.node[:]
    graph.node.extend(ordered)


def output_dims(model: Any, name: str) -> list[Any] | None:
    for o in model.graph.output:
        if o.name == name:
            return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in o.type.tensor_type.shape.dim]
    return None
