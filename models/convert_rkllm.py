#!/usr/bin/env python3
"""Convert Qwen2.5-0.5B-Instruct (a Hugging Face folder) to the board's .rkllm file, on an x86_64 PC.

Runs in a Python 3.11/3.12 with Rockchip's rkllm-toolkit wheel (``from rkllm.api import RKLLM``) from
the airockchip/rknn-llm release whose version equals the board's librkllmrt (``assistant.py --check``
on the board prints it; ``--librkllmrt`` has it checked here). docs/rkllm-model.md is the recipe.

    python models/convert_rkllm.py Qwen2.5-0.5B-Instruct [--dtype w4a16|w8a8|...] [--librkllmrt 1.3.0]
        [--dataset data_quant.json] [--out FILE.rkllm] [--config config.board.yaml] [--device cpu|cuda]
        [--optimization-level 0|1] [--board SSH-NAME]

The toolkit's calls, as in rknn-llm's examples/rkllm_api_demo/export/export_rkllm.py: load_huggingface
(float32 weights) -> build (quantized for rk3576 on both NPU cores, max_context = the config's
llm.context, optimization_level 0 as in Rockchip's benchmark.md) -> export_rkllm, each checked for its
return code 0. The file is exported under a temporary name beside --out and renamed into place, so a
failed run leaves nothing; the last line printed copies it to the board and installs it with its sha256.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MANIFEST_ID = "board-llm-qwen-0.5b-rkllm"
TARGET = "rk3576"
NPU_CORES = 2
"""The RK3576's two NPU cores (the toolkit takes 1 or 2 for it)."""
RK3576_TYPES = ("w4a16", "w4a16_g32", "w4a16_g64", "w4a16_g128", "w8a8")
"""The quantized types rkllm-toolkit builds for RK3576 (Rockchip_RKLLM_SDK 1.3.0, table 3-3)."""
MAX_CONTEXT = 16384
REPO = "https://github.com/airockchip/rknn-llm"


class Refusal(Exception):
    """One line naming the problem and the fix; ``code`` is the exit status (2 bad input, 1 toolkit failure)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="convert_rkllm.py", description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path, help="the Hugging Face folder of Qwen2.5-0.5B-Instruct")
    p.add_argument("--dtype", default="w4a16", help=f"quantized type: {', '.join(RK3576_TYPES)} (default w4a16)")
    p.add_argument("--librkllmrt", metavar="VERSION",
                   help="the board's librkllmrt version (assistant.py --check prints it): refuse a toolkit of another version")
    p.add_argument("--dataset", type=Path, help="calibration data for the quantization: JSON list of {input, target}")
    p.add_argument("--out", type=Path, help="the .rkllm to write (default: the file name the board looks for)")
    p.add_argument("--config", type=Path, default=ROOT / "config.board.yaml",
                   help="config layered over config.yaml whose llm.context is the model's context (default %(default)s)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the toolkit computes (default cpu)")
    p.add_argument("--optimization-level", type=int, choices=(0, 1), default=0,
                   help="0: as Rockchip's benchmark figures were made; 1: the toolkit's accuracy optimisation, "
                        "which Rockchip says may slow inference (default 0)")
    p.add_argument("--board", default="board", help="ssh name of the board in the printed copy line (default board)")
    return p


def context_length(config: Path) -> int:
    """llm.context of ``config`` over config.yaml: the runtime's max_context_len must not exceed the model's."""
    if not config.is_file():
        raise Refusal(f"config file {config} does not exist; name the board's config with --config")
    try:
        from rkvoice.config import DEFAULT_CONFIG, load_config
        from rkvoice.errors import RkvoiceError
    except ModuleNotFoundError as exc:  # PyYAML: the toolkit's requirements bring it
        raise Refusal(f"rkvoice's config reader needs {exc.name!r} in this Python: pip install pyyaml") from None

    try:
        context = load_config(files=[DEFAULT_CONFIG, config]).llm.context
    except RkvoiceError as exc:
        raise Refusal(f"{config}: {exc}") from None
    if context > MAX_CONTEXT or context % 32:
        raise Refusal(f"llm.context {context} in {config}: rkllm-toolkit needs a multiple of 32 up to {MAX_CONTEXT}; "
                      "set llm.context to such a value (e.g. 2048)")
    return context


def default_out(dtype: str) -> Path:
    """The manifest's file name for this model (w4a16 swapped for another type) in the current folder."""
    from rkvoice.installer.manifest import load_manifest

    model = next(m for m in load_manifest(ROOT / "models" / "manifest.yaml").models if m.id == MANIFEST_ID)
    return Path(Path(model.files[0].path).name.replace("w4a16", dtype))


