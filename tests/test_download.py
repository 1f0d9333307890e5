"""rkvoice.installer.fetch.download against a real local HTTP server (in a thread).

The server can honour or ignore Range requests, cut a response short, fail with 500 or 404,
and records every request it saw, so the tests assert what the downloader actually did on the
wire: resume with the right Range header, retry, give up, never leave a final file on error.
Retries wait pooch's own pause (1 s, then 2 s, ...), so a few tests take seconds.
"""

from __future__ import annotations

import hashlib
import http.server
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rkvoice.errors import RkvoiceError
from rkvoice.installer.fetch import CHUNK, download

DATA = bytes(range(256)) * 4096 + b"tail"  # ~1 MB, not a multiple of the 1 MiB read size
SHA = hashlib.sha256(DATA).hexdigest()


@dataclass
class Plan:
    """What the server does; ``script`` is consumed one entry per request ("ok" when empty)."""

    script: list[str] = field(default_factory=list)
    honour_range: bool = True
    requests: list[dict] = field(default_factory=list)


def _handler(plan: Plan):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep pytest output clean
            pass

        def do_GET(self):
            plan.requests.append({"path": self.path, "range": self.headers.get("Range")})
            action = plan.script.pop(0) if plan.script else "ok"
            if action == "404":
                self.send_error(404, "Not Found")
                return
            if action == "500":
                self.send_error(500, "Server Error")
                return
            start = 0
            rng = self.headers.get("Range")
            if rng and plan.honour_range:
                start = int(rng.split("=")[1].split("-")[0])
                if start >= len(DATA):
                    self.send_response(416)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(DATA) - 1}/{len(DATA)}")
            else:
                self.send_response(200)
            body = DATA[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if action == "truncate":  # promise the whole body, send a third, hang up
                self.wfile.write(body[: len(body) // 3])
                self.wfile.flush()
                self.close_connection = True
                return
            if action == "corrupt":
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            self.wfile.write(body)

    return Handler


@pytest.fixture
def server():
    plan = Plan()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(plan))
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/model.bin"
    try:
        yield plan, url
    finally:
        httpd.shutdown()
        httpd.server_close()


def _get(url: str, dest: Path, **kw) -> Path:
    kw.setdefault("sha256", SHA)
    kw.setdefault("timeout", 5)
    return download(url, dest, **kw)


def test_plain_download_verifies_and_leaves_no_part_file(server, tmp_path):
    plan, url = server
    dest = _get(url, tmp_path / "m.bin", size=len(DATA))
    assert dest.read_bytes() == DATA
    assert not (tmp_path / "m.bin.part").exists()
    assert len(plan.requests) == 1 and plan.requests[0]["range"] is None


def test_resumes_a_partial_file_with_a_range_request(server, tmp_path):
    plan, url = server
    done = 300_000
    (tmp_path / "m.bin.part").write_bytes(DATA[:done])
    dest = _get(url, tmp_path / "m.bin", size=len(DATA))
    assert dest.read_bytes() == DATA
    assert [r["range"] for r in plan.requests] == [f"bytes={done}-"]


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    plan, url = server
    plan.honour_range = False
    (tmp_path / "m.bin.part").write_bytes(DATA[:1000])
    dest = _get(url, tmp_path / "m.bin")
    assert dest.read_bytes() == DATA  # not the first 1000 bytes twice


def test_a_corrupt_download_is_deleted_and_fetched_again(server, tmp_path):
    plan, url = server
    plan.script = ["corrupt"]
    dest = _get(url, tmp_path / "m.bin", retries=1)
    assert dest.read_bytes() == DATA
    assert [r["range"] for r in plan.requests] == [None, None]  # the corrupt bytes were not resumed from


def test_a_file_that_stays_corrupt_is_an_error_naming_url_and_both_hashes_and_no_file_appears(server, tmp_path):
    plan, url = server
    plan.script = ["corrupt"] * 2
    with pytest.raises(RkvoiceError) as err:
        _get(url, tmp_path / "m.bin", retries=1)
    msg = str(err.value)
    assert url in msg and f"expected {SHA}" in msg and "Rerun to fetch it again" in msg
    bad = hashlib.sha256(bytes([DATA[0] ^ 0xFF]) + DATA[1:]).hexdigest()
    assert f"got {bad}" in msg
    assert err.value.code == "bad-sha256"
    assert not (tmp_path / "m.bin").exists()
    assert not (tmp_path / "m.bin.part").exists()  # a corrupt part must not be resumed later
    assert [p.name for p in tmp_path.iterdir()] == []  # nor any temporary file left behind


def test_truncated_response_is_retried_and_resumed(server, tmp_path):
    plan, url = server
    plan.script = ["truncate"]
    dest = _get(url, tmp_path / "m.bin", size=len(DATA))
    assert dest.read_bytes() == DATA
    assert len(plan.requests) == 2
    assert plan.requests[0]["range"] is None
    # the second request continues from the last whole block of the cut-off body
    resumed = int(plan.requests[1]["range"].removeprefix("bytes=").removesuffix("-"))
    assert len(DATA) // 3 - CHUNK < resumed <= len(DATA) // 3


def test_always_truncated_gives_up_with_a_clear_error_and_keeps_the_part(server, tmp_path):
    plan, url = server
    plan.honour_range = False  # every attempt restarts and is cut again
    plan.script = ["truncate"] * 10
    with pytest.raises(RkvoiceError) as err:
        _get(url, tmp_path / "m.bin", size=len(DATA), retries=2)
    assert err.value.code == "download-failed"
    assert url in str(err.value) and "3 attempts" in str(err.value) and "a rerun resumes it" in str(err.value)
    assert len(plan.requests) == 3
    assert not (tmp_path / "m.bin").exists()
    assert (tmp_path / "m.bin.part").exists()  # kept so that a rerun resumes


def test_server_error_is_retried(server, tmp_path):
    plan, url = server
    plan.script = ["500", "500"]
    dest = _get(url, tmp_path / "m.bin")
    assert dest.read_bytes() == DATA and len(plan.requests) == 3


def test_404_fails_at_once_naming_the_url(server, tmp_path):
    plan, url = server
    plan.script = ["404"]
    with pytest.raises(RkvoiceError) as err:
        _get(url, tmp_path / "m.bin")
    assert "HTTP 404" in str(err.value) and url in str(err.value)
    assert len(plan.requests) == 1  # a missing file is not retried
    assert not (tmp_path / "m.bin").exists()


def test_unreachable_host_is_an_error_after_retries(tmp_path):
    with pytest.raises(RkvoiceError) as err:
        _get("http://127.0.0.1:9/nothing", tmp_path / "m.bin", retries=1)
    assert "cannot connect" in str(err.value) and "2 attempts" in str(err.value)
    assert "partial file" not in str(err.value)  # nothing was received, nothing is kept


def test_existing_good_file_is_not_downloaded_again(server, tmp_path):
    plan, url = server
    (tmp_path / "m.bin").write_bytes(DATA)
    _get(url, tmp_path / "m.bin", size=len(DATA))
    assert plan.requests == []


def test_existing_wrong_file_is_replaced(server, tmp_path):
    plan, url = server
    (tmp_path / "m.bin").write_bytes(b"old")
    assert _get(url, tmp_path / "m.bin").read_bytes() == DATA
    assert len(plan.requests) == 1


def test_complete_part_file_with_416_is_accepted_after_checksum(server, tmp_path):
    plan, url = server
    (tmp_path / "m.bin.part").write_bytes(DATA)
    dest = _get(url, tmp_path / "m.bin")  # no size given: the server answers 416 to the range
    assert dest.read_bytes() == DATA
    assert plan.requests[0]["range"] == f"bytes={len(DATA)}-"


def test_an_oversized_junk_part_is_dropped_and_the_file_fetched_whole(server, tmp_path):
    plan, url = server
    junk = b"junk" * (len(DATA) // 2)  # longer than the file: the server answers 416
    (tmp_path / "m.bin.part").write_bytes(junk)
    dest = _get(url, tmp_path / "m.bin", retries=1)
    assert dest.read_bytes() == DATA
    assert [r["range"] for r in plan.requests] == [f"bytes={len(junk)}-", None]
