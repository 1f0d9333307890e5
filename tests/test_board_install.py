"""The board install against a local HTTP server: every model attempted, a table, the right exit.

A small board manifest is served by a real ``http.server`` (one model ok, one 404, one corrupt,
one optional and missing) and installed by the real code (``python -m rkvoice.installer install``).
The NPU step is driven with a fake librknnrt.so that carries the version string, PC-built
drop-ins with sidecars, and a fake converter run in a real throw-away venv holding a locally built
``rknn-toolkit2``-like wheel of the runtime's version (no network, seconds).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import importlib.util
import json
import sys
import textwrap
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_manifest import model

from rkvoice.installer import __main__ as cli, fetch as fetch_mod
from rkvoice.installer.install import format_table, install_profile
from rkvoice.installer.manifest import load_manifest
from rkvoice.installer.rknn import resolve_toolkit, rknn_problem

ROOT = Path(__file__).resolve().parents[1]
GOOD = b"good model bytes\n" * 100
BAD = b"not what the manifest says\n"
ONNX = b"pretend onnx graph\n"


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@contextlib.contextmanager
def serve(files: dict[str, bytes]) -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server of ``files`` (path -> body; anything else is a 404): (base URL, paths asked)."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            hits.append(self.path)
            body = files.get(self.path)
            if body is None:
                self.send_error(404, "Not Found")
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", hits
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server():
    with serve({"/good.bin": GOOD, "/bad.bin": BAD, "/graph.onnx": ONNX}) as site:
        yield site


def _url_model(mid: str, url: str, sha: str, optional: bool = False) -> str:
    return textwrap.dedent(f"""\
      - id: {mid}
        stage: tts
        profile: board
        engine: fake
        licence: test data
        dir: models/board/{mid}
        optional: {str(optional).lower()}
        sources:
          blob: {{url: "{url}", sha256: {sha}}}
        steps:
          - {{op: copy, source: blob, to: blob.bin}}
        files:
          - {{path: blob.bin, sha256: {sha}}}
    """)


def _write_manifest(root: Path, body: str) -> Path:
    path = root / "models" / "manifest.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("schema: 1\nmodels:\n" + textwrap.indent(body, "  "))
    return path


def _rows(out: str) -> dict[str, tuple[str, str]]:
    """The table's rows, cut at the header's column starts: model -> (status, fix)."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split() == ["model", "status", "fix"])
    c1, c2 = lines[head].index("status"), lines[head].index("fix")
    return {line[:c1].strip(): (line[c1:c2].strip(), line[c2:].strip()) for line in lines[head + 1:] if line.strip()}


def test_every_model_is_attempted_and_only_required_failures_fail(server, tmp_path, capsys, monkeypatch):
    base, hits = server
    real = fetch_mod.download
    monkeypatch.setattr(fetch_mod, "download", lambda url, dest, **kw: real(url, dest, retries=1, **kw))
    manifest = _write_manifest(tmp_path, "".join([
        _url_model("m-ok", f"{base}/good.bin", _sha(GOOD)),
        _url_model("m-404", f"{base}/gone.bin", _sha(GOOD)),
        _url_model("m-corrupt", f"{base}/bad.bin", _sha(GOOD)),
        _url_model("m-optional", f"{base}/also-gone.bin", _sha(GOOD), optional=True),
    ]))
    rc = cli.main(["install", "--profile", "board", "--root", str(tmp_path), "--manifest", str(manifest),
                   "--report", str(tmp_path / "report.json")])
    out, err = capsys.readouterr()
    assert rc == 1
    report = {o["model"]: o for o in json.loads((tmp_path / "report.json").read_text())}
    assert [m for m, o in report.items() if o["fails"]] == ["m-404", "m-corrupt"]
    assert report["m-optional"]["status"] == "missing" and report["m-optional"]["optional"]
    rows = _rows(out)
    assert rows["m-ok"][0] == "ok"
    assert rows["m-404"][0] == "missing"
    assert f"curl -fLo .cache/models/downloads/gone.bin {base}/gone.bin" in rows["m-404"][1]
    assert rows["m-corrupt"][0] == "corrupt" and "./install.sh --profile board" in rows["m-corrupt"][1]
    assert rows["m-optional"][0] == "missing (optional)"
    # every model was attempted, in order, after the first failure too; a 404 is final, a wrong
    # sha256 is fetched once more (it may have been damaged on the way) before it counts as corrupt
    assert hits == ["/good.bin", "/gone.bin", "/bad.bin", "/bad.bin", "/also-gone.bin"]
    (last,) = [line for line in err.splitlines() if "required model(s) not installed" in line]
    assert "m-404" in last and "m-corrupt" in last and "m-optional" not in last and "m-ok" not in last
    assert (tmp_path / "models/board/m-ok/blob.bin").read_bytes() == GOOD
    assert not (tmp_path / "models/board/m-corrupt/blob.bin").exists()
    assert not (tmp_path / ".cache/models/downloads/bad.bin").exists()  # a corrupt download is not kept


