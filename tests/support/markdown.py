"""The fenced code blocks of a Markdown page, as tests/test_docs.py reads them: each block with its
language, the marker comment before it (``<!-- board-only -->``, ``<!-- needs-... -->``), the heading
it stands under, and its command lines (comments after two spaces cut, ``a && b`` split)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(```|~~~)\s*([\w-]*)")
MARKER = re.compile(r"^<!--\s*(board-only|needs-[a-z-]+)\s*-->$")
"""Before a fenced block: its commands need the board, a recording, root, Home Assistant (parsed, not run)."""
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    path: Path
    line: int
    """Line number of its first content line."""
    lang: str
    marker: str
    """board-only, needs-..., or empty: a marked block is parsed, not run."""
    headings: tuple[str, ...]
    """The headings it stands under, outermost first."""
    text: str
    """Its content, dedented."""

    def commands(self) -> list[tuple[int, str]]:
        """(line number, command) for every command of a shell block, ``a && b`` as two."""
        out = []
        for n, raw in enumerate(self.text.splitlines(), self.line):
            line = re.split(r"\s{2,}#", raw.strip())[0].rstrip(" \\")
            if line and not line.startswith("#"):
                out.extend((n, part.strip()) for part in line.split("&&") if part.strip())
        return out


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order."""
    out: list[Block] = []
    headings: list[tuple[int, str]] = []
    inside, start, lang, marker, previous, body = False, 0, "", "", "", []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        fence = FENCE.match(line)
        if fence and not inside:
            inside, start, lang, body = True, n + 1, fence.group(2), []
            m = MARKER.match(previous)
            marker = m.group(1) if m else ""
            continue
        if fence and inside:
            inside = False
            out.append(Block(path, start, lang, marker, tuple(h for _, h in headings),
                             textwrap.dedent("\n".join(body))))
            previous = line
            continue
        if inside:
            body.append(raw)
            continue
        if h := HEADING.match(raw):
            level = len(h.group(1))
            headings = [x for x in headings if x[0] < level] + [(level, h.group(2).strip())]
        if line:
            previous = line
    return out


def under(path: Path, heading: str) -> list[Block]:
    """The blocks under a heading (and its sub-headings), in order."""
    found = [b for b in blocks(path) if heading in b.headings]
    assert found, f"{path.name} has no code block under a heading {heading!r}"
    return found
