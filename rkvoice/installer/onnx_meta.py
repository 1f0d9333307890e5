"""Rewrite an ONNX model's metadata_props with the onnx package (install steps and tests only: the
board's requirements lack ``onnx``; the runtime reads metadata with ``rkvoice.tts.vits``)."""

from __future__ import annotations

import onnx
import onnx.helper
from google.protobuf.message import DecodeError


def with_onnx_metadata(data: bytes, meta: dict[str, str]) -> bytes:
    """The model bytes with metadata_props replaced by ``meta`` (in its order); ValueError if unparsable.
    Protobuf writes fields in number order, as exporters do: the other bytes stay unchanged."""
    try:
        model = onnx.load_from_string(data)
    except DecodeError as exc:
        raise ValueError(f"not an ONNX protobuf ({exc})") from exc
    if not model.HasField("graph"):
        raise ValueError("no graph in the model")
    onnx.helper.set_model_props(model, {k: str(v) for k, v in meta.items()})
    return model.SerializeToString()
