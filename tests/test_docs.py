"""The documentation stays true: README.md short, every link and repository path it names there, the
generated config reference equal to what its generator writes, no lab-notebook wording outside
docs/decisions/, every bench command naming a bench and options that exist, the cheap commands shown in
README.md and docs/ running as shown; every config key, port, script option and absolute path the pages
name existing (one port convention: the Wyoming services 10300, the satellite 10700); README's quick
start for a PC run in order from its own blocks (a clone in a temporary /opt/rkvoice), and
home-assistant.md's token steps run in order against the real Home Assistant of tests/ha_home.py.

A fenced code block preceded by ``<!-- board-only -->`` or ``<!-- needs-... -->`` (``needs-recording``,
``needs-root``, ``needs-home-assistant``) holds commands that need the board, a recording or the
microphone, root, or a running Home Assistant: they are parsed, not run as shown; the quick-start tests
translate the root and Home Assistant steps into what a test can do."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rkvoice import config_doc
from rkvoice.board.versions import LIBRKLLMRT_PATHS, LIBRKNNRT_PATHS, NPU_DRIVER_PATHS
from rkvoice.cli.entry import build_parser
from rkvoice.config import DEFAULT_CONFIG, SYSTEM_CONFIG, load_config
from rkvoice.config_ha import HomeAssistantConfig
from rkvoice.errors import RkvoiceError
from tests.ha_home import home_ha, require_ha_venv
from tests.support.markdown import Block, blocks, under
from tests.test_ha_e2e import HA_VERSION

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 200
SKIP_DIRS = {"py312", ".cache", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules"}
GENERATED = ("models/portable", "models/board", ".cache", "py312")
"""Folders the install fills: paths under them are named in docs but not committed."""
ASSISTANT = "py312/bin/python assistant.py"
CHEAP_MODES = ("--help", "--check", "--say", "--text")
SUDO = re.compile(r"^sudo (-u \S+ )?")


def markdown_files() -> list[Path]:
    out = []
    for path in sorted(ROOT.rglob("*.md")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in SKIP_DIRS or any(str(rel).startswith(g + "/") for g in GENERATED):
            continue
        out.append(path)
    return out


def user_docs() -> list[Path]:
    """README.md and docs/ except the decision records (which keep their history)."""
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md"] + [p for p in docs if "decisions" not in p.relative_to(ROOT).parts]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- links ------------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_PATH = re.compile(r"`([A-Za-z0-9_.][\w.\-/]*)`")
FENCE = re.compile(r"^(```|~~~)")


def strip_fences(text: str) -> str:
    """The text outside fenced code blocks (links inside them are not links)."""
    out, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            inside = not inside
            continue
        if not inside:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in strip_fences(path.read_text(encoding="utf-8")).splitlines()
            if line.startswith("#")}


def broken_links(path: Path) -> list[str]:
    """Markdown links to files, folders or headings that do not exist."""
    bad = []
    for target in LINK.findall(strip_fences(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, file:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{rel(path)}: link to {target!r}: {file_part} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{rel(path)}: link to {target!r}: no heading #{anchor} in {rel(dest)}")
    return bad


def tracked_roots() -> set[str]:
    """Top-level names of the repository: a backticked path starting with one is a repository path."""
    return {p.name for p in ROOT.iterdir() if p.name not in SKIP_DIRS and not p.name.endswith(".wav")}


def missing_paths(path: Path, roots: set[str]) -> list[str]:
    """Backticked repository paths (``rkvoice/stages.py``, ``docs/``) that do not exist."""
    bad = []
    for name in CODE_PATH.findall(path.read_text(encoding="utf-8")):
        if "/" not in name or name.split("/")[0] not in roots or name.startswith(GENERATED):
            continue
        if not (ROOT / name).exists():
            bad.append(f"{rel(path)}: `{name}` does not exist in the repository")
    return bad


def test_readme_is_at_most_200_lines() -> None:
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines, more than {README_MAX_LINES}: move detail "
                                       "into a page under docs/ and link it")


def test_markdown_links_resolve() -> None:
    bad = [b for path in markdown_files() for b in broken_links(path)]
    assert not bad, "\n".join(bad)


def test_backticked_repository_paths_exist() -> None:
    roots = tracked_roots()  # the decision records may name files since retired
    bad = [b for path in markdown_files() if "decisions" not in path.relative_to(ROOT).parts
           for b in missing_paths(path, roots)]
    assert not bad, "\n".join(bad)


def test_readme_reaches_each_task_in_one_click() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ("docs/install.md", "docs/service.md", "docs/home-assistant.md", "docs/configuration.md",
                 "docs/troubleshooting.md", "docs/performance.md"):
        assert f"]({page}" in text, f"README.md does not link {page}"


# --- the generated config reference ------------------------------------------------------------------


def test_configuration_md_is_what_the_generator_writes() -> None:
    current = config_doc.DOC_PATH.read_text(encoding="utf-8") if config_doc.DOC_PATH.exists() else ""
    assert current == config_doc.render(), ("docs/configuration.md differs from the config definitions: run "
                                            "py312/bin/python -m rkvoice.config_doc")


def test_every_config_key_has_a_meaning() -> None:
    assert not config_doc.undocumented(), ("config keys without a docstring under their field in "
                                           f"rkvoice/config.py: {config_doc.undocumented()}")


def test_generator_check_mode_sees_drift(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(config_doc.render().replace("| `tts.threads` |", "| `tts.thread` |"), encoding="utf-8")
    assert config_doc.main(["--check", "--out", str(stale)]) == 1
    assert config_doc.main(["--out", str(stale)]) == 0
    assert config_doc.main(["--check", "--out", str(stale)]) == 0


# --- wording -----------------------------------------------------------------------------------------

FORBIDDEN = [
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"), "a commit hash"),
    (re.compile(r"\bthis stop\b", re.IGNORECASE), "'this stop'"),
    (re.compile(r"\bthe lead\b", re.IGNORECASE), "'the lead'"),
    (re.compile(r"\bruns? [A-S](?:\s*[-–]\s*[A-S])?\b"), "a lettered run"),
]


def forbidden_wording(path: Path) -> list[str]:
    bad = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for rx, what in FORBIDDEN:
            if m := rx.search(line):
                bad.append(f"{rel(path)}:{n}: {what} ({m.group(0)!r}); history belongs in docs/decisions/")
    return bad


def test_no_lab_notebook_wording_outside_decisions() -> None:
    bad = [b for path in user_docs() for b in forbidden_wording(path)]
    assert not bad, "\n".join(bad)


# --- commands shown ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """A command line shown in a fenced block of a Markdown file."""

    path: Path
    line: int
    argv: tuple[str, ...]
    run: bool
    """False in a block marked board-only / needs-... ."""


def shown_commands(path: Path, prefix: str) -> list[Shown]:
    """Commands starting with ``prefix`` in the fenced blocks of ``path`` (``a && b`` counts both)."""
    out = []
    for block in blocks(path):
        for n, part in block.commands():
            part = SUDO.sub("", part)  # `sudo -u rkvoice py312/bin/python assistant.py ...` is the CLI too
            if part == prefix or part.startswith(prefix + " "):
                out.append(Shown(path, n, tuple(shlex.split(part)[len(prefix.split()):]), not block.marker))
    return out


def all_shown(prefix: str) -> list[Shown]:
    return [c for path in user_docs() for c in shown_commands(path, prefix)]


def where(c: Shown) -> str:
    return f"{rel(c.path)}:{c.line}: {shlex.join(c.argv)}"


def test_every_assistant_command_shown_parses() -> None:
    parser = build_parser()
    bad = []
    for c in all_shown(ASSISTANT):
        try:
            parser.parse_args(list(c.argv))
        except SystemExit as exc:
            if exc.code:
                bad.append(where(c))
    assert all_shown(ASSISTANT), "no assistant.py command found in README.md or docs/"
    assert not bad, "commands the CLI does not accept:\n" + "\n".join(bad)


def mode(argv: tuple[str, ...]) -> str:
    return next((a for a in argv if a in CHEAP_MODES or a in ("--file", "--wyoming", "--satellite")), "daemon")


def test_commands_that_are_not_cheap_are_marked() -> None:
    """Unmarked blocks hold only commands a test can run here: --help, --check, --say, --text with the
    portable profile. The daemon, --file, the servers and the board's config need a marker."""
    bad = [where(c) for c in all_shown(ASSISTANT) if c.run and (mode(c.argv) not in CHEAP_MODES
                                                                or "config.board.yaml" in c.argv)]
    assert not bad, ("commands that cannot run on a test machine, in blocks without <!-- board-only --> or "
                     "<!-- needs-... -->:\n" + "\n".join(bad))


