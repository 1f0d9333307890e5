"""``convert_rknn.py setup-venv``: the rknn-toolkit2 venv on an x86_64 PC.

The toolkit wheel is installed without its declared dependencies (they pull torch with CUDA,
5.6 GB), then the lean pins below; the model installer's ``rknn`` step (models/manifest.yaml)
uses the same set.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger("convert_rknn")

DEFAULT_TOOLKIT_VERSION = "2.3.2"
"""Only the default for a PC venv: the version that matters is the board's librknnrt (--toolkit-version)."""
TOOLKIT_DEPS = ["protobuf<=4.25.4", "psutil", "ruamel.yaml", "scipy", "tqdm", "opencv-python-headless",
                "fast-histogram", "numpy<=1.26.4", "onnx>=1.16,<1.19", "onnxruntime", "onnxsim==0.4.36",
                "torch==2.13.0", "setuptools<81"]
MODEL_CODE_DEPS = ["einops", "conformer==0.3.2", "diffusers==0.25.0", "huggingface_hub<0.26", "pypinyin"]
MODEL_CODE_NODEPS = ["matcha-tts==0.0.7.2", "vocos==0.1.0"]
"""--model-code: the real Matcha and Vocos architectures (models/standins/make_voice.py); installed
--no-deps because they declare training stacks (lightning, hydra, torchaudio, encodec) inference never uses."""


def setup_venv(venv: Path, python: str, version: str = DEFAULT_TOOLKIT_VERSION, model_code: bool = False) -> int:
    """Create the toolkit venv: the wheel without its deps (torch 2.4 + CUDA, 5.6 GB), then lean pins."""
    def run(*cmd: str) -> None:
        log.info("$ %s", " ".join(cmd))
        subprocess.run(cmd, check=True)

    run(python, "-m", "venv", str(venv))
    pip = str(venv / "bin" / "pip")
    with tempfile.TemporaryDirectory() as tmp:
        run(pip, "download", "--no-deps", "-d", tmp, f"rknn-toolkit2=={version}")
        wheels = sorted(Path(tmp).glob("rknn_toolkit2-*.whl"))
        run(pip, "install", "--no-deps", *map(str, wheels))
    run(pip, "install", *TOOLKIT_DEPS)
    if model_code:
        run(pip, "install", "--no-deps", *MODEL_CODE_NODEPS)
        run(pip, "install", *MODEL_CODE_DEPS)
    run(str(venv / "bin" / "python"), "-c", "from rknn.api import RKNN; import onnxsim")
    return 0
