"""``install.sh --profile board --rkllm FILE_OR_URL [--rkllm-sha256 HEX]``: the real manifest's RKLLM
entry, installed into a temporary root by the real installer from a local file and from a URL served
by a local ``http.server``; every bad input is one line, the install goes on with the LLM missing, and
nothing is left half-written (no temp file, no partial model, the model installed before kept)."""

from __future__ import annotations

import hashlib
import json
import socket
import struct
from pathlib import Path

import pytest
from test_board_install import serve

from rkvoice.installer import __main__ as cli
from rkvoice.installer.install import install_profile
from rkvoice.installer.manifest import load_manifest
from rkvoice.installer.rkllm import MIN_BYTES, RKLLM_MAGIC, header_note, refusal

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "models" / "manifest.yaml"
LLM_ID = "board-llm-qwen-0.5b-rkllm"
DEST = Path("models/board/llm/qwen2.5-0.5b-instruct-w4a16.rkllm")


def rkllm_bytes(tag: bytes = b"model", size: int = MIN_BYTES) -> bytes:
    """A stand-in .rkllm: the 1.3.x header (masked GGUF magic, container version 3), padded to ``size``."""
    head = RKLLM_MAGIC + struct.pack("<I", 3) + tag
    return head + b"\0" * (size - len(head))


GOOD = rkllm_bytes()
GOOD_SHA = hashlib.sha256(GOOD).hexdigest()


@pytest.fixture(scope="module")
def site():
    with serve({"/qwen.rkllm": GOOD, "/page.rkllm": b"<!DOCTYPE html><html>sign in first</html>"}) as served:
        yield served


def run(root: Path, *extra: str) -> tuple[int, dict, str]:
    """The installer on the real manifest's RKLLM entry alone: (exit, its report row, stderr)."""
    report = root / "report.json"
    rc = cli.main(["install", "--profile", "board", "--root", str(root), "--manifest", str(MANIFEST),
                   "--only", LLM_ID, "--report", str(report), *extra])
    rows = {o["model"]: o for o in json.loads(report.read_text())} if report.exists() else {}
    return rc, rows.get(LLM_ID, {}), ""


def leftovers(root: Path) -> list[str]:
    """Anything beside the installed model in its directory, and any download left in the cache."""
    llm = root / DEST.parent
    cache = root / ".cache/models/downloads"
    return sorted(p.name for d in (llm, cache) if d.is_dir() for p in d.iterdir() if p.name != DEST.name)


def test_a_local_file_is_copied_checked_and_recorded(tmp_path, capsys):
    src = tmp_path / "out" / "Qwen2.5-0.5B-Instruct_W4A16_RK3576.rkllm"
    src.parent.mkdir()
    src.write_bytes(GOOD)
    root = tmp_path / "root"
    rc, row, _ = run(root, "--rkllm", str(src), "--rkllm-sha256", GOOD_SHA.upper())
    err = capsys.readouterr().err
    assert rc == 0, err
    assert (root / DEST).read_bytes() == GOOD and src.read_bytes() == GOOD  # copied, the user's file stays
    assert row["status"] == "ok" and row["changed"] and row["source"] == str(src) and row["sha256"] == GOOD_SHA
    assert "RKLLM header, container version 3" in row["detail"]
    assert "runtime load check skipped" in row["detail"]  # no librkllmrt on this machine
    assert "no RKLLM model" not in err and "sudo systemctl restart rkvoice" in err
    assert leftovers(root) == []


def test_an_https_url_is_downloaded_checked_and_not_kept_twice(tmp_path, site, capsys):
    base, hits = site
    root = tmp_path / "root"
    rc, row, _ = run(root, "--rkllm", f"{base}/qwen.rkllm", "--rkllm-sha256", GOOD_SHA)
    assert rc == 0, capsys.readouterr().err
    assert (root / DEST).read_bytes() == GOOD
    assert row["status"] == "ok" and row["source"] == f"{base}/qwen.rkllm" and row["sha256"] == GOOD_SHA
    assert hits[-1] == "/qwen.rkllm"
    assert leftovers(root) == []  # moved out of the download cache, no second copy


def _closed_port_url() -> str:
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/qwen.rkllm"


BAD_INPUTS = {
    "missing file": (lambda tmp, base: str(tmp / "nowhere.rkllm"), None, "no such file"),
    "unreachable url": (lambda tmp, base: _closed_port_url(), None, "cannot connect"),
    "sha256 mismatch": (lambda tmp, base: f"{base}/qwen.rkllm", "0" * 64, "sha256 mismatch"),
    "too small": (lambda tmp, base: _write(tmp / "small.rkllm", GOOD[:4096]), None, "too small for an RKLLM model"),
    "a GGUF": (lambda tmp, base: _write(tmp / "q.rkllm", b"GGUF" + GOOD[4:]), None, "a GGUF model (llama.cpp)"),
    "an rknn": (lambda tmp, base: _write(tmp / "m.rkllm", b"RKNN" + GOOD[4:]), None, "an .rknn model"),
    "a web page": (lambda tmp, base: f"{base}/page.rkllm", None, "too small"),
}


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_the_install_goes_on_without_the_llm(case, tmp_path, site, capsys, caplog):
    base, _ = site
    where, sha, needle = BAD_INPUTS[case]
    src = where(tmp_path, base)
    root = tmp_path / "root"
    args = ["--rkllm", src] + (["--rkllm-sha256", sha] if sha else [])
    rc, row, _ = run(root, *args)
    err = capsys.readouterr().err
    assert rc == 0  # the LLM is optional: the install goes on
    assert row["status"] == "missing" and row["optional"] and not row["fails"]
    assert needle in row["detail"] and "\n" not in row["detail"]
    assert row["fix"].startswith("fix the file or URL, then ./install.sh --profile board --rkllm")
    said = [r.getMessage() for r in caplog.records if LLM_ID in r.getMessage() and needle in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0], caplog.text  # one line naming the problem
    assert "no RKLLM model: the board answers with its local tools" in err and "models/convert_rkllm.py" in err
    assert not (root / DEST).exists() and leftovers(root) == []  # nothing half-written, no refused download


