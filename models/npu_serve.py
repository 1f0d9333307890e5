#!/usr/bin/env python3
"""Serve fixed-shape graphs through rknn-toolkit2's simulator to another process (tests, PC benches).

The simulator only runs a model built in the same process, and the toolkit lives in its own venv
(python 3.11, pinned numpy/onnx), while rkvoice runs in py312/. This server builds each given
``.onnx`` (the fixed graphs ``convert_rknn.py matcha|vocos`` writes next to each ``.rknn``) in the
toolkit venv, starts the simulator, prints ``READY`` and then answers requests on stdin/stdout:

    request : 8-byte big-endian length + an .npz with ``model`` (index) and ``in0``, ``in1``, ...
    answer  : 8-byte big-endian length + an .npz with ``out0``, ``out1``, ... (or ``error``)

A zero length ends it. rkvoice's engine then runs exactly as on the board, with the NPU call
answered by the simulator (tests/npu_sim.py is the client). ``convert_rknn.py matcha|vocos --serve``
serves the models it has just built and checked the same way (after its JSON lines), which saves
building them twice.

    python models/npu_serve.py --target rk3576 A.onnx [B.onnx ...]
"""

from __future__ import annotations

import argparse
import io
import os
import struct
import sys

import numpy as np


def _read_exact(stream, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def serve(runners: list, out, inp) -> None:
    """Answer requests until a zero length or EOF; ``runners[i](inputs) -> outputs``."""
    out.write(b"READY\n")
    out.flush()
    while True:
        try:
            (n,) = struct.unpack(">Q", _read_exact(inp, 8))
        except EOFError:
            break
        if n == 0:
            break
        req = np.load(io.BytesIO(_read_exact(inp, n)))
        reply = io.BytesIO()
        try:
            feeds = [req[f"in{i}"] for i in range(len([k for k in req.files if k.startswith("in")]))]
            outs = runners[int(req["model"])](feeds)
            np.savez(reply, **{f"out{i}": np.asarray(o) for i, o in enumerate(outs)})
        except Exception as exc:  # report to the client, keep serving
            np.savez(reply, error=np.array(f"{type(exc).__name__}: {exc}"))
        data = reply.getvalue()
        out.write(struct.pack(">Q", len(data)) + data)
        out.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--target", default="rk3576")
    args = ap.parse_args(argv)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the toolkit's logs must not mix with the answers
    from rknn.api import RKNN

    runtimes = []
    for path in args.models:
        r = RKNN(verbose=False)
        r.config(target_platform=args.target, optimization_level=3)
        if r.load_onnx(model=path) != 0 or r.build(do_quantization=False) != 0 or r.init_runtime() != 0:
            sys.stderr.write(f"npu_serve: could not build/simulate {path}\n")
            return 2
        runtimes.append(r)
    serve([lambda feeds, r=r: r.inference(inputs=feeds) for r in runtimes], out, sys.stdin.buffer)
    for r in runtimes:
        r.release()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def serve_built(kept: list, json_fd: int) -> None:
    """A converter's ``--serve``: answer run requests on stdin with the built models (each ``.run``),
    writing to ``json_fd``, then release them."""
    serve([npu.run for npu in kept], os.fdopen(json_fd, "wb"), sys.stdin.buffer)
    for npu in kept:
        npu.release()