def runnable() -> list[Shown]:
    seen: dict[tuple[str, ...], Shown] = {}
    for c in all_shown(ASSISTANT):
        if c.run and mode(c.argv) in CHEAP_MODES:
            seen.setdefault(c.argv, c)
    return list(seen.values())


def test_the_cheap_commands_are_shown() -> None:
    modes = {mode(c.argv) for c in runnable()}
    assert set(CHEAP_MODES) <= modes, f"README.md/docs show no runnable {set(CHEAP_MODES) - modes}"


def portable_installed() -> bool:
    return (ROOT / "models" / "portable" / "fastspeech2").is_dir()


@dataclass
class Ran:
    """A shown assistant command, run: its process and the files it wrote."""

    proc: subprocess.CompletedProcess[str]
    outputs: dict[str, Path]
    summary: dict[str, Any]


def run_assistant(argv: list[str], tmp_path: Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> Ran:
    """Run ``assistant.py ARGV`` as shown, in ``cwd``; files it writes (--out, --metrics) go to tmp_path.
    --text runs with the LLM hidden (a question must be answered without it) and its metrics kept."""
    argv = list(argv)
    m = mode(tuple(argv))
    outputs = {}
    for flag in ("--out", "--metrics"):
        if flag in argv:
            i = argv.index(flag) + 1
            outputs[flag] = tmp_path / Path(argv[i]).name
            argv[i] = str(outputs[flag])
    if m == "--text":
        if "--metrics" not in outputs:
            outputs["--metrics"] = tmp_path / "metrics.json"
            argv += ["--metrics", str(outputs["--metrics"])]
        argv += ["--set", f"llm.model={tmp_path / 'no-llm.gguf'}"]
    if m in ("--say", "--text") and "--out" not in outputs and "--no-play" not in argv:
        argv.append("--no-play")  # no sound card here: the WAV the CLI would write by itself is not kept
    proc = subprocess.run([sys.executable, "assistant.py", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)
    summary = {}
    if "--metrics" in outputs and outputs["--metrics"].exists():
        summary = json.loads(outputs["--metrics"].read_text(encoding="utf-8"))["summary"]
    return Ran(proc, outputs, summary)


def check_ran(ran: Ran, what: str, route: str = "tool:") -> None:
    """The checks every shown command passes: exit 0, and what its mode promises."""
    m = mode(tuple(ran.proc.args[2:]))
    out = f"{ran.proc.stdout}\n{ran.proc.stderr}"
    hint = " (the LLM was asked: show a question a local tool answers, or mark the block)" if m == "--text" else ""
    assert ran.proc.returncode == 0, f"{what} exited {ran.proc.returncode}{hint}:\n{out}"
    if m == "--help":
        assert "usage: assistant.py" in ran.proc.stdout
    if m == "--check":
        assert "pipeline can run" in ran.proc.stdout, out
    if "--out" in ran.outputs:
        with wave.open(str(ran.outputs["--out"])) as w:
            assert w.getnframes() > w.getframerate() // 4, f"{what}: under 0.25 s of speech"
    if m == "--text":
        assert str(ran.summary["route"]).startswith(route), (f"{what}: answered by {ran.summary['route']}, "
                                                              f"not {route}: show such a question, or mark the block")
        assert ran.proc.stdout.strip(), f"{what}: printed no answer"


def need_portable() -> None:
    if not portable_installed():
        pytest.skip("the portable models are not installed (run ./install.sh)")


@pytest.mark.parametrize("shown", runnable(), ids=lambda c: f"{rel(c.path)}:{c.line}")
def test_shown_command_runs(shown: Shown, tmp_path: Path) -> None:
    """Run as shown, from the checkout; files it writes (--out, --metrics) go to tmp_path instead.
    --text must be a question a local tool answers: the test hides the LLM to keep it cheap."""
    if mode(shown.argv) in ("--say", "--text", "--check"):
        need_portable()
    check_ran(run_assistant(list(shown.argv), tmp_path), where(shown))


# --- bench and module commands -------------------------------------------------------------------------

def bench_common_options() -> str:
    """The source that gives every bench its shared options (tests.support's ``bench_run``: --out, -v)."""
    return "".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests" / "support").glob("*.py")
                   if "def bench_run" in p.read_text(encoding="utf-8"))


MODULE_CMD = re.compile(r"py312/bin/python -m ((?:bench|rkvoice)(?:\.\w+)+)([^`\n]*)")


def test_module_commands_name_existing_modules_and_options() -> None:
    """``py312/bin/python -m bench.x --opt`` / ``-m rkvoice.x``: the module exists and takes each option."""
    bad = []
    for path in markdown_files():
        for module, rest in MODULE_CMD.findall(path.read_text(encoding="utf-8")):
            base = ROOT / Path(*module.split("."))
            source = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__main__.py"
            if not source.exists():
                bad.append(f"{rel(path)}: -m {module}: no such module")
                continue
            text = source.read_text(encoding="utf-8") if source.name != "__main__.py" else "".join(
                p.read_text(encoding="utf-8") for p in base.glob("*.py"))
            if module.startswith("bench.") and "bench_run" in text:
                text += bench_common_options()
            for opt in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest.split("#")[0]):
                if f'"{opt}"' not in text and f"'{opt}'" not in text:
                    bad.append(f"{rel(path)}: -m {module} has no option {opt}")
    assert not bad, "\n".join(bad)


