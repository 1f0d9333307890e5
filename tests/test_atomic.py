"""rkvoice.atomic: a failed write leaves the old file and no temp file behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from rkvoice import atomic
from rkvoice.atomic import write_atomic


@pytest.mark.parametrize("durable", [False, True])
def test_write_replaces_the_file(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "a.json"
    target.write_text("old")
    write_atomic(target, b"new", durable=durable)
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_failed_rename_keeps_the_old_file_and_removes_the_temp(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "a.json"
    target.write_text("old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomic(target, b"new", durable=True)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_missing_directory_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        write_atomic(tmp_path / "nope" / "a.json", b"x")
