"""What sherpa-onnx would kill the process on, checked before any sherpa object is created.

sherpa-onnx 2.0.1 calls ``exit(-1)`` when a keyword's token is missing from tokens.txt or a model
lacks a metadata key it reads, and segfaults on a transducer without ``model_type`` (measured with the
stand-ins; tests/test_board_hearing.py re-runs them in a subprocess); a tokens.txt without ``</s>``
fails Paraformer decoding with an IndexError. Each becomes an RkvoiceError naming the file and the fix
(the checks: rkvoice.hear.kws.check_kws, rkvoice.hear.paraformer_asr.check_paraformer).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rkvoice.config import ROOT, Config
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.tts.vits import read_onnx_metadata


@dataclass(frozen=True)
class Fix:
    """Who is checking (the error's stage) and what the user should do about a bad file."""

    stage: Stage
    hint: str

    def error(self, code: str, problem: str) -> RkvoiceError:
        return RkvoiceError(self.stage, code, f"{problem}; {self.hint}")


def board_model_dir(cfg: Config, key: str, default: str) -> Path:
    """``hear.<key>`` (relative to the install dir), else models.dir/board/<default>."""
    configured = str(getattr(cfg.hear, key)).strip()
    p = Path(configured).expanduser()
    return cfg.models.path / "board" / default if not configured else p if p.is_absolute() else ROOT / p


def require_file(path: Path, fix: Fix) -> None:
    if not path.is_file():
        raise fix.error("missing-model", f"{path} is missing")
    if path.stat().st_size == 0:
        raise fix.error("corrupt-model", f"{path} is empty")


def onnx_metadata(path: Path, fix: Fix) -> dict[str, str]:
    """metadata_props of a complete ONNX file (a truncated or foreign file is an error)."""
    require_file(path, fix)
    try:
        return read_onnx_metadata(path)
    except (OSError, ValueError) as exc:
        raise fix.error("corrupt-model", f"{path} is not a complete ONNX model ({exc})") from exc


def require_keys(meta: dict[str, str], keys: tuple[str, ...], path: Path, fix: Fix) -> None:
    missing = [k for k in keys if not meta.get(k, "").strip()]
    if missing:
        raise fix.error(
            "bad-model",
            f"{path.name} lacks the metadata sherpa-onnx needs ({', '.join(missing)}); it would end the process",
        )


def require_int(meta: dict[str, str], key: str, path: Path, fix: Fix) -> int:
    try:
        return int(meta[key])
    except (KeyError, ValueError):
        raise fix.error("bad-model", f"{path.name}: metadata {key}={meta.get(key)!r} is not an integer") from None


def read_tokens(path: Path, fix: Fix) -> dict[str, int]:
    """tokens.txt as ``{token: id}`` (lines ``TOKEN ID``), or a clear error."""
    require_file(path, fix)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise fix.error("corrupt-model", f"{path} is unreadable ({exc})") from exc
    table: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        token, sep, ident = line.rpartition(" ")
        if not sep:  # sherpa-onnx reads whitespace-separated pairs: a tab works too
            token, _, ident = line.rpartition("\t")
        if not token or not ident.lstrip("-").isdigit():
            raise fix.error("corrupt-model", f"{path} line {n} is not 'TOKEN ID': {line!r}")
        table[token] = int(ident)
    if not table:
        raise fix.error("corrupt-model", f"{path} holds no tokens")
    return table


def check_vocab(tokens: dict[str, int], vocab_size: int, tokens_path: Path, model: Path, fix: Fix) -> None:
    """Every id the model can emit must name a token (sherpa-onnx indexes tokens.txt with it)."""
    missing = set(range(vocab_size)) - set(tokens.values())
    if missing:
        raise fix.error(
            "bad-model",
            f"{tokens_path} has no token for {len(missing)} of the {vocab_size} ids {model.name} can emit "
            f"(first: {min(missing)}): the tokens file belongs to another model",
        )