# --- names the pages give: config keys, ports, flags, absolute paths ---------------------------------

KEY_SPAN = re.compile(r"`([a-z_]+(?:\.[a-z0-9_]+)+)(?=`|[:= ])")
"""A backticked config key, alone or as ``key: value`` / ``key=value``."""
SET_KEY = re.compile(r"--set\s+([a-z_][\w.]*)=")


def config_keys() -> set[str]:
    """Every key and section path of the config, e.g. ``hear.wake_phrase`` and ``tts.matcha``."""
    out = set()
    for section, _cls, keys in config_doc.sections():
        out.add(section)
        out.update(k.path for k in keys)
    return out


def test_config_keys_named_exist() -> None:
    """A backticked key (`hear.wake_phrase`), a `--set KEY=` and every YAML block of the pages: each
    key exists; each YAML block is a valid config layer (unknown keys and bad values are refused)."""
    known = config_keys()
    top = {k.split(".")[0] for k in known}
    bad = []
    for path in user_docs():
        text = path.read_text(encoding="utf-8")
        named = [k for k in KEY_SPAN.findall(text) if k.split(".")[0] in top] + SET_KEY.findall(text)
        bad += [f"{rel(path)}: `{k}` is not a config key" for k in named if k not in known]
        for block in blocks(path):
            if block.lang == "yaml":
                try:
                    load_config([yaml.safe_load(block.text)], files=[DEFAULT_CONFIG])
                except RkvoiceError as exc:
                    bad.append(f"{rel(path)}:{block.line}: the YAML block is not a valid config: {exc}")
    assert not bad, "\n".join(bad)


