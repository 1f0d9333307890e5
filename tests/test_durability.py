"""kill -9 at chosen points of a state write: todos and reminders are the old file or the new one, never lost.

A child process runs the product's own tool path (the Assistant answering "添加待办..." / "...提醒我...")
on a state directory holding an old document. Its bootstrap code, written here and not part of the
product, swaps the ``os`` that rkvoice.atomic sees for one whose primitive at the chosen point first
tells the parent (a line on a pipe) and then blocks on an event nobody sets. The parent waits for
that line, sends SIGKILL, and reads the directory with the product's loader. So the kill lands
exactly at the point, and no sleep decides anything.

Points: after the temp file is made but before a byte is written; mid-write (half the payload
written and flushed); after the temp file's fsync, before the rename; after the rename, before the
directory's fsync. The same check run on a writer that truncates the file and then writes (a
deliberately non-atomic one) reports the state lost: the check can fail.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from rkvoice.answer.assistant import Assistant
from rkvoice.config import load_config
from rkvoice.state import StateStore
from rkvoice.turn import Turn

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 10, 21, 14, 0, tzinfo=timezone(timedelta(hours=8)))
NOW_ISO = NOW.isoformat()

# (state document, what the user says, what the old document holds)
CASES: dict[str, tuple[str, str, Any]] = {
    "todos": ("todos", "添加待办交电费",
              [{"id": i, "text": f"待办{i}", "done": False, "created": "2026-10-20T09:00:00+08:00"}
               for i in range(1, 41)]),
    "reminders": ("reminders", "20分钟后提醒我吃药",
                  [{"id": i, "due": NOW.timestamp() + 3600 * i, "text": f"提醒{i}", "kind": "reminder"}
                   for i in range(1, 41)]),
}
POINTS = ("before-write", "mid-write", "after-fsync", "after-rename")

CHILD = textwrap.dedent(
    """
    import os, sys, threading, types
    from datetime import datetime
    from pathlib import Path

    point, state_dir, question, fd = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    now = datetime.fromisoformat(sys.argv[5])

    from rkvoice import atomic, state
    from rkvoice.answer.assistant import Assistant
    from rkvoice.config import load_config
    from rkvoice.turn import Turn

    hold = threading.Event()  # never set: the parent kills this process while it waits here

    def stop_here(where):
        os.write(fd, (where + "\\n").encode())
        hold.wait()

    class HalfWriter:
        # the temp file as write_atomic uses it; write() stops before or half-way through
        def __init__(self, f):
            self.f = f
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.f.close()
        def fileno(self):
            return self.f.fileno()
        def flush(self):
            self.f.flush()
        def write(self, data):
            if point == "before-write":
                stop_here(point)
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            os.fsync(self.f.fileno())
            stop_here(point)

    def fdopen(*a, **k):
        return HalfWriter(os.fdopen(*a, **k))

    def fsync(fileno):
        os.fsync(fileno)
        stop_here(point)  # the temp file's fsync (the first): the rename has not happened

    def replace(src, dst):
        os.replace(src, dst)
        stop_here(point)  # renamed; the directory's fsync has not happened

    def naive(path, payload, durable=False):
        # a writer that is NOT atomic: truncate the target, then write
        with open(path, "wb") as f:
            f.write(payload[: len(payload) // 2])
            f.flush()
            os.fsync(f.fileno())
            stop_here(point)
            f.write(payload[len(payload) // 2:])

    seen = {n: getattr(os, n) for n in dir(os) if not n.startswith("__")}
    hooks = {"before-write": {"fdopen": fdopen}, "mid-write": {"fdopen": fdopen},
             "after-fsync": {"fsync": fsync}, "after-rename": {"replace": replace}}
    if point == "naive":
        state.write_atomic = naive
    else:
        atomic.os = types.SimpleNamespace(**{**seen, **hooks[point]})  # only rkvoice.atomic sees the hook

    cfg = load_config([{"state": {"dir": state_dir}}])
    reply = Assistant(cfg, now=lambda: now).reply(question, Turn(text=question))
    "".join(reply.deltas)
    os.write(fd, b"finished without stopping\\n")
    """
)


def seed(directory: Path, name: str, old: Any) -> None:
    StateStore(directory).save(name, old)


def ask(directory: Path, question: str) -> str:
    """The product's tool path in this process, at NOW."""
    cfg = load_config([{"state": {"dir": str(directory)}}])
    reply = Assistant(cfg, now=lambda: NOW).reply(question, Turn(text=question))
    assert reply.route.startswith("tool:"), f"{question!r} went to {reply.route}"
    return "".join(reply.deltas)


def new_document(tmp: Path, name: str, question: str, old: Any) -> Any:
    """What the document is once the question is answered (on a copy, without a kill)."""
    ref = tmp / "reference"
    seed(ref, name, old)
    ask(ref, question)
    return StateStore(ref).load(name, None)


def kill_at(directory: Path, point: str, question: str) -> str:
    """Run the child until it stops at ``point``, SIGKILL it there; returns the line it sent."""
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, point, str(directory), question, str(w), NOW_ISO],
        pass_fds=(w,), env=dict(os.environ, PYTHONPATH=str(ROOT)), stderr=subprocess.PIPE, text=True,
    )
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 120)
        line = os.read(r, 200).decode().strip() if ready else ""
        if not line:
            proc.kill()
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"the writer never reached {point}: exit {proc.returncode}\n{err[-2000:]}")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        return line
    finally:
        os.close(r)


