"""State directory: atomic writes survive kill -9; corrupt files are moved aside, not emptied."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rkvoice.errors import RkvoiceError
from rkvoice.state import StateStore, resolve_state_dir

ROOT = Path(__file__).resolve().parent.parent


def test_roundtrip_and_default(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "s")
    assert store.load("todos", []) == []
    store.save("todos", [{"text": "买牛奶", "done": False}])
    assert store.load("todos", []) == [{"text": "买牛奶", "done": False}]
    assert not list((tmp_path / "s").glob("*.tmp"))


def test_corrupt_file_is_moved_aside_with_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = StateStore(tmp_path)
    (tmp_path / "todos.json").write_text('[{"text": "买牛', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="rkvoice.state"):
        assert store.load("todos", []) == []
    aside = list(tmp_path.glob("todos.json.corrupt-*"))
    assert len(aside) == 1
    assert aside[0].read_text(encoding="utf-8") == '[{"text": "买牛'  # kept, not emptied
    assert "corrupt" in caplog.text and "moved aside" in caplog.text
    assert not (tmp_path / "todos.json").exists()


def test_bad_name_and_unwritable_dir(tmp_path: Path) -> None:
    with pytest.raises(RkvoiceError, match="bad state file name"):
        StateStore(tmp_path).path("../x")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RkvoiceError, match="state.dir"):
        StateStore(blocker / "sub").save("todos", [])


def test_resolve_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert resolve_state_dir("", Path("/opt/rk")) == tmp_path / "rkvoice"
    assert resolve_state_dir("var", Path("/opt/rk")) == Path("/opt/rk/var")
    assert resolve_state_dir("/var/lib/rkvoice", Path("/opt/rk")) == Path("/var/lib/rkvoice")


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rkvoice.state import StateStore
    store = StateStore(Path(sys.argv[1]))
    i = 0
    while True:
        i += 1
        # A big document makes each write take long enough to be interrupted mid-way.
        store.save("todos", {"n": i, "items": [{"text": "待办%d" % k, "done": False} for k in range(3000)]})
        if i == 3:
            print("ready", flush=True)
    """
)


def test_kill_9_during_writes_loses_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    seen: list[int] = []
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.05 * (round_ + 1))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = StateStore(tmp_path).load("todos", None)
        assert data is not None, "the state file vanished"
        assert data["n"] >= 3
        assert len(data["items"]) == 3000 and data["items"][-1] == {"text": "待办2999", "done": False}
        seen.append(data["n"])
    assert not list(tmp_path.glob("*.corrupt-*"))
    # The file on disk is always one whole JSON document.
    json.loads((tmp_path / "todos.json").read_text(encoding="utf-8"))