PORTS = {"wyoming": 10300, "satellite": 10700}
"""The one convention: the Wyoming services on 10300, the satellite on 10700."""
TCP_URI = re.compile(r"tcp://[\w.\-]+:(\d+)")
ROLE = re.compile(r"wyoming|satellite", re.IGNORECASE)


def port_files() -> list[Path]:
    code = [p for p in sorted((ROOT / "rkvoice").rglob("*.py"))]
    return user_docs() + [ROOT / "config.yaml", ROOT / "config.board.yaml"] + code


def wrong_ports(path: Path) -> list[str]:
    """Every tcp://HOST:PORT whose port is not its role's: the role is the nearest 'wyoming' or
    'satellite' before it on its line or the three lines above (none: the services)."""
    bad = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        for m in TCP_URI.finditer(line):
            before = [line[:m.start()]] + lines[max(0, n - 3):n][::-1]
            role = next((ROLE.findall(b)[-1].lower() for b in before if ROLE.search(b)), "wyoming")
            if int(m.group(1)) != PORTS[role]:
                bad.append(f"{rel(path)}:{n + 1}: {m.group(0)} for the {role}, whose port is {PORTS[role]}")
    return bad


def test_one_port_convention() -> None:
    """README, docs, config examples, CLI help and messages: the services on 10300, the satellite on 10700;
    a page or file that serves the services on every address says the protocol has no authentication."""
    bad = [b for path in port_files() for b in wrong_ports(path)]
    for path in user_docs() + [ROOT / "config.yaml", ROOT / "docs" / "configuration.md"]:
        text = " ".join(path.read_text(encoding="utf-8").split())
        if "0.0.0.0:10300" in text and "no authentication" not in text:
            bad.append(f"{rel(path)}: serves the Wyoming services on 0.0.0.0 without the no-authentication warning")
    server = (ROOT / "rkvoice" / "wyoming" / "server.py").read_text(encoding="utf-8")
    assert "no authentication" in " ".join(server.split()), "the server no longer logs the no-authentication warning"
    assert not bad, "\n".join(bad)
    assert str(PORTS["wyoming"]) in build_parser().format_help().replace("\n", " ")


