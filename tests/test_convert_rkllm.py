"""models/convert_rkllm.py run as a user runs it (a subprocess of py312/bin/python) against the stand-in
rkllm-toolkit in tests/fixtures/rkllm_standin: the toolkit's call sequence and arguments, the refusals
before any toolkit call, the toolkit's own failures, and that a failed run leaves no file behind."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rkvoice.config import DEFAULT_CONFIG, ROOT, load_config

SCRIPT = ROOT / "models" / "convert_rkllm.py"
STANDIN = ROOT / "tests" / "fixtures" / "rkllm_standin"
DOC = ROOT / "docs" / "rkllm-model.md"
PRODUCT_FILE = "qwen2.5-0.5b-instruct-w4a16.rkllm"
"""rkvoice.answer.llm.base's default RKLLM model and the manifest's file: where the board looks."""


def qwen_folder(path: Path, model_type: str = "qwen2", weights: bytes | None = None) -> Path:
    """A Hugging Face folder with the files the converter and the stand-in read (no real weights)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": model_type}))
    (path / "tokenizer_config.json").write_text("{}")
    header = json.dumps({"__metadata__": {"format": "pt"}}).encode()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header if weights is None else weights)
    return path


class Run:
    def __init__(self, tmp: Path, *args: str, standin: Path | None = STANDIN, env: dict[str, str] | None = None):
        self.log = tmp / "calls.jsonl"
        full_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        full_env.update(env or {}, RKLLM_STANDIN_LOG=str(self.log))
        if standin:
            full_env["PYTHONPATH"] = str(standin)
        self.proc = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=tmp, env=full_env,
                                   capture_output=True, text=True, timeout=120)
        self.code = self.proc.returncode
        self.err = self.proc.stderr.strip()
        self.out = self.proc.stdout

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def one_line(self) -> str:
        assert len(self.err.splitlines()) == 1, self.err
        assert self.err.startswith("convert_rkllm: "), self.err
        return self.err


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return qwen_folder(tmp_path / "Qwen2.5-0.5B-Instruct")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.suffix == ".rkllm")


def board_context(config: Path = ROOT / "config.board.yaml") -> int:
    return load_config(files=[DEFAULT_CONFIG, config]).llm.context


def test_default_run_calls_the_toolkit_as_rockchips_example_and_prints_the_install_line(tmp_path, model):
    run = Run(tmp_path, model.name, "--librkllmrt", "1.3.0")
    assert run.code == 0, run.err
    assert [c["call"] for c in run.calls()] == ["RKLLM", "load_huggingface", "build", "export_rkllm"]
    load, build, export = (c["args"] for c in run.calls()[1:])
    assert load == {"model": model.name, "model_lora": None, "device": "cpu", "dtype": "float32",
                    "custom_config": None, "load_weight": True}
    assert build == {"do_quantization": True, "optimization_level": 0, "quantized_dtype": "w4a16",
                     "quantized_algorithm": "normal", "target_platform": "rk3576", "num_npu_core": 2,
                     "extra_qparams": None, "dataset": None, "hybrid_rate": 0, "max_context": board_context()}
    out = tmp_path / PRODUCT_FILE
    assert Path(export["export_path"]).name == PRODUCT_FILE and Path(export["export_path"]).parent != tmp_path
    data = out.read_bytes()
    assert data.startswith(b"RKLLM-STANDIN\n") and json.loads(data[14:])["quantized_dtype"] == "w4a16"
    digest = hashlib.sha256(data).hexdigest()
    last = run.out.strip().splitlines()[-1]
    assert last == (f"scp {PRODUCT_FILE} board:/opt/rkvoice/ && ssh board 'cd /opt/rkvoice && ./install.sh "
                    f"--profile board --rkllm {PRODUCT_FILE} --rkllm-sha256 {digest}'")
    assert 'rkllm-toolkit 1.3.0 (the board needs librkllmrt 1.3.0 and llm.rkllm_abi "1.3")' in run.out
    assert f"max_context {board_context()}" in run.out
    assert leftovers(tmp_path) == [PRODUCT_FILE]  # no temporary folder left beside it


