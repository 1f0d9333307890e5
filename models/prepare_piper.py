#!/usr/bin/env python3
"""Turn a Piper voice (.onnx + .onnx.json) into a sherpa-onnx VITS model dir (run by install.sh).

    python models/prepare_piper.py --onnx SRC.onnx --json SRC.onnx.json --out models/portable/piper-joe

Writes OUT/model.onnx (the Piper graph with sherpa-onnx's metadata: model_type, comment=piper,
language, voice, n_speakers, sample_rate, ...), OUT/tokens.txt ("symbol id" per line from the
voice's phoneme_id_map, sorted by id) and the graph cut in three for streaming synthesis
(rkvoice.tts.piper_stream): OUT/text.onnx (phoneme ids, lengths, scales -> the flow's input z_p
and the frame mask), OUT/flow.onnx (z_p, mask -> z) and OUT/decoder.onnx (z -> audio). The metadata is written with the onnx package (pinned in
requirements/portable.txt, the profile this voice belongs to) and read back with onnxruntime, as
sherpa-onnx's loader will see it; the other fields keep their bytes, so the output is
byte-for-byte deterministic for a given input. Files are written under temporary names and
renamed at the end.
``--config`` and ``--out-dir`` are accepted as aliases of ``--json`` and ``--out``.
Exit status 0 on success, 1 with a one-line message otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import onnx
import onnx.helper
import onnx.shape_inference
import onnx.utils
from google.protobuf.message import DecodeError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rkvoice.atomic import write_atomic  # noqa: E402
from rkvoice.tts.vits import read_onnx_metadata  # noqa: E402


class PrepareError(Exception):
    pass


def with_onnx_metadata(data: bytes, meta: dict[str, str]) -> bytes:
    """The model bytes with metadata_props replaced by ``meta`` (in its order); ValueError if unparsable.
    Protobuf writes fields in number order, as exporters do: the other bytes stay unchanged. (The onnx
    package is needed here and in the tests only: the board's requirements lack it; the runtime reads
    metadata with ``rkvoice.tts.vits``.)"""
    try:
        model = onnx.load_from_string(data)
    except DecodeError as exc:
        raise ValueError(f"not an ONNX protobuf ({exc})") from exc
    if not model.HasField("graph"):
        raise ValueError("no graph in the model")
    onnx.helper.set_model_props(model, {k: str(v) for k, v in meta.items()})
    return model.SerializeToString()


def sherpa_metadata(config: dict) -> dict[str, str]:
    """sherpa-onnx's VITS metadata for a Piper voice config (espeak phonemes)."""
    try:
        rate = int(config["audio"]["sample_rate"])
        voice = config.get("espeak", {}).get("voice") or config.get("lang_code")
        language = config.get("language", {}).get("name_english") or voice
        speakers = int(config.get("num_speakers", 1))
    except (KeyError, TypeError, ValueError) as exc:
        raise PrepareError(f"voice config lacks audio.sample_rate or has bad values: {exc}") from exc
    if config.get("phoneme_type", "espeak") != "espeak" or not voice:
        raise PrepareError("only espeak-phonemized Piper voices are supported")
    if rate == 22500:  # a known typo in some Piper configs
        rate = 22050
    return {
        "model_type": "vits",
        "comment": "piper",
        "language": str(language),
        "voice": str(voice),
        "version": "1",
        "has_espeak": "1",
        "n_speakers": str(speakers),
        "sample_rate": str(rate),
        "add_blank": "0",
    }


def tokens_text(config: dict) -> str:
    id_map = config.get("phoneme_id_map")
    if not isinstance(id_map, dict) or not id_map:
        raise PrepareError("voice config has no phoneme_id_map")
    rows = []
    for symbol, ids in id_map.items():
        if symbol == "\n":
            continue
        first = ids[0] if isinstance(ids, list) else ids
        rows.append((int(first), symbol))
    rows.sort()
    return "".join(f"{symbol} {i}\n" for i, symbol in rows)


SPLIT = ("text.onnx", "flow.onnx", "decoder.onnx")


def split_graphs(model: bytes) -> tuple[bytes, bytes, bytes]:
    """The VITS graph cut at the flow's input (z_p and the frame mask, made outside /flow/ by named
    top-level nodes) and at the decoder's input (the tensor feeding the first /dec/ node)."""
    proto = onnx.load_from_string(model)
    graph = proto.graph
    made_by = {out: node for node in graph.node for out in node.output}
    flow_in: list[str] = []
    for node in graph.node:
        if node.name.startswith("/flow/"):
            for name in node.input:
                maker = made_by.get(name)
                if maker is not None and maker.name.startswith("/") and not maker.name.startswith("/flow/"):
                    flow_in += [name] if name not in flow_in else []
    flow_in.sort(key=lambda name: made_by[name].op_type == "Cast")  # z_p first, the (cast) mask second
    dec_in = [node.input[0] for node in graph.node if node.name.startswith("/dec/")][:1]
    if len(flow_in) != 2 or not dec_in:
        raise PrepareError(f"not a Piper VITS graph (flow inputs {flow_in}, decoder input {dec_in})")
    inputs, outputs = [i.name for i in graph.input], [o.name for o in graph.output]
    parts = ((inputs, flow_in), (flow_in, dec_in), (dec_in, outputs))
    try:
        extractor = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(proto))  # the cut tensors' types
        return tuple(extractor.extract_model(i, o).SerializeToString() for i, o in parts)  # type: ignore[return-value]
    except (ValueError, onnx.shape_inference.InferenceError) as exc:
        raise PrepareError(f"cannot cut the graph at {flow_in} and {dec_in}: {exc}") from exc


def prepare(onnx_path: Path, json_path: Path, out: Path) -> None:
    try:
        config = json.loads(json_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise PrepareError(f"{json_path} is not valid JSON: {exc}") from exc
    meta = sherpa_metadata(config)
    tokens = tokens_text(config)
    try:
        model = with_onnx_metadata(onnx_path.read_bytes(), meta)
    except ValueError as exc:
        raise PrepareError(f"{onnx_path} is not a complete ONNX model: {exc}") from exc
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "tokens.txt", tokens.encode("utf-8"))
    write_atomic(out / "model.onnx", model)
    for name, part in zip(SPLIT, split_graphs(model), strict=True):
        write_atomic(out / name, part)
    try:  # read back what sherpa-onnx will read
        problem = "" if read_onnx_metadata(out / "model.onnx") == meta else "its metadata did not round-trip"
    except ValueError as exc:
        problem = f"it does not load in onnxruntime: {exc}"
    if problem:
        (out / "model.onnx").unlink()
        raise PrepareError(f"{onnx_path} -> {out / 'model.onnx'}: {problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", required=True, type=Path, help="Piper voice .onnx")
    parser.add_argument("--json", "--config", dest="json", required=True, type=Path,
                        help="its .onnx.json")
    parser.add_argument("--out", "--out-dir", dest="out", required=True, type=Path,
                        help="output folder (model.onnx, tokens.txt, the split graphs)")
    args = parser.parse_args(argv)
    try:
        prepare(args.onnx, args.json, args.out)
    except PrepareError as exc:
        print(f"prepare_piper: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"prepare_piper: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"wrote model.onnx, tokens.txt, {', '.join(SPLIT)} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