def shell_options(script: Path) -> set[str]:
    """The options a shell script's `case "$1"` accepts (``--profile)``, ``-h|--help)``)."""
    text = script.read_text(encoding="utf-8")
    return {o for alt in re.findall(r"^\s*((?:-[\w-]+\|?)+)(?:=\*)?\)", text, re.MULTILINE) for o in alt.split("|") if o}


SCRIPTS = {"./install.sh": ROOT / "install.sh", "systemd/install-service.sh": ROOT / "systemd" / "install-service.sh"}


def test_script_flags_named_exist() -> None:
    """Every ./install.sh and systemd/install-service.sh option a page names (in a code block or inline)
    is one the script accepts."""
    bad = []
    for name, script in SCRIPTS.items():
        accepted = shell_options(script)
        assert "--profile" in accepted or name != "./install.sh", f"cannot read {name}'s options"
        for path in user_docs():
            for m in re.finditer(re.escape(name) + r"([^`\n]*)", path.read_text(encoding="utf-8")):
                for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", re.split(r"  #|&&|;", m.group(1))[0]):
                    if flag not in accepted:
                        bad.append(f"{rel(path)}: {name} has no option {flag}")
    assert not bad, "\n".join(bad)


def unit_state_dir() -> Path:
    """The service's state directory: the unit's $XDG_STATE_HOME/rkvoice (rkvoice.state)."""
    unit = (ROOT / "systemd" / "rkvoice.service").read_text(encoding="utf-8")
    xdg = re.search(r"^Environment=XDG_STATE_HOME=(\S+)$", unit, re.MULTILINE)
    assert xdg and "StateDirectory=rkvoice" in unit, "systemd/rkvoice.service sets no state directory"
    return Path(xdg.group(1)) / "rkvoice"


def service_user() -> str:
    found = re.search(r"^User=(\S+)$", (ROOT / "systemd" / "rkvoice.service").read_text(encoding="utf-8"), re.MULTILINE)
    assert found, "systemd/rkvoice.service names no User"
    return found.group(1)


def known_paths() -> dict[str, str]:
    """Absolute paths the pages name, each with what the code says of it."""
    state = unit_state_dir()
    return {
        str(state): "the unit's state directory",
        str(HomeAssistantConfig().token_path(state)): "home_assistant.token_file's default under the unit",
        str(SYSTEM_CONFIG): "the system config file",
        "/opt/rkvoice": "the place systemd/install-service.sh suggests" if "/opt/rkvoice" in
        (ROOT / "systemd" / "install-service.sh").read_text(encoding="utf-8") else "",
        **{str(p): "the NPU driver's version file" for p in NPU_DRIVER_PATHS},
        **{str(p): "the RKNN runtime" for p in LIBRKNNRT_PATHS},
        **{str(p): "the RKLLM runtime" for p in LIBRKLLMRT_PATHS},
    }


ABSOLUTE = re.compile(r"(?<![\w./~-])(/(?:var/lib|etc|opt)/rkvoice[\w./-]*|/sys/kernel/debug/rknpu/\w+|"
                      r"/usr/lib/librk\w+\.so)")


def test_absolute_paths_named_exist() -> None:
    """/var/lib/rkvoice, its ha_token, /etc/rkvoice/config.yaml, /opt/rkvoice, the NPU driver's version
    file and the NPU libraries: each path a page names is the one the code, the unit or the service
    script uses."""
    known = {k: v for k, v in known_paths().items() if v}
    roots = tracked_roots()
    bad = []
    for path in user_docs():
        for name in ABSOLUTE.findall(path.read_text(encoding="utf-8")):
            name = name.rstrip(".")
            inside = name.removeprefix("/opt/rkvoice/").split("/")[0] if name.startswith("/opt/rkvoice/") else None
            if inside is not None and (not inside or inside in roots or name.startswith(tuple(f"/opt/rkvoice/{g}" for g in GENERATED))):
                continue  # a path in the checkout
            if name not in known and not name.startswith(str(unit_state_dir()) + "/"):
                bad.append(f"{rel(path)}: {name} is not a path rkvoice uses")
    assert not bad, "\n".join(bad)