def on_disk(directory: Path, name: str, old: Any, new: Any) -> str:
    """What the product's loader finds: "old", "new", "lost" (missing or unparsable) or "mixed"."""
    found = StateStore(directory).load(name, None)
    if found is None:
        return "lost"
    return "old" if found == old else "new" if found == new else "mixed"


def temps(directory: Path, name: str) -> list[Path]:
    return sorted(directory.glob(f".{name}.json.*.tmp"))


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_kill_9_at_a_chosen_point_keeps_the_old_or_the_new_file(tmp_path: Path, case: str, point: str) -> None:
    name, question, old = CASES[case]
    new = new_document(tmp_path, name, question, old)
    assert new != old and len(new) == len(old) + 1
    state = tmp_path / "state"
    seed(state, name, old)
    payload_len = len((tmp_path / "reference" / f"{name}.json").read_bytes())

    assert kill_at(state, point, question) == point

    stray = temps(state, name)
    if point == "after-rename":
        assert on_disk(state, name, old, new) == "new"
        assert stray == []
    else:
        assert on_disk(state, name, old, new) == "old"
        # the kill hit inside the write: its temp file is there, as far as the writer got
        assert len(stray) == 1
        size = stray[0].stat().st_size
        assert size == {"before-write": 0, "mid-write": payload_len // 2, "after-fsync": payload_len}[point]
        if point == "after-fsync":
            assert json.loads(stray[0].read_bytes()) == new  # complete, but never renamed: not used
    assert not list(state.glob("*.corrupt-*"))

    # the next process goes on from there: the leftover temp file does not get in the way
    again, text = ("添加待办写周报", "写周报") if case == "todos" else ("半小时之后提醒我出门", "出门")
    ask(state, again)
    after = StateStore(state).load(name, None)
    before = new if point == "after-rename" else old
    assert len(after) == len(before) + 1
    by_id = {item["id"]: item for item in after}
    assert by_id.pop(max(by_id))["text"] == text
    assert sorted(by_id.values(), key=lambda item: item["id"]) == sorted(before, key=lambda item: item["id"])


def test_a_leftover_temp_file_is_removed_once_stale(tmp_path: Path) -> None:
    name, question, old = CASES["todos"]
    state = tmp_path / "state"
    seed(state, name, old)
    assert kill_at(state, "mid-write", question) == "mid-write"
    (stray,) = temps(state, name)
    StateStore(state).load(name, None)
    assert stray.exists()  # a fresh one may belong to a writer still at work
    past = time.time() - 60
    os.utime(stray, (past, past))
    assert StateStore(state).load(name, None) == old
    assert temps(state, name) == []


def test_the_check_catches_a_non_atomic_writer(tmp_path: Path) -> None:
    """The same kill and check on a writer that truncates then writes: the state is lost (and the
    product's loader moves the half file aside), so the tests above would see a lost write."""
    name, question, old = CASES["todos"]
    new = new_document(tmp_path, name, question, old)
    state = tmp_path / "state"
    seed(state, name, old)
    assert kill_at(state, "naive", question) == "naive"
    assert on_disk(state, name, old, new) == "lost"
    assert len(list(state.glob("todos.json.corrupt-*"))) == 1


def test_reference_run_is_not_stopped(tmp_path: Path) -> None:
    """Unhooked, the child's question really writes the document (the hooks are what stops it)."""
    name, question, old = CASES["reminders"]
    new = new_document(tmp_path, name, question, old)
    state = tmp_path / "state"
    seed(state, name, old)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r, w = os.pipe()
    child = CHILD.replace("atomic.os = types", "pass  # atomic.os = types")
    proc = subprocess.run([sys.executable, "-c", child, "after-rename", str(state), question, str(w), NOW_ISO],
                          pass_fds=(w,), env=env, capture_output=True, text=True, timeout=120)
    os.close(w)
    line = os.read(r, 200).decode().strip()
    os.close(r)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert line == "finished without stopping"
    assert on_disk(state, name, old, new) == "new"
