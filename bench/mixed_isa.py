"""The ten mixed sentences on more than one kind of CPU: the voices' numerics (onnxruntime picks its
kernels by the CPU's instruction set) and the listener's (CTranslate2 likewise), compared in one run.

    py312/bin/python -m bench.mixed_isa [--routes fastspeech2,vits] [--qemu-cpu Nehalem] [--work DIR]

1. The sentences are said (tests.support.spoken: the speaker's pieces) by this CPU's own kernels, and
   again inside ``qemu-x86_64 -cpu <model>`` (a CPU without AVX: onnxruntime's SSE kernels), each
   into WAV files under ``--work``. Without qemu-x86_64 on PATH (or with ``--qemu-cpu none``) only
   this CPU's run is made. Emulated, the voices are slow: at nice 19 on a 2-core machine loaded to 8,
   the first route's ten sentences were not done after 30 min.
2. Every set of WAVs is heard by the installed Whisper with CTranslate2 on this CPU's own kernels and
   forced to others (``CT2_FORCE_CPU_ISA``: GENERIC, AVX, AVX2, AVX512 where the CPU has it), each in a
   child process (the variable is read when CTranslate2 loads).

Prints one JSON object: per voice ISA and route, how far its samples are from this CPU's (max and RMS
difference) and the mean CER heard under each listener ISA; ``spread`` is the largest minus the
smallest mean CER of a route over every pair.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from tests.support import bench_run, cer
from tests.support.spoken import MIXED_SET

ROOT = Path(__file__).resolve().parent.parent
LISTENER_ISAS = ("GENERIC", "AVX", "AVX2", "AVX512")


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def say(routes: list[str], out: Path) -> None:
    """Child: the sentences said by each route, as float WAVs ``<route>-<n>.wav`` under ``out``."""
    from rkvoice.config import load_config
    from rkvoice.tts.registry import create_tts
    from tests.support.spoken import spoken

    cfg = load_config()
    out.mkdir(parents=True, exist_ok=True)
    for route in routes:
        engine = create_tts(cfg, route, MIXED_SET[0])
        engine.load()
        for i, text in enumerate(MIXED_SET):
            samples, rate = spoken(engine, cfg, text)
            sf.write(out / f"{route}-{i}.wav", samples, rate, subtype="FLOAT")


def hear(dirs: list[Path], routes: list[str]) -> dict[str, dict[str, float]]:
    """Child: {dir: {route: mean CER}} heard by the installed Whisper (CTranslate2 as the environment says)."""
    from rkvoice.audio.post import resample
    from rkvoice.config import load_config
    from rkvoice.hear.whisper_asr import WhisperAsr

    asr = WhisperAsr(load_config())
    asr.load()
    result: dict[str, dict[str, float]] = {}
    for d in dirs:
        for route in routes:
            scores = []
            for i, text in enumerate(MIXED_SET):
                samples, rate = sf.read(d / f"{route}-{i}.wav", dtype="float32")
                scores.append(cer(text, asr.transcribe(resample(samples, rate, 16000)), read_digits=False))
            result.setdefault(str(d), {})[route] = round(sum(scores) / len(scores), 3)
    return result


def _child(args: list[str], env: dict[str, str] | None = None, prefix: list[str] | None = None) -> str:
    cmd = [*(prefix or []), sys.executable, "-m", "bench.mixed_isa", *args]
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def difference(a: Path, b: Path, routes: list[str]) -> dict[str, float]:
    worst, sq, n = 0.0, 0.0, 0
    for route in routes:
        for i in range(len(MIXED_SET)):
            x, _ = sf.read(a / f"{route}-{i}.wav", dtype="float32")
            y, _ = sf.read(b / f"{route}-{i}.wav", dtype="float32")
            m = min(len(x), len(y))
            d = x[:m].astype(np.float64) - y[:m]
            worst = max(worst, float(np.abs(d).max()) if m else 0.0, 1.0 if len(x) != len(y) else 0.0)
            sq, n = sq + float(np.sum(d * d)), n + m
    return {"max_abs_diff": round(worst, 6), "rms_diff": round((sq / max(n, 1)) ** 0.5, 7)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", default="fastspeech2,vits")
    ap.add_argument("--qemu-cpu", default="Nehalem",
                    help="the CPU model qemu-x86_64 emulates (no AVX); 'none': this CPU's voices only")
    ap.add_argument("--work", type=Path, default=ROOT / ".cache" / "bench-mixed-isa")
    ap.add_argument("--say", type=Path, help=argparse.SUPPRESS)  # child modes
    ap.add_argument("--hear", type=Path, nargs="+", help=argparse.SUPPRESS)
    args, run = bench_run("mixed_isa", ap)
    routes = args.routes.split(",")
    if args.say:
        say(routes, args.say)
        return 0
    if args.hear:
        print(json.dumps(hear(args.hear, routes)))
        return 0

    flags = cpu_flags()
    native = "avx512f" in flags and "AVX512" or "avx2" in flags and "AVX2" or "avx" in flags and "AVX" or "SSE"
    voices = {f"native-{native}": args.work / "native"}
    _child(["--routes", args.routes, "--say", str(voices[f"native-{native}"])])
    qemu = shutil.which("qemu-x86_64") if args.qemu_cpu != "none" else None
    if qemu is not None:
        voices[f"qemu-{args.qemu_cpu}"] = args.work / f"qemu-{args.qemu_cpu}"
        _child(["--routes", args.routes, "--say", str(voices[f"qemu-{args.qemu_cpu}"])],
               prefix=[qemu, "-cpu", args.qemu_cpu])
    listeners = [isa for isa in LISTENER_ISAS if isa != "AVX512" or "avx512f" in flags]
    heard: dict[str, dict[str, dict[str, float]]] = {}
    for isa in listeners:
        out = json.loads(_child(["--routes", args.routes, "--hear", *map(str, voices.values())],
                                env={"CT2_FORCE_CPU_ISA": isa}))
        for label, d in voices.items():
            heard.setdefault(label, {})[isa] = out[str(d)]
    base = voices[f"native-{native}"]
    report: dict[str, Any] = {
        "cpu_flags": sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "sse4"))),
        "voices": {label: {"samples_vs_native": difference(base, d, routes), "mean_cer": heard[label]}
                   for label, d in voices.items()},
    }
    report["spread"] = {route: round(max(h[route] for v in heard.values() for h in v.values())
                                     - min(h[route] for v in heard.values() for h in v.values()), 3)
                        for route in routes}
    run.emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