# --- quick starts, run in order from the pages' own blocks ---------------------------------------------


class Machine:
    """Where a page's absolute paths land in a test (/opt/rkvoice, /var/lib/rkvoice, /etc/rkvoice and
    /tmp under tmp_path), and the shell state the steps build (the working directory)."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "machine"
        self.cwd = ROOT
        self.done: list[str] = []

    def path(self, name: str) -> Path:
        assert name.startswith("/"), f"expected an absolute path, got {name!r}"
        return self.root / name.lstrip("/")


def step_apt(argv: list[str]) -> None:
    """`sudo apt-get install P...`: each package exists in Debian (apt-cache, no root)."""
    packages = [a for a in argv[3:] if not a.startswith("-")]
    assert {"libportaudio2", "alsa-utils"} <= set(packages), f"the system packages step lacks PortAudio or ALSA: {argv}"
    if shutil.which("apt-cache") is None:
        return
    for package in packages:
        shown = subprocess.run(["apt-cache", "show", package], capture_output=True, text=True)
        assert shown.returncode == 0 and shown.stdout.strip(), f"apt-cache knows no package {package!r}"


def step_install_script(argv: list[str], machine: Machine) -> None:
    """`./install.sh ...`: not run again (py312/ and the portable models of this checkout are its
    product, linked into the clone); the script is there, executable, and takes the options shown."""
    script = machine.cwd / "install.sh"
    assert os.access(script, os.X_OK), f"{script} is not an executable install.sh"
    accepted = shell_options(script)
    assert all(a in accepted for a in argv[1:] if a.startswith("--")), f"install.sh does not take {argv}"
    need_portable()
    models = machine.cwd / "models" / "portable"
    if machine.cwd != ROOT and not models.exists():
        models.symlink_to(ROOT / "models" / "portable")


def run_quick_start(steps: list[tuple[int, str]], machine: Machine, tmp_path: Path, where: str) -> None:
    """Run a quick start's commands in order, each translated to what a test can do here."""
    for n, command in steps:
        argv = shlex.split(command)
        what = f"{where}:{n}: {command}"
        if argv[:3] == ["sudo", "apt-get", "install"]:
            step_apt(argv)
        elif argv[:3] == ["sudo", "install", "-d"]:
            assert argv[-1] == "/opt/rkvoice", f"{what}: the checkout belongs in /opt/rkvoice"
            machine.path(argv[-1]).mkdir(parents=True)
        elif argv[:2] == ["git", "clone"]:
            dest = machine.path(argv[-1])
            subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True, timeout=300)
        elif argv[0] == "cd":
            machine.cwd = machine.path(argv[1])
        elif argv[0] == "./install.sh":
            step_install_script(argv, machine)
        elif " ".join(argv[:2]) == ASSISTANT:
            need_portable()
            check_ran(run_assistant(argv[2:], tmp_path, cwd=machine.cwd), what)
        else:
            pytest.fail(f"{what}: a quick-start step this test cannot translate; teach run_quick_start")
        machine.done.append(argv[0] if argv[0] != "sudo" else argv[1])


def test_portable_quick_start_runs_in_order(tmp_path: Path) -> None:
    """README's path for a PC, from its own blocks and in their order: the system packages, the
    checkout in /opt/rkvoice (a clone of this repository under tmp_path), the install (this checkout's
    py312/ and models), the first question."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("the quick start clones this checkout: it needs git and a git checkout")
    readme = ROOT / "README.md"
    steps = [c for heading in ("Getting the code", "On a PC: two commands")
             for block in under(readme, heading) for c in block.commands()]
    machine = Machine(tmp_path)
    run_quick_start(steps, machine, tmp_path, "README.md")
    assert machine.done == ["apt-get", "install", "git", "cd", "./install.sh", "py312/bin/python"], machine.done
    assert machine.cwd != ROOT and (machine.cwd / "assistant.py").exists()


def test_board_quick_start_is_complete() -> None:
    """The board's quick start (not runnable here): the install, --check, the config, the service, in
    that order; every step names a file, flag or key that exists (the tests above check them)."""
    steps = [c for block in under(ROOT / "README.md", "On the board: quick start") for _, c in block.commands()]
    order = ["./install.sh --profile board", "assistant.py --check --config config.board.yaml",
             "config.board.yaml /etc/rkvoice/config.yaml", "./install.sh --profile board --service"]
    at = [next((i for i, s in enumerate(steps) if o in s), -1) for o in order]
    assert -1 not in at and at == sorted(at), f"README's board quick start is not {order}: {steps}"


def ha_steps() -> list[Block]:
    """home-assistant.md's steps for home commands, in order."""
    return [b for b in under(ROOT / "docs" / "home-assistant.md", "Home commands from the local assistant")
            if "Setting it up" in b.headings and b.lang in ("bash", "yaml")]