def check_model(folder: Path) -> None:
    """A Qwen2 Hugging Face folder: config.json of model_type qwen2, tokenizer_config.json, *.safetensors."""
    fetch = "download it: hf download Qwen/Qwen2.5-0.5B-Instruct --local-dir Qwen2.5-0.5B-Instruct (docs/rkllm-model.md)"
    if not folder.is_dir():
        raise Refusal(f"model folder {folder} does not exist; {fetch}")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Refusal(f"{folder} is not a Hugging Face model folder (config.json: {type(exc).__name__}); {fetch}") from None
    if not isinstance(config, dict) or config.get("model_type") != "qwen2":
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise Refusal(f"{folder} holds model_type {kind!r}, not qwen2: the assistant prompts Qwen2.5's chat "
                      f"format; {fetch}")
    missing = [n for n in ("tokenizer_config.json", "*.safetensors") if not any(folder.glob(n))]
    if missing:
        raise Refusal(f"{folder} lacks {' and '.join(missing)} (an incomplete download); {fetch}")


def check_dataset(path: Path) -> None:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Refusal(f"calibration dataset {path} cannot be read ({type(exc).__name__}); give a JSON file or "
                      "leave --dataset out") from None
    if not rows or not isinstance(rows, list) or not all(
            isinstance(r, dict) and isinstance(r.get("input"), str) and isinstance(r.get("target"), str) for r in rows):
        raise Refusal(f'calibration dataset {path} must be a non-empty JSON list of {{"input": ..., "target": ...}} '
                      "strings (the prompt with its chat template, and the answer)")


def scratch_dir(out: Path) -> Path:
    """A temporary folder beside ``out`` (same filesystem, so the finished file is renamed, never copied)."""
    if out.suffix != ".rkllm":
        raise Refusal(f"--out {out} must end in .rkllm")
    if out.is_dir():
        raise Refusal(f"--out {out} is a folder; name the file, e.g. {out / default_out('w4a16').name}")
    parent = out.parent
    if not parent.is_dir():
        raise Refusal(f"output folder {parent} does not exist; create it or choose another --out")
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    except OSError as exc:
        raise Refusal(f"cannot write in {parent} ({exc.strerror}); choose a writable --out") from None


def load_toolkit(required: str | None) -> tuple[Any, str]:
    """The toolkit's RKLLM class and its version, refused unless rkvoice drives its runtime and it
    equals the board's librkllmrt (when given)."""
    version = required.strip().lstrip("v") if required else "X.Y.Z"
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    where = (f"get Rockchip's rknn-llm release of the board's librkllmrt version (git clone --branch "
             f"release-v{version} {REPO}) and pip install its rkllm-toolkit/packages/rkllm_toolkit-{version}-{py}-{py}"
             "-linux_x86_64.whl (the versions must be equal: assistant.py --check on the board prints librkllmrt's)")
    try:
        from rkllm.api import RKLLM
    except ModuleNotFoundError as exc:
        if exc.name in ("rkllm", "rkllm.api"):
            raise Refusal(f"rkllm-toolkit is not installed in {sys.executable} ({platform.machine()}): {where}") from None
        raise Refusal(f"rkllm-toolkit is installed but needs {exc.name!r}: pip install -r "
                      "rkllm-toolkit/packages/requirements.txt of the same rknn-llm release") from None
    except ImportError as exc:
        raise Refusal(f"rkllm-toolkit does not import ({exc}): reinstall its wheel and requirements; {where}") from None
    from rkvoice.board.versions import RKLLM_RUNTIMES, rkllm_runtime_abi

    have: str | None
    try:
        have = importlib.metadata.version("rkllm-toolkit")
    except importlib.metadata.PackageNotFoundError:
        import rkllm

        have = getattr(rkllm, "__version__", None)
    if not have:
        raise Refusal(f"cannot tell which rkllm-toolkit this is (no package metadata): {where}")
    if rkllm_runtime_abi(have) is None:
        raise Refusal(f"rkllm-toolkit {have} makes models for librkllmrt {have}, which rkvoice does not drive "
                      f"(it drives {RKLLM_RUNTIMES}); {where}")
    if required and version != have:
        raise Refusal(f"rkllm-toolkit {have} is installed but the board's librkllmrt is {version} (--librkllmrt): "
                      f"the runtime loads models of its own toolkit version; {where}")
    return RKLLM, have