def test_options_reach_the_toolkit_and_the_context_comes_from_the_config(tmp_path, model):
    (tmp_path / "data.json").write_text(json.dumps([{"input": "<|im_start|>user\n几点了<|im_end|>\n", "target": "三点。"}]))
    (tmp_path / "my.yaml").write_text("llm:\n  context: 4096\n")
    (tmp_path / "out dir").mkdir()
    run = Run(tmp_path, str(model), "--dtype", "W8A8", "--dataset", "data.json", "--config", "my.yaml",
              "--device", "cuda", "--optimization-level", "1", "--out", "out dir/q.rkllm", "--board", "pi@rk3576")
    assert run.code == 0, run.err
    load, build = run.calls()[1]["args"], run.calls()[2]["args"]
    assert load["device"] == "cuda"
    assert (build["quantized_dtype"], build["dataset"], build["max_context"]) == ("w8a8", "data.json", 4096)
    assert build["optimization_level"] == 1
    assert board_context(tmp_path / "my.yaml") == 4096 != board_context()
    out = tmp_path / "out dir" / "q.rkllm"
    cmd = shlex.split(run.out.strip().splitlines()[-1])
    assert cmd[:3] == ["scp", "out dir/q.rkllm", "pi@rk3576:/opt/rkvoice/"]
    assert cmd[-1].endswith(f"--rkllm q.rkllm --rkllm-sha256 {hashlib.sha256(out.read_bytes()).hexdigest()}")


def test_the_default_name_for_w8a8_is_the_products_with_the_type(tmp_path, model):
    run = Run(tmp_path, model.name, "--dtype", "w8a8")
    assert run.code == 0, run.err
    assert leftovers(tmp_path) == [PRODUCT_FILE.replace("w4a16", "w8a8")]


@pytest.mark.parametrize("dtype", ["w8a8_g128", "w4a8_g32", "int4"])
def test_a_type_rk3576_does_not_build_is_refused_before_the_toolkit_runs(tmp_path, model, dtype):
    run = Run(tmp_path, model.name, "--dtype", dtype)
    assert run.code == 2
    line = run.one_line()
    assert f"--dtype {dtype} is not built for rk3576" in line and "w4a16, w4a16_g32, w4a16_g64, w4a16_g128, w8a8" in line
    assert run.calls() == [] and leftovers(tmp_path) == []


def test_a_toolkit_of_another_version_than_the_boards_runtime_is_refused(tmp_path, model):
    run = Run(tmp_path, model.name, "--librkllmrt", "1.2.3")
    assert run.code == 2
    line = run.one_line()
    assert "rkllm-toolkit 1.3.0 is installed but the board's librkllmrt is 1.2.3" in line
    assert "release-v1.2.3" in line and "rkllm_toolkit-1.2.3-cp312-cp312-linux_x86_64.whl" in line
    assert run.calls() == [] and leftovers(tmp_path) == []


def test_a_toolkit_whose_runtime_rkvoice_cannot_drive_is_refused(tmp_path, model):
    old = tmp_path / "toolkit-1.2.0"
    shutil.copytree(STANDIN, old, ignore=shutil.ignore_patterns("__pycache__"))
    info = old / "rkllm_toolkit-1.3.0.dist-info"
    (info / "METADATA").write_text((info / "METADATA").read_text().replace("Version: 1.3.0", "Version: 1.2.0"))
    info.rename(old / "rkllm_toolkit-1.2.0.dist-info")
    run = Run(tmp_path, model.name, standin=old)
    assert run.code == 2
    assert "rkllm-toolkit 1.2.0 makes models for librkllmrt 1.2.0, which rkvoice does not drive" in run.one_line()
    assert run.calls() == []


def test_without_the_toolkit_one_line_says_where_to_get_it(tmp_path, model):
    run = Run(tmp_path, model.name, standin=None)
    assert run.code == 2
    line = run.one_line()
    assert "rkllm-toolkit is not installed" in line
    assert "https://github.com/airockchip/rknn-llm" in line and "rkllm-toolkit/packages/rkllm_toolkit-" in line
    assert "librkllmrt" in line and "assistant.py --check" in line


def test_the_toolkit_refusing_the_type_fails_the_build_and_leaves_nothing(tmp_path, model):
    run = Run(tmp_path, model.name, env={"RKLLM_STANDIN_TYPES": "rk3576=w8a8"})  # a release without w4a16
    assert run.code == 1
    assert "E rkllm: quantized_dtype 'w4a16' is not supported on rk3576" in run.out  # the toolkit's own line
    assert run.one_line() == ("convert_rkllm: rkllm-toolkit build returned -1: building w4a16 for rk3576 failed "
                              "(this toolkit release refused the quantization or the dataset: its lines above say which)")
    assert [c["call"] for c in run.calls()] == ["RKLLM", "load_huggingface", "build"]
    assert leftovers(tmp_path) == []


