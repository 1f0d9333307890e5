"""The documentation stays true: README.md short, every link and repository path it names there, the
generated config reference equal to what its generator writes, no lab-notebook wording outside
docs/decisions/, every bench command naming a bench and options that exist, and the cheap commands
shown in README.md and docs/ running as shown.

A fenced code block preceded by ``<!-- board-only -->``, ``<!-- needs-recording -->`` or
``<!-- needs-home-assistant -->`` holds commands that need the board, a recording or the microphone, or
a running Home Assistant: they are parsed, not run."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import wave
from dataclasses import dataclass
from pathlib import Path

import pytest

from rkvoice import config_doc
from rkvoice.cli.entry import build_parser

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 200
SKIP_DIRS = {"py312", ".cache", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules"}
GENERATED = ("models/portable", "models/board", ".cache", "py312")
"""Folders the install fills: paths under them are named in docs but not committed."""
NOT_RUN_MARKER = re.compile(r"^<!--\s*(board-only|needs-[a-z-]+)\s*-->$")
"""Before a fenced block: its commands need the board, a recording, Home Assistant, ... (parsed, not run)."""
ASSISTANT = "py312/bin/python assistant.py"
CHEAP_MODES = ("--help", "--check", "--say", "--text")


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
    out: list[Shown] = []
    inside, marked, previous = False, False, ""
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if FENCE.match(line):
            inside = not inside
            marked = inside and bool(NOT_RUN_MARKER.match(previous))
            continue
        if line:
            previous = line
        if not inside:
            continue
        command = re.split(r"\s{2,}#", line)[0].rstrip(" \\")
        for part in command.split("&&"):
            part = part.strip()
            if part == prefix or part.startswith(prefix + " "):
                out.append(Shown(path, n, tuple(shlex.split(part)[len(prefix.split()):]), not marked))
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


@pytest.mark.parametrize("shown", runnable(), ids=lambda c: f"{rel(c.path)}:{c.line}")
def test_shown_command_runs(shown: Shown, tmp_path: Path) -> None:
    """Run as shown, from the checkout; files it writes (--out, --metrics) go to tmp_path instead.
    --text must be a question a local tool answers: the test hides the LLM to keep it cheap."""
    argv = list(shown.argv)
    m = mode(shown.argv)
    if m in ("--say", "--text", "--check") and not portable_installed():
        pytest.skip("the portable models are not installed (run ./install.sh)")
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
    proc = subprocess.run([sys.executable, "assistant.py", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    hint = " (the LLM was asked: show a question a local tool answers, or mark the block)" if m == "--text" else ""
    assert proc.returncode == 0, f"{where(shown)} exited {proc.returncode}{hint}:\n{proc.stdout}\n{proc.stderr}"
    if m == "--help":
        assert "usage: assistant.py" in proc.stdout
    if m == "--check":
        assert "pipeline can run" in proc.stdout
    if "--out" in outputs:
        with wave.open(str(outputs["--out"])) as w:
            assert w.getnframes() > w.getframerate() // 4, f"{where(shown)}: under 0.25 s of speech"
    if m == "--text":
        summary = json.loads(outputs["--metrics"].read_text(encoding="utf-8"))["summary"]
        assert str(summary["route"]).startswith("tool:"), (f"{where(shown)}: answered by {summary['route']}, "
                                                           "not a local tool: show a tool question, or mark the block")
        assert proc.stdout.strip(), f"{where(shown)}: printed no answer"


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