def convert(rkllm_class: Any, args: argparse.Namespace, dtype: str, context: int, target: Path) -> None:
    """load_huggingface -> build -> export_rkllm(target); each must return 0."""
    model, dataset = args.model, args.dataset
    llm = rkllm_class()
    steps: list[tuple[str, str, tuple[Any, ...], dict[str, Any]]] = [
        ("load_huggingface", f"loading {model} failed (a broken download, or too little RAM: --device cuda or "
                             "a PC with more memory)",
         (), {"model": str(model), "model_lora": None, "device": args.device, "dtype": "float32",
              "custom_config": None, "load_weight": True}),
        ("build", f"building {dtype} for {TARGET} failed (this toolkit release refused the quantization or "
                  "the dataset: its lines above say which)",
         (), {"do_quantization": True, "optimization_level": args.optimization_level, "quantized_dtype": dtype,
              "quantized_algorithm": "normal", "target_platform": TARGET, "num_npu_core": NPU_CORES,
              "extra_qparams": None, "dataset": str(dataset) if dataset else None, "hybrid_rate": 0,
              "max_context": context}),
        ("export_rkllm", f"writing {target.name} failed (disk full or not writable?)", (str(target),), {}),
    ]
    for name, failed, positional, kwargs in steps:
        try:
            ret = getattr(llm, name)(*positional, **kwargs)
        except Exception as exc:  # the toolkit raises as well as returning -1
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise Refusal(f"rkllm-toolkit {name} raised {why}: {failed}", 1) from None
        if ret != 0:
            raise Refusal(f"rkllm-toolkit {name} returned {ret}: {failed}", 1)
    if not target.is_file() or target.stat().st_size == 0:
        raise Refusal(f"rkllm-toolkit export_rkllm returned 0 but wrote no {target.name}", 1)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def install_line(out: Path, digest: str, board: str) -> str:
    name = shlex.quote(out.name)
    remote = f"cd /opt/rkvoice && ./install.sh --profile board --rkllm {name} --rkllm-sha256 {digest}"
    return f"scp {shlex.quote(str(out))} {board}:/opt/rkvoice/ && ssh {board} {shlex.quote(remote)}"


def run(args: argparse.Namespace) -> int:
    dtype = args.dtype.lower()
    if dtype not in RK3576_TYPES:
        raise Refusal(f"--dtype {args.dtype} is not built for {TARGET} by rkllm-toolkit; choose one of: "
                      f"{', '.join(RK3576_TYPES)}")
    context = context_length(args.config)
    check_model(args.model)
    if args.dataset:
        check_dataset(args.dataset)
    rkllm_class, version = load_toolkit(args.librkllmrt)
    out = args.out or default_out(dtype)
    scratch = scratch_dir(out)
    try:
        convert(rkllm_class, args, dtype, context, scratch / out.name)
        os.replace(scratch / out.name, out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    with contextlib.suppress(OSError):  # make the rename durable where the filesystem allows it
        fd = os.open(out.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    from rkvoice.board.versions import rkllm_runtime_abi

    digest = sha256(out)
    print(f"wrote {out}: {out.stat().st_size / 1e6:.1f} MB, {dtype}, {TARGET}, {NPU_CORES} NPU cores, max_context "
          f"{context}, rkllm-toolkit {version} (the board needs librkllmrt {version} and llm.rkllm_abi "
          f"\"{rkllm_runtime_abi(version)}\"), sha256 {digest}")
    print("copy it to the board and install it:")
    print(install_line(out, digest, args.board))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if sys.version_info < (3, 11):  # noqa: UP036 (the PC's toolkit Python, not py312, runs this)
        print(f"convert_rkllm: Python {platform.python_version()} is too old for rkvoice's config reader; run it "
              "with the Python 3.11 or 3.12 that has rkllm-toolkit", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    try:
        return run(args)
    except Refusal as exc:
        print(f"convert_rkllm: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