def test_a_refused_file_keeps_the_model_installed_before(tmp_path, capsys):
    root = tmp_path / "root"
    (root / DEST).parent.mkdir(parents=True)
    (root / DEST).write_bytes(GOOD)
    rc, row, _ = run(root, "--rkllm", _write(tmp_path / "bad.rkllm", b"GGUF" + GOOD[4:]))
    assert rc == 0 and row["status"] == "ok" and "the model installed before is kept" in row["detail"]
    assert (root / DEST).read_bytes() == GOOD and leftovers(root) == []


def test_the_runtime_load_check_refusing_leaves_nothing(tmp_path):
    src = Path(_write(tmp_path / "m.rkllm", GOOD))
    seen: list[Path] = []

    def refuses(path: Path) -> tuple[bool, str]:
        seen.append(path)
        assert path.read_bytes() == GOOD and path.parent == tmp_path / DEST.parent  # checked beside its place
        return False, "librkllmrt 1.2.1 refused it: invalid rknn llm model magic"

    from rkvoice.installer.rkllm import RkllmSource

    report = install_profile(load_manifest(MANIFEST), tmp_path, "board", only=[LLM_ID],
                             rkllm=RkllmSource(str(src)), rkllm_check=refuses)
    (row,) = report.outcomes
    assert row.status == "missing" and "invalid rknn llm model magic" in row.detail and seen
    assert not (tmp_path / DEST).exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("args, needle", [
    (["--rkllm", "x.rkllm", "--rkllm-sha256", "abc"], "--rkllm-sha256 'abc': expected 64 hex digits"),
    (["--rkllm-sha256", "0" * 64], "--rkllm-sha256 needs --rkllm"),
])
def test_bad_options_stop_before_anything_is_attempted(args, needle, tmp_path, capsys):
    rc = cli.main(["install", "--profile", "board", "--root", str(tmp_path), "--manifest", str(MANIFEST), *args])
    assert rc == 2 and needle in capsys.readouterr().err
    assert not (tmp_path / ".cache").exists() and not (tmp_path / "models").exists()


def test_rkllm_is_refused_for_the_portable_profile(tmp_path, capsys):
    rc = cli.main(["install", "--profile", "portable", "--root", str(tmp_path), "--manifest", str(MANIFEST),
                   "--rkllm", "x.rkllm"])
    assert rc == 2 and "--rkllm is for the board profile" in capsys.readouterr().err


def test_what_the_first_bytes_say():
    assert refusal(GOOD[:64], len(GOOD)) is None and header_note(GOOD[:64]).endswith("container version 3")
    unknown = b"\x01\x02\x03\x04" + b"\0" * 60  # a layout not known here (before 1.3): the runtime decides
    assert refusal(unknown, MIN_BYTES) is None and "not recognised" in header_note(unknown)
    assert "safetensors" in (refusal(struct.pack("<Q", 1234) + b'{"__metadata__"', MIN_BYTES) or "")
    assert "too small" in (refusal(GOOD[:64], MIN_BYTES - 1) or "")


def test_the_runtime_load_check_runs_rkllm_init_in_a_child_and_reports_its_refusal(tmp_path, monkeypatch):
    """On an aarch64 board with librkllmrt the check is the runtime itself, in a child process; here the
    library is a stand-in file with the version stamp, which the dynamic linker refuses."""
    import platform

    from rkvoice.installer.rkllm import runtime_load_check

    model = Path(_write(tmp_path / "m.rkllm", GOOD))
    lib = tmp_path / "librkllmrt.so"
    lib.write_bytes(b"\0rkllm-runtime version: 1.2.1 (0123456@2025-01-01T00:00:00)\0")
    assert runtime_load_check(model, (lib,))[1].startswith("runtime load check skipped") or \
        platform.machine() == "aarch64"
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    passed, said = runtime_load_check(model, (lib,))
    assert not passed and said.startswith(f"librkllmrt 1.2.1 ({lib}) refused it: cannot load {lib}")
    lib.write_bytes(b"\0rkllm-runtime version: 1.2.0 (0123456@2025-01-01T00:00:00)\0")
    passed, said = runtime_load_check(model, (lib,))
    assert passed and "which the binding does not drive" in said  # never driven through a wrong ABI