def test_home_assistant_token_steps_run(tmp_path: Path) -> None:
    """home-assistant.md's token steps against the real Home Assistant of tests/ha_home.py, in order, as
    the service user would run them: the token file owned by `rkvoice` with mode 600 in the unit's state
    directory, the config block (its url pointed at the test's Home Assistant), then --check and --text
    as `sudo -u rkvoice` with the state directory the unit uses, and the service stopped around --text.
    The paths land under tmp_path; the login user's own state directory (HOME) holds no token."""
    steps = ha_steps()
    need_portable()
    require_ha_venv()
    machine = Machine(tmp_path)
    state, user = unit_state_dir(), service_user()
    home = tmp_path / "login-home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "RKVOICE_CONFIG": str(machine.path(str(SYSTEM_CONFIG)))}
    env.pop("XDG_STATE_HOME", None)
    stopped = False
    with home_ha(tmp_path / "ha") as ha:
        for block in steps:
            if block.lang == "yaml":
                layer = yaml.safe_load(block.text)
                layer["home_assistant"]["url"] = ha.base
                machine.path(str(SYSTEM_CONFIG)).parent.mkdir(parents=True, exist_ok=True)
                machine.path(str(SYSTEM_CONFIG)).write_text(yaml.safe_dump(layer, allow_unicode=True), encoding="utf-8")
                continue
            for n, command in block.commands():
                argv = shlex.split(command)
                what = f"docs/home-assistant.md:{n}: {command}"
                if argv[:2] == ["sudo", "install"]:
                    assert argv[argv.index("-o") + 1] == user and argv[argv.index("-g") + 1] == user, \
                        f"{what}: the token file must belong to the service user {user}"
                    assert argv[argv.index("-m") + 1] == "600" and argv[-1].startswith(f"{state}/"), what
                    machine.path(argv[-1]).parent.mkdir(parents=True, exist_ok=True)
                    subprocess.run(["install", "-m", "600", argv[-2], str(machine.path(argv[-1]))], check=True)
                elif argv[0] == "sudoedit":
                    machine.path(argv[1]).write_text(ha.token + "\n", encoding="utf-8")  # the user pastes the token
                elif argv[:2] == ["sudo", "systemctl"]:
                    stopped = argv[2] == "stop"
                elif argv[:3] == ["sudo", "-u", user] or " ".join(argv[:2]) == ASSISTANT:
                    cli = argv[3:] if argv[0] == "sudo" else argv  # else as the login user (HOME: no token)
                    assert " ".join(cli[:2]) == ASSISTANT, what
                    sets = [cli[i + 1] for i, a in enumerate(cli) if a == "--set"]
                    assert argv[0] != "sudo" or f"state.dir={state}" in sets, \
                        f"{what}: run as {user}, it needs the unit's state.dir={state}"
                    args = [a.replace(str(state), str(machine.path(str(state)))) for a in cli[2:]]
                    if "--metrics" in args:
                        args[args.index("--metrics") + 1] = str(machine.path(args[args.index("--metrics") + 1]))
                    if "--text" in args:
                        assert stopped, f"{what}: --text loads every model beside the running service: stop it first"
                    ran = run_assistant(args, tmp_path, env=env)
                    check_ran(ran, what, route="home")
                    if "--check" in args:
                        assert f"[ok  ] home_assistant {ha.base} (Home Assistant {HA_VERSION})" in ran.proc.stdout, \
                            ran.proc.stdout
                    if "--text" in args:
                        ha.wait_state(ha.light, "on")
                        machine.done.append("--text")
                else:
                    pytest.fail(f"{what}: a step this test cannot translate; teach it")
                machine.done.append(" ".join(argv[:2]) if argv[0] == "sudo" else argv[0])
    assert "--text" in machine.done and not stopped, f"the steps must ask, then start the service again: {machine.done}"