def test_an_export_cut_short_leaves_the_installed_file_as_it_was(tmp_path, model):
    (tmp_path / PRODUCT_FILE).write_bytes(b"the model converted before")
    run = Run(tmp_path, model.name, env={"RKLLM_STANDIN_DISK_BYTES": "20"})
    assert run.code == 1
    assert run.one_line() == (f"convert_rkllm: rkllm-toolkit export_rkllm returned -1: writing {PRODUCT_FILE} "
                              "failed (disk full or not writable?)")
    assert (tmp_path / PRODUCT_FILE).read_bytes() == b"the model converted before"
    assert leftovers(tmp_path) == [PRODUCT_FILE]


def test_a_load_failure_is_named_and_nothing_is_written(tmp_path):
    broken = qwen_folder(tmp_path / "broken", weights=b"\x00\x01 truncated download")
    run = Run(tmp_path, broken.name)
    assert run.code == 1
    assert run.one_line().startswith("convert_rkllm: rkllm-toolkit load_huggingface returned -1: loading broken failed")
    assert [c["call"] for c in run.calls()] == ["RKLLM", "load_huggingface"]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("make", "expected"), [
    (lambda d: None, "model folder nowhere does not exist; download it: hf download Qwen/Qwen2.5-0.5B-Instruct"),
    (lambda d: d.mkdir(), "nowhere is not a Hugging Face model folder (config.json: FileNotFoundError)"),
    (lambda d: qwen_folder(d, model_type="llama"), "nowhere holds model_type 'llama', not qwen2"),
    (lambda d: (qwen_folder(d), (d / "model.safetensors").unlink()), "nowhere lacks *.safetensors"),
])
def test_a_missing_or_wrong_model_folder_is_refused(tmp_path, make, expected):
    make(tmp_path / "nowhere")
    run = Run(tmp_path, "nowhere")
    assert run.code == 2
    assert expected in run.one_line()
    assert run.calls() == []


def test_bad_dataset_and_outputs_are_refused_before_the_toolkit_runs(tmp_path, model):
    (tmp_path / "bad.json").write_text('[{"input": "hi"}]')
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    unwritable = locked if not os.access(locked, os.W_OK) else Path("/sys")  # root writes anywhere but sysfs
    cases = [
        (["--dataset", "bad.json"], 'calibration dataset bad.json must be a non-empty JSON list of {"input"'),
        (["--dataset", "none.json"], "calibration dataset none.json cannot be read (FileNotFoundError)"),
        (["--out", "no/such/dir/x.rkllm"], "output folder no/such/dir does not exist"),
        (["--out", "x.bin"], "--out x.bin must end in .rkllm"),
        (["--out", str(unwritable / "x.rkllm")], f"cannot write in {unwritable} ("),
        (["--config", "none.yaml"], "config file none.yaml does not exist"),
    ]
    for args, expected in cases:
        run = Run(tmp_path, model.name, *args)
        assert run.code == 2, args
        assert expected in run.one_line(), args
    assert run.calls() == []
    assert leftovers(tmp_path) == [] and list(locked.iterdir()) == []


def test_a_config_context_the_toolkit_cannot_take_is_refused(tmp_path, model):
    (tmp_path / "odd.yaml").write_text("llm:\n  context: 2000\n")
    run = Run(tmp_path, model.name, "--config", "odd.yaml")
    assert run.code == 2
    assert "llm.context 2000 in odd.yaml: rkllm-toolkit needs a multiple of 32 up to 16384" in run.one_line()


def test_the_commands_on_the_recipe_page_are_the_scripts():
    """Every convert_rkllm.py line in docs/rkllm-model.md parses with the script's parser, and every flag the
    page names belongs to the script, assistant.py, install.sh or the git/hf commands it shows."""
    sys.path.insert(0, str(ROOT / "models"))
    import convert_rkllm

    from rkvoice.cli.entry import build_parser

    text = DOC.read_text(encoding="utf-8")
    shown = [line.split("convert_rkllm.py", 1)[1].split("  #")[0] for line in text.splitlines()
             if re.match(r"\s*python3? models/convert_rkllm\.py", line)]
    assert shown, f"{DOC.name} shows no models/convert_rkllm.py command"
    for rest in shown:
        convert_rkllm.parser().parse_args(shlex.split(rest))
    known = {o for p in (convert_rkllm.parser(), build_parser()) for a in p._actions for o in a.option_strings}
    known |= set(re.findall(r"(--[a-z][\w-]*)\)", (ROOT / "install.sh").read_text(encoding="utf-8")))  # case labels
    known |= {"--branch", "--depth", "--local-dir"}  # git clone, hf download
    named = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text))
    assert named <= known, f"{DOC.name} names flags nothing takes: {sorted(named - known)}"
    assert f"`config.yaml`: {board_context()})" in text, f"{DOC.name} states another llm.context than the config's"