def test_a_missing_optional_model_alone_does_not_fail(server, tmp_path, capsys):
    base, _ = server
    manifest = _write_manifest(tmp_path, _url_model("m-ok", f"{base}/good.bin", _sha(GOOD))
                               + _url_model("m-optional", f"{base}/gone.bin", _sha(GOOD), optional=True))
    args = ["--profile", "board", "--root", str(tmp_path), "--manifest", str(manifest)]
    assert cli.main(["install", *args]) == 0
    assert _rows(capsys.readouterr().out)["m-optional"][0] == "missing (optional)"
    assert cli.main(["check", *args]) == 0  # check: an optional model's problem is listed, not failed
    assert "(optional) m-optional" in capsys.readouterr().err


def test_an_unreachable_host_is_tried_once_per_run(tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    calls: list[str] = []
    real = fetch_mod.download

    def quick(url, dest, **kw):
        calls.append(url)
        return real(url, dest, retries=1, **kw)

    monkeypatch.setattr(fetch_mod, "download", quick)
    manifest = _write_manifest(tmp_path, _url_model("m-a", f"{dead}/a.bin", _sha(GOOD))
                               + _url_model("m-b", f"{dead}/b.bin", _sha(GOOD)))
    report = install_profile(load_manifest(manifest), tmp_path, "board", lib_paths=())
    assert [o.status for o in report.outcomes] == ["missing", "missing"]
    assert calls == [f"{dead}/a.bin"]
    assert "could not be reached earlier in this run" in report.outcomes[1].detail


# ---------------------------------------------------------------- toolkit version

def _fake_librknnrt(path: Path, version: str | None) -> Path:
    stamp = f"librknnrt version: {version} (8d2b16e0b@2024-07-05T10:15:21)".encode() if version else b""
    path.write_bytes(b"\x7fELF" + b"\0" * 4000 + stamp + b"\0" * 1000)
    return path


def test_toolkit_version_comes_from_the_board_runtime(tmp_path):
    lib = _fake_librknnrt(tmp_path / "librknnrt.so", "2.3.2")
    tk = resolve_toolkit(None, (lib,))
    assert tk.version == "2.3.2" and str(lib) in tk.origin and tk.error is None
    assert resolve_toolkit("2.3.2", (lib,)).version == "2.3.2"
    assert resolve_toolkit("2.5.0", (tmp_path / "absent.so",)).version == "2.5.0"  # a PC: the option decides
    assert resolve_toolkit(None, (tmp_path / "absent.so",)).version is None


def test_toolkit_option_contradicting_the_board_is_refused_naming_both(tmp_path):
    lib = _fake_librknnrt(tmp_path / "librknnrt.so", "2.3.2")
    tk = resolve_toolkit("2.5.0", (lib,))
    assert tk.version is None and tk.error is not None
    assert "2.5.0" in tk.error.message and "2.3.2" in tk.error.message
    unreadable = resolve_toolkit(None, (_fake_librknnrt(tmp_path / "old.so", None),))
    assert unreadable.error is not None and unreadable.error.code == "toolkit-unreadable"


# ---------------------------------------------------------------- the rknn step

NPU_FILES = ("matcha-t32", "vocos-f600")


def _npu_manifest(root: Path, base: str, script: str = "fake_convert.py", toolkit: str = "fake-rknn-toolkit") -> Path:
    return _write_manifest(root, textwrap.dedent(f"""\
      - id: onnx-src
        stage: tts
        profile: board
        engine: fake
        licence: test data
        dir: models/board/onnx-src
        sources:
          graph: {{url: "{base}/graph.onnx", sha256: {_sha(ONNX)}}}
        steps:
          - {{op: copy, source: graph, to: model.onnx}}
        files:
          - {{path: model.onnx, sha256: {_sha(ONNX)}}}
      - id: npu
        stage: tts
        profile: board
        engine: fake
        licence: test data
        dir: models/board/npu
        needs: [onnx-src]
        sources: {{}}
        steps:
          - op: rknn
            script: {script}
            toolkit: {toolkit}
            runs:
              - [matcha, --onnx, "{{root}}/models/board/onnx-src/model.onnx", --out, "{{dest}}", --tokens, "32",
                 --toolkit-version, "{{toolkit_version}}"]
              - [vocos, --onnx, "{{root}}/models/board/onnx-src/model.onnx", --out, "{{dest}}", --frames, "600",
                 --toolkit-version, "{{toolkit_version}}"]
        files:
          - {{path: matcha-t32.rknn, sha256: null, check: rknn, note: built here}}
          - {{path: vocos-f600.rknn, sha256: null, check: rknn, note: built here}}
    """))


def _drop_in(root: Path, version: str) -> Path:
    cache = root / ".cache/models/downloads"
    cache.mkdir(parents=True, exist_ok=True)
    for stem in NPU_FILES:
        (cache / f"{stem}.rknn").write_bytes(b"RKNN" + stem.encode() * 10)
        (cache / f"{stem}.json").write_text(json.dumps({"model": stem.split("-")[0], "toolkit_version": version,
                                                        "target": "rk3576"}))
        (cache / f"{stem}.onnx").write_bytes(ONNX)
    return cache


MARKER_SCRIPT = """\
import pathlib, sys
pathlib.Path(sys.argv[0]).with_name("converter-ran").write_text(" ".join(sys.argv[1:]))
sys.exit(7)
"""


def test_pc_built_files_with_the_runtime_version_skip_the_conversion(server, tmp_path):
    base, _ = server
    (tmp_path / "fake_convert.py").write_text(MARKER_SCRIPT)
    lib = _fake_librknnrt(tmp_path / "librknnrt.so", "2.3.2")
    _drop_in(tmp_path, "2.3.2")
    report = install_profile(load_manifest(_npu_manifest(tmp_path, base)), tmp_path, "board", lib_paths=(lib,))
    assert [(o.model, o.status) for o in report.outcomes] == [("onnx-src", "ok"), ("npu", "ok")]
    assert not (tmp_path / "converter-ran").exists()
    dest = tmp_path / "models/board/npu"
    for stem in NPU_FILES:
        assert json.loads((dest / f"{stem}.json").read_text())["toolkit_version"] == "2.3.2"
        assert (dest / f"{stem}.rknn").is_file() and (dest / f"{stem}.onnx").read_bytes() == ONNX
    # installed files are re-verified against the runtime: a later runtime upgrade is caught
    assert rknn_problem(dest / "matcha-t32.rknn", "2.5.0") == (
        "mismatch", "matcha-t32.rknn was built by rknn-toolkit2 2.3.2 but the runtime is 2.5.0")


def test_pc_built_files_of_another_toolkit_are_refused_naming_both_versions(server, tmp_path):
    base, _ = server
    (tmp_path / "fake_convert.py").write_text(MARKER_SCRIPT)
    lib = _fake_librknnrt(tmp_path / "librknnrt.so", "2.3.2")
    _drop_in(tmp_path, "2.5.0")
    report = install_profile(load_manifest(_npu_manifest(tmp_path, base)), tmp_path, "board", lib_paths=(lib,))
    npu = report.outcomes[1]
    assert npu.status == "mismatch" and npu.fails
    assert "2.5.0" in npu.detail and "2.3.2" in npu.detail
    assert "rm .cache/models/downloads/matcha-t32.*" in npu.fix
    assert not (tmp_path / "converter-ran").exists() and not (tmp_path / "models/board/npu/matcha-t32.rknn").exists()
    assert "mismatch" in format_table(report)


def test_no_runtime_here_reports_missing_with_the_pc_command(server, tmp_path):
    base, _ = server
    (tmp_path / "fake_convert.py").write_text(MARKER_SCRIPT)
    report = install_profile(load_manifest(_npu_manifest(tmp_path, base)), tmp_path, "board", lib_paths=())
    npu = report.outcomes[1]
    assert npu.status == "missing" and npu.fails
    assert npu.fix.startswith("run on the board, or pass --toolkit-version and build on a PC: "
                              "./install.sh --profile board --toolkit-version V")
    assert not (tmp_path / "converter-ran").exists()


def test_a_model_built_from_a_missing_one_is_not_attempted(server, tmp_path):
    base, hits = server
    (tmp_path / "fake_convert.py").write_text(MARKER_SCRIPT)
    manifest = _npu_manifest(tmp_path, base)
    manifest.write_text(manifest.read_text().replace("/graph.onnx", "/gone.onnx"))
    lib = _fake_librknnrt(tmp_path / "librknnrt.so", "2.3.2")
    report = install_profile(load_manifest(manifest), tmp_path, "board", lib_paths=(lib,))
    assert [(o.status, o.fix) for o in report.outcomes][1] == ("missing", "fix onnx-src first (rows above)")
    assert not (tmp_path / "converter-ran").exists()
    # not on a board: the row also says how the NPU files get built once the ONNX is there
    here = install_profile(load_manifest(manifest), tmp_path, "board", lib_paths=()).outcomes[1]
    assert here.fix.startswith("fix onnx-src first (rows above); then run on the board, or pass --toolkit-version")
    # files built on a PC do not need the ONNX source here
    _drop_in(tmp_path, "2.3.2")
    report = install_profile(load_manifest(manifest), tmp_path, "board", lib_paths=(lib,))
    assert [o.status for o in report.outcomes] == ["missing", "ok"]
    assert not (tmp_path / "converter-ran").exists()


FAKE_CONVERTER = """\
import argparse, importlib.metadata, json, pathlib, sys
ap = argparse.ArgumentParser()
ap.add_argument("cmd")
ap.add_argument("--onnx", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--tokens", action="append", default=[])
ap.add_argument("--frames", action="append", default=[])
ap.add_argument("--toolkit-version", required=True)
a = ap.parse_args()
have = importlib.metadata.version("fake-rknn-toolkit")  # the venv really holds the pinned toolkit
if have != a.toolkit_version:
    sys.exit(f"toolkit {have} != {a.toolkit_version}")
if sys.prefix == sys.base_prefix:
    sys.exit("not in a venv")
pathlib.Path(a.out).mkdir(parents=True, exist_ok=True)
for n, key, stem in [(t, "tokens", "matcha-t") for t in a.tokens] + [(f, "frames", "vocos-f") for f in a.frames]:
    out = pathlib.Path(a.out) / f"{stem}{n}"
    out.with_suffix(".rknn").write_bytes(b"RKNN")
    out.with_suffix(".json").write_text(json.dumps({"model": a.cmd, key: int(n), "toolkit_version": have}))
    print("building...", flush=True)
    print(json.dumps({"model": a.cmd, "out": str(out) + ".rknn", key: int(n), "snr_vs_original_db": 99.0,
                      "snr_db": 61.0, "true_frames_ok": True, "build_s": 0.1, "peak_rss_mb": 10}))
pathlib.Path(sys.prefix).parent.joinpath("venv-seen").write_text(sys.prefix)
"""


def _fake_toolkit_wheel(where: Path, version: str) -> None:
    """A minimal wheel named like the converter's distribution, so pip installs it in the venv."""
    name, dist = "fake_rknn_toolkit", f"fake_rknn_toolkit-{version}.dist-info"
    files = {f"{name}/__init__.py": b"",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: fake-rknn-toolkit\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{k},,\n" for k in files) + f"{dist}/RECORD,,\n"
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(where / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{dist}/RECORD", record)


@pytest.fixture
def offline_pip(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    _fake_toolkit_wheel(wheels, "2.3.2")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheels


def test_the_conversion_runs_in_a_throw_away_venv_with_the_runtime_toolkit(server, tmp_path, offline_pip):
    base, _ = server
    (tmp_path / "fake_convert.py").write_text(FAKE_CONVERTER)
    lib = _fake_librknnrt(tmp_path / "librknnrt.so", "2.3.2")
    report = install_profile(load_manifest(_npu_manifest(tmp_path, base)), tmp_path, "board",
                             lib_paths=(lib,), toolkit_python=sys.executable)
    npu = report.outcomes[1]
    assert (npu.status, npu.changed) == ("ok", True), npu.detail
    dest = tmp_path / "models/board/npu"
    assert {p.name for p in dest.iterdir()} == {"matcha-t32.rknn", "matcha-t32.json",
                                                "vocos-f600.rknn", "vocos-f600.json"}
    assert json.loads((dest / "vocos-f600.json").read_text())["toolkit_version"] == "2.3.2"
    venv = Path((tmp_path / ".cache/models/venv-seen").read_text())
    assert venv.name == "venv-npu" and not venv.exists()  # used, then deleted


def test_a_failing_conversion_is_reported_and_the_venv_deleted(server, tmp_path, offline_pip):
    base, _ = server
    (tmp_path / "fake_convert.py").write_text("import sys\nprint('Range need to be constant')\nsys.exit(3)\n")
    lib = _fake_librknnrt(tmp_path / "librknnrt.so", "2.3.2")
    report = install_profile(load_manifest(_npu_manifest(tmp_path, base)), tmp_path, "board", lib_paths=(lib,))
    npu = report.outcomes[1]
    assert npu.status == "missing" and "exited 3" in npu.detail and "Range need to be constant" in npu.detail
    assert "--only npu" in npu.fix
    assert not (tmp_path / ".cache/models/venv-npu").exists()


# ---------------------------------------------------------------- the real manifest

def _rknn_setup():
    spec = importlib.util.spec_from_file_location("rknn_setup", ROOT / "models" / "rknn_setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_real_board_manifest_converts_on_the_board_with_the_lean_toolkit_deps():
    m = load_manifest(ROOT / "models" / "manifest.yaml")
    npu = model(m, "board-matcha-rknn")
    (step,) = npu.steps
    assert step.op == "rknn" and step.toolkit == "rknn-toolkit2" and npu.needs == ("board-matcha-zh-en-onnx",)
    # the lean toolkit set of rknn_setup.py, torch aside: on aarch64 a CPU-only torch the toolkits accept
    pc = [d.split(";")[0].strip() for d in step.deps if "aarch64'" not in d or "!=" in d]
    assert pc == list(_rknn_setup().TOOLKIT_DEPS)
    assert "torch==2.2.0; platform_machine == 'aarch64'" in step.deps
    assert all("{toolkit_version}" in run for run in step.runs)  # never a fixed toolkit version
    assert [f.path for f in npu.files] == ["matcha-encoder.onnx", "matcha-t32.rknn", "matcha-t64.rknn",
                                           "vocos-f600.rknn", "vocos-f200.rknn"]
    assert model(m, "board-fastspeech2-vocoder-rknn").optional
    assert not model(m, "board-matcha-zh-en-onnx").optional and not npu.optional


# ---------------------------------------------------------------- the interpreter on a board

PINNED_SHA = "81b644d166e0bfb918615af8a2363f8fcf26eccdcc60a5334b6a62c088470bac"


def _install_checkout(tmp_path: Path) -> Path:
    """A checkout holding only install.sh and the package: enough for its interpreter step."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "install.sh").write_bytes((ROOT / "install.sh").read_bytes())
    (checkout / "rkvoice").symlink_to(ROOT / "rkvoice")
    return checkout


def test_an_aarch64_board_without_python312_fetches_the_pinned_cpython_and_checks_it(server, tmp_path):
    """No python3.12 on an aarch64 board: install.sh downloads the pinned tarball itself (here from a
    mirror serving the wrong bytes, which the pinned sha256 must refuse) instead of asking for one."""
    import subprocess

    base, hits = server
    checkout = _install_checkout(tmp_path)
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in {"uname": 'if [ "$1" = -m ]; then echo aarch64; else exec /bin/uname "$@"; fi',
                       "python3.12": "exit 127"}.items():
        (fake / name).write_text("#!/bin/sh\n" + body + "\n")
        (fake / name).chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path), "RKVOICE_PBS_URL": f"{base}/good.bin"}
    r = subprocess.run(["bash", str(checkout / "install.sh"), "--profile", "board"], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1
    assert "using the pinned standalone CPython" in r.stdout
    assert hits == ["/good.bin"]
    assert f"sha256 mismatch: expected {PINNED_SHA}, got {_sha(GOOD)}" in r.stderr
    assert "step 'interpreter' failed: cannot fetch the pinned CPython" in r.stderr
    assert list((checkout / ".cache" / "python").iterdir()) == []  # nothing unverified is kept
    assert not (checkout / "py312").exists()


def test_an_installed_python312_behind_a_dead_pyenv_shim_is_found(tmp_path):
    """`python3.12` on PATH is a pyenv shim that does not run (no 3.12 selected), but pyenv's versions
    directory holds one: install.sh builds py312/ with it, not with python3 3.11."""
    import subprocess

    checkout = _install_checkout(tmp_path)
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3.12").write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    found = tmp_path / ".pyenv" / "versions" / "3.12.9" / "bin" / "python3.12"
    found.parent.mkdir(parents=True)
    # answers the installer's questions like a CPython 3.12.9; "-m venv" fails, which ends the run there
    found.write_text('#!/bin/sh\ncase "$2" in *sys.executable*) echo "$0" ;; *%d.%d.%d*) echo 3.12.9 ;; esac\n'
                     '[ "$1" = -m ] && exit 1\nexit 0\n')
    for f in (shims / "python3.12", found):
        f.chmod(0o755)
    env = {"PATH": f"{shims}:/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run(["bash", str(checkout / "install.sh")], env=env, capture_output=True, text=True,
                       timeout=60, check=False)
    assert f"creating py312/ with {found} (Python 3.12.9)" in r.stdout, (r.stdout, r.stderr)
    assert "WARNING: python3.12 not found" not in r.stdout
    assert r.returncode != 0 and "-m venv failed" in r.stderr


def test_a_bad_toolkit_version_option_stops_the_installer_with_exit_2(tmp_path, capsys):
    manifest = _npu_manifest(tmp_path, "http://127.0.0.1:9")
    rc = cli.main(["install", "--profile", "board", "--root", str(tmp_path), "--manifest", str(manifest),
                   "--toolkit-version", "latest"])
    assert rc == 2 and "--toolkit-version 'latest': expected a version like 2.3.2" in capsys.readouterr().err
    assert not (tmp_path / ".cache").exists()  # nothing attempted


def test_a_toolkit_option_contradicting_the_board_marks_only_the_npu_model(server, tmp_path):
    base, _ = server
    (tmp_path / "fake_convert.py").write_text(MARKER_SCRIPT)
    lib = _fake_librknnrt(tmp_path / "librknnrt.so", "2.3.2")
    report = install_profile(load_manifest(_npu_manifest(tmp_path, base)), tmp_path, "board",
                             lib_paths=(lib,), toolkit_version="2.5.0")
    onnx, npu = report.outcomes
    assert onnx.status == "ok"
    assert npu.status == "mismatch" and "--toolkit-version 2.5.0" in npu.detail and "is 2.3.2" in npu.detail
    assert npu.fix == "./install.sh --profile board without --toolkit-version (the board's runtime decides)"
    assert not (tmp_path / "converter-ran").exists()


# ---------------------------------------------------------------- the rehearsal: install.sh end to end

def _rkllm_entry(platform_line: bool) -> str:
    """The real manifest's RKLLM entry as written there (without ``platform: aarch64`` it is attempted
    on this x86 machine too, as on a board)."""
    text = (ROOT / "models" / "manifest.yaml").read_text()
    start = text.index("  - id: board-llm-qwen-0.5b-rkllm")
    entry = text[start:text.index("\n  - id:", start + 1)].rstrip() + "\n"
    assert "optional: true" in entry
    return textwrap.dedent(entry if platform_line else entry.replace("    platform: aarch64\n", ""))


def _rehearsal_checkout(tmp_path: Path, base: str) -> Path:
    """A checkout of install.sh, a copy of the package (the installer writes beside it), the requirement
    files, a board manifest of one served model and the real RKLLM entry, a py312/ that sees this
    interpreter's packages (so pip has nothing to fetch), and a stand-in systemd/install-service.sh
    that records its call."""
    import shutil
    import sysconfig

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "install.sh").write_bytes((ROOT / "install.sh").read_bytes())
    shutil.copytree(ROOT / "rkvoice", checkout / "rkvoice", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "requirements", checkout / "requirements")
    _write_manifest(checkout, _url_model("m-ok", f"{base}/good.bin", _sha(GOOD)) + _rkllm_entry(False))
    venv = checkout / "py312"
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (next(venv.glob("lib/python3*/site-packages")) / "this-checkout.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    service = checkout / "systemd" / "install-service.sh"
    service.parent.mkdir()
    service.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/called"\necho "stand-in unit installed"\n')
    return checkout


def _run_install(checkout: Path, tmp_path: Path, *args: str):
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python3.12").exists():
        (bin_dir / "python3.12").symlink_to(sys._base_executable)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "PIP_NO_INDEX": "1",
           "PIP_CONFIG_FILE": os.devnull}
    return subprocess.run(["bash", str(checkout / "install.sh"), "--profile", "board", *args], env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_board_install_rehearsal_finishes_without_an_rkllm_file_and_goes_on_to_the_service(server, tmp_path):
    """install.sh --profile board --service, downloads served here: the prerequisites are reported,
    the RKLLM model is missing (optional) with the recipe, and the service step runs."""
    import os

    base, _ = server
    checkout = _rehearsal_checkout(tmp_path, base)
    r = _run_install(checkout, tmp_path, "--service")
    out, err = r.stdout, r.stderr
    assert "==> [prerequisites]" in out and "board prerequisites:" in out
    assert "[MISS] board" in out and "fix: the board profile is built for the RK3576" in out  # this is no board
    assert "librkllmrt" in out and "memory" in out and "disk" in out
    rows = _rows(out)
    assert rows["m-ok"][0] == "ok"
    assert rows["board-llm-qwen-0.5b-rkllm"] == ("missing (optional)", (
        "make it on an x86_64 PC with models/convert_rkllm.py (docs/rkllm-model.md), then ./install.sh "
        "--profile board --rkllm FILE_OR_HTTPS_URL [--rkllm-sha256 HEX]"))
    assert "no RKLLM model: the board answers with its local tools" in err
    assert "skipped: the install is incomplete" not in out
    assert "==> [service] systemd unit" in out, (out, err)
    if os.geteuid() == 0:
        assert r.returncode == 0, err
        assert (checkout / "systemd" / "called").read_text().split() == ["--install-dir", str(checkout)]
        assert "==> [done]" in out
    else:
        assert r.returncode == 1 and "--service installs a system unit and needs root" in err
    report = {o["model"]: o for o in json.loads((checkout / ".cache/models/install-report.json").read_text())}
    assert report["board-llm-qwen-0.5b-rkllm"]["status"] == "missing" and not report["board-llm-qwen-0.5b-rkllm"]["fails"]


def test_board_install_rehearsal_brings_the_rkllm_model_from_a_url(server, tmp_path):
    """The same install with --rkllm URL --rkllm-sha256: downloaded, checked, installed, in the report."""
    import struct

    from rkvoice.installer.rkllm import MIN_BYTES, RKLLM_MAGIC

    base, _ = server
    checkout = _rehearsal_checkout(tmp_path, base)
    model_bytes = (RKLLM_MAGIC + struct.pack("<I", 3)).ljust(MIN_BYTES, b"\0")
    with serve({"/qwen.rkllm": model_bytes}) as (site, _):
        url = f"{site}/qwen.rkllm"
        r = _run_install(checkout, tmp_path, "--rkllm", url, "--rkllm-sha256", _sha(model_bytes))
    assert r.returncode == 0, r.stderr
    installed = checkout / "models/board/llm/qwen2.5-0.5b-instruct-w4a16.rkllm"
    assert installed.read_bytes() == model_bytes
    rows = _rows(r.stdout)
    assert rows["board-llm-qwen-0.5b-rkllm"][0] == "ok" and "no RKLLM model" not in r.stderr
    report = {o["model"]: o for o in json.loads((checkout / ".cache/models/install-report.json").read_text())}
    assert report["board-llm-qwen-0.5b-rkllm"]["sha256"] == _sha(model_bytes)
    assert report["board-llm-qwen-0.5b-rkllm"]["source"] == url
    assert [p.name for p in installed.parent.iterdir()] == [installed.name]
    assert not (checkout / ".cache/models/downloads/qwen.rkllm").exists()  # one copy, in its place
