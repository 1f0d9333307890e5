"""What reading a voice's ONNX metadata costs at load: onnxruntime's parse beside reading the bytes.

    py312/bin/python -m bench.onnx_metadata [--repeat 5] [FILE.onnx ...]

``rkvoice.tts.vits.read_onnx_metadata`` (and the board's hearing checks) read metadata_props
through an onnxruntime session with graph optimisations off. The hand-written protobuf walker it
replaced read the whole file into memory first, so reading the bytes is the floor that approach
had; both figures are printed side by side, best of ``--repeat`` runs, in milliseconds, per file
(default: every installed portable ONNX model).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rkvoice.config import load_config
from rkvoice.tts.vits import read_onnx_metadata
from tests.support import bench_run


def best_ms(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return round(1000 * min(times), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args, run = bench_run("onnx_metadata", ap, argv)
    files = args.files or sorted((load_config().models.path / "portable").glob("*/*.onnx"))
    if not files:
        print("bench.onnx_metadata: no ONNX files given or installed (./install.sh)", file=sys.stderr)
        return 1
    rows = []
    for path in files:
        rows.append({
            "file": str(path), "mb": round(path.stat().st_size / 1e6, 1),
            "metadata_keys": len(read_onnx_metadata(path)),
            "onnxruntime_ms": best_ms(lambda p=path: read_onnx_metadata(p), args.repeat),
            "read_bytes_ms": best_ms(lambda p=path: p.read_bytes(), args.repeat),
        })
    run.emit({"repeat": args.repeat, "files": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
