"""State directory: round trip, defaults, names; corrupt files are moved aside, not emptied. kill -9 during
a write: tests/test_durability.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rkvoice.errors import RkvoiceError
from rkvoice.state import StateStore, resolve_state_dir


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
