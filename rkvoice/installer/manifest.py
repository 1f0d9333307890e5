"""models/manifest.yaml: what every model is, where it comes from and how it is assembled.

Read into frozen dataclasses; anything not understood (unknown keys, missing fields, bad sha256
values) is an error naming the entry and the field. Paths in ``files`` and step targets are relative
to the model's ``dir``; ``{work}`` in a step target is the model's scratch directory. A model may be
``optional`` (never fails the install) and may ``need`` earlier models of its profile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rkvoice.errors import RkvoiceError, Stage

STAGES = ("wake", "vad", "asr", "llm", "tts", "text")
PROFILES = ("portable", "board")
_STEP_KEYS = {  # op -> (required keys, optional keys)
    "extract": (("op", "source", "to"), ("member", "sha256")),
    "untar": (("op", "source", "to"), ("strip",)),
    "concat": (("op", "parts", "to"), ()),
    "copy": (("op", "source", "to"), ("member", "sha256")),
    "convert": (("op", "venv", "script", "runs"), ()),
    "prepare": (("op", "args"), ("script", "module")),  # a script file of the checkout, or a module run with -m
    "rknn": (("op", "script", "runs", "toolkit"), ("deps",)),
}
FILE_CHECKS = ("", "onnx", "rknn")
_SHA = re.compile(r"^[0-9a-f]{64}$")
_PIP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+$")
_SPEC = r"[<>=!~]=?[A-Za-z0-9.*+!-]+"
_REQ = re.compile(  # NAME[extras] with optional specifiers and one optional marker ("; platform_machine == 'x'")
    rf"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?({_SPEC}(,{_SPEC})*)?"
    r"( *; *[a-z_]+ *[=!]= *['\"][A-Za-z0-9_.-]+['\"])?$"
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _err(where: str, msg: str) -> RkvoiceError:
    return RkvoiceError(Stage.MODELS, "bad-manifest", f"manifest {where}: {msg}")


@dataclass(frozen=True)
class Source:
    """One thing to fetch: a PyPI wheel (``pip``), a URL, or a ``local`` file the user provides
    (an artefact built on another machine, e.g. an .rknn/.rkllm conversion)."""

    name: str
    pip: str | None
    url: str | None
    filename: str
    sha256: str | None
    size: int | None
    note: str = ""

    @property
    def kind(self) -> str:
        return "pip" if self.pip else "url" if self.url else "local"


@dataclass(frozen=True)
class Part:
    source: str
    member: str | None  # path inside the archive; None = the source file itself


@dataclass(frozen=True)
class Step:
    op: str
    to: str = ""
    source: str = ""
    member: str = ""
    strip: int = 0
    parts: tuple[Part, ...] = ()
    script: str = ""
    module: str = ""
    args: tuple[str, ...] = ()
    runs: tuple[tuple[str, ...], ...] = ()  # convert: one script run per entry, same venv
    venv: tuple[str, ...] = ()
    sha256: str | None = None
    toolkit: str = ""  # rknn: the converter distribution, installed as NAME==<runtime version>, --no-deps
    deps: tuple[str, ...] = ()  # rknn: its dependencies (requirement specifiers), installed after it


@dataclass(frozen=True)
class FileSpec:
    path: str
    sha256: str | None
    size: int | None
    check: str = ""  # extra check when sha256 is not reproducible: "onnx", "rknn" (sidecar + version)
    note: str = ""


@dataclass(frozen=True)
class Model:
    id: str
    stage: str
    profile: str
    engine: str
    licence: str
    dir: str
    sources: tuple[Source, ...]
    steps: tuple[Step, ...]
    files: tuple[FileSpec, ...]
    platform: str = ""  # e.g. "aarch64": only installed there
    note: str = ""
    optional: bool = False  # missing or broken: reported, never fails the install
    needs: tuple[str, ...] = ()  # ids of models of the same profile this one is built from


@dataclass(frozen=True)
class Manifest:
    path: Path
    models: tuple[Model, ...]

    def profile(self, profile: str) -> list[Model]:
        if profile not in PROFILES:
            raise RkvoiceError(Stage.MODELS, "bad-profile",
                               f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")
        return [m for m in self.models if m.profile == profile]


def _take(d: dict[str, Any], where: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise _err(where, f"expected a mapping, got {type(d).__name__}")
    unknown = sorted(set(d) - set(required) - set(optional))
    if unknown:
        raise _err(where, f"unknown key(s) {', '.join(unknown)}")
    missing = [k for k in required if k not in d]
    if missing:
        raise _err(where, f"missing key(s) {', '.join(missing)}")
    return d


def _sha(value: Any, where: str, note: str) -> str | None:
    if value is None:
        if not note:
            raise _err(where, "sha256 is null without a note saying why")
        return None
    if not isinstance(value, str) or not _SHA.match(value):
        raise _err(where, f"sha256 must be 64 lowercase hex digits, got {value!r}")
    return value


def _size(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise _err(where, f"size must be a positive integer, got {value!r}")
    return value


def _rel(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _err(where, "expected a non-empty path")
    p = value.replace("{work}/", "")
    if p.startswith("/") or ".." in Path(p).parts:
        raise _err(where, f"path {value!r} must stay inside the model directory")
    return value


def _source(name: str, d: Any, where: str) -> Source:
    d = _take(d, where, ("sha256",), ("pip", "url", "local", "file", "size", "note"))
    if sum(k in d for k in ("pip", "url", "local")) != 1:
        raise _err(where, "give exactly one of pip:, url: or local:")
    note = str(d.get("note", ""))
    if "local" in d:
        if not note:
            raise _err(where, "a local source needs a note saying how the user makes the file")
        filename = str(d["local"])
    elif "pip" in d:
        if not isinstance(d["pip"], str) or not _PIP.match(d["pip"]):
            raise _err(where, f"pip must be NAME==VERSION, got {d.get('pip')!r}")
        if "file" not in d:
            raise _err(where, "a pip source needs file: (the wheel's file name)")
        filename = str(d["file"])
    else:
        url = d["url"]
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise _err(where, f"url must be http(s), got {url!r}")
        filename = str(d.get("file") or url.rsplit("/", 1)[-1])
    return Source(
        name=name, pip=d.get("pip"), url=d.get("url"), filename=filename,
        sha256=_sha(d["sha256"], where, note), size=_size(d.get("size"), where), note=note,
    )


def _step(d: Any, where: str, sources: set[str]) -> Step:
    if not isinstance(d, dict) or "op" not in d:
        raise _err(where, "a step needs op:")
    op = d["op"]
    if op not in _STEP_KEYS:
        raise _err(where, f"unknown op {op!r}; choose one of: {', '.join(_STEP_KEYS)}")
    d = _take(d, where, *_STEP_KEYS[op])
    if op == "rknn":
        if not isinstance(d["toolkit"], str) or not _NAME.match(d["toolkit"]):
            raise _err(where, "toolkit must be a distribution name (its version follows the board), "
                              f"got {d['toolkit']!r}")
        deps = d.get("deps", [])
        if not isinstance(deps, list) or not all(isinstance(x, str) and _REQ.match(x) for x in deps):
            raise _err(where, "deps must be a list of requirement specifiers (NAME, NAME==V, NAME>=A,<B, "
                              "optionally '; platform_machine == \"aarch64\"')")
    elif op == "prepare" and ("script" in d) == ("module" in d):
        raise _err(where, "prepare needs exactly one of script: or module:")
    parts: list[Part] = []
    for i, p in enumerate(d.get("parts", ())):
        p = _take(p, f"{where}.parts[{i}]", ("source",), ("member",))
        parts.append(Part(source=p["source"], member=p.get("member")))
    for name in [d.get("source")] + [p.source for p in parts]:
        if name is not None and name not in sources:
            raise _err(where, f"unknown source {name!r}; sources are: {', '.join(sorted(sources))}")
    if op == "extract" and not d.get("member"):
        raise _err(where, "extract needs member: (the path inside the archive)")
    if op == "concat" and len(parts) < 2:
        raise _err(where, "concat needs at least two parts")
    if "to" in d:
        _rel(d["to"], where)
    args, runs, venv = (d.get(k, []) for k in ("args", "runs", "venv"))
    if not isinstance(runs, list):
        raise _err(where, "runs must be a list of argument lists")
    for a in [args, *runs]:
        if not isinstance(a, list) or not all(isinstance(x, str) for x in a):
            raise _err(where, "args (and each entry of runs) must be a list of strings")
        for ref in re.findall(r"\{src:([^}]*)\}", " ".join(a)):
            if ref not in sources:
                raise _err(where, f"{{src:{ref}}} names an unknown source")
    if op in ("convert", "rknn") and not runs:
        raise _err(where, f"{op} needs runs: (one argument list per script run)")
    if not isinstance(venv, list) or not all(isinstance(v, str) and _PIP.match(v) for v in venv):
        raise _err(where, "venv must be a list of pinned NAME==VERSION requirements")
    return Step(
        op=op, to=d.get("to", ""), source=d.get("source", ""), member=d.get("member") or "",
        strip=int(d.get("strip", 0)), parts=tuple(parts), script=d.get("script", ""),
        module=d.get("module", ""), args=tuple(args), runs=tuple(tuple(r) for r in runs), venv=tuple(venv),
        sha256=_sha(d.get("sha256"), where, "(step)"),
        toolkit=str(d.get("toolkit", "")), deps=tuple(d.get("deps", ())),
    )


def _file(d: Any, where: str) -> FileSpec:
    d = _take(d, where, ("path", "sha256"), ("size", "check", "note"))
    note = str(d.get("note", ""))
    check = str(d.get("check", ""))
    if check not in FILE_CHECKS:
        raise _err(where, f"check must be one of {', '.join(c for c in FILE_CHECKS if c)} if given, got {check!r}")
    return FileSpec(path=_rel(d["path"], where), sha256=_sha(d["sha256"], where, note),
                    size=_size(d.get("size"), where), check=check, note=note)


def _model(d: Any, where: str) -> Model:
    d = _take(d, where, ("id", "stage", "profile", "engine", "licence", "dir", "sources", "steps", "files"),
              ("platform", "note", "optional", "needs"))
    where = f"model {d['id']!r}"
    if d["stage"] not in STAGES:
        raise _err(where, f"stage must be one of {', '.join(STAGES)}, got {d['stage']!r}")
    if d["profile"] not in PROFILES:
        raise _err(where, f"profile must be one of {', '.join(PROFILES)}, got {d['profile']!r}")
    if not str(d["licence"]).strip():
        raise _err(where, "licence is empty")
    mdir = str(d["dir"])
    if not mdir.startswith(f"models/{d['profile']}/"):
        raise _err(where, f"dir must be under models/{d['profile']}/, got {mdir!r}")
    needs = d.get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) and n for n in needs):
        raise _err(where, "needs must be a list of model ids")
    if not isinstance(d.get("optional", False), bool):
        raise _err(where, f"optional must be true or false, got {d['optional']!r}")
    if not isinstance(d["sources"], dict) or not (d["sources"] or needs):
        raise _err(where, "sources must be a non-empty mapping name -> source "
                          "(empty only for a model that needs others)")
    sources = tuple(_source(n, s, f"{where} source {n!r}") for n, s in d["sources"].items())
    names = {s.name for s in sources}
    steps = tuple(_step(s, f"{where} step {i}", names) for i, s in enumerate(d["steps"] or ()))
    files = tuple(_file(f, f"{where} file {i}") for i, f in enumerate(d["files"] or ()))
    if not steps or not files:
        raise _err(where, "needs at least one step and one file")
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):
        raise _err(where, "a file is listed twice")
    return Model(
        id=str(d["id"]), stage=d["stage"], profile=d["profile"], engine=str(d["engine"]),
        licence=str(d["licence"]), dir=mdir, sources=sources, steps=steps, files=files,
        platform=str(d.get("platform", "")), note=str(d.get("note", "")),
        optional=bool(d.get("optional", False)), needs=tuple(needs),
    )


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest file; errors name the entry and the field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RkvoiceError(Stage.MODELS, "no-manifest", f"{path} not found; run from the rkvoice checkout") from None
    except yaml.YAMLError as exc:
        raise RkvoiceError(Stage.MODELS, "bad-manifest", f"{path} is not valid YAML: {exc}") from None
    d = _take(data, str(path), ("schema", "models"), ("notes",))
    if d["schema"] != 1:
        raise _err(str(path), f"unsupported schema {d['schema']!r} (this code reads schema 1)")
    models = tuple(_model(m, f"models[{i}]") for i, m in enumerate(d["models"]))
    ids = [m.id for m in models]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise _err(str(path), f"duplicate model id(s) {', '.join(dup)}")
    seen: dict[str, Model] = {}
    for m in models:  # needed models come first, so installing in file order builds them first
        for n in m.needs:
            if n not in seen or seen[n].profile != m.profile:
                raise _err(f"model {m.id!r}", f"needs {n!r}, which is not a {m.profile} model listed before it")
        seen[m.id] = m
    return Manifest(path=path, models=models)
