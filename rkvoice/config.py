"""Configuration: repo ``config.yaml`` defaults -> ``/etc/rkvoice/config.yaml`` -> CLI flags.

Every section is a frozen dataclass. Loading walks the YAML tree against the dataclass
fields, so an unknown key or a value of the wrong type is an error naming its path
(``tts.threads: expected int, got 'two'``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rkvoice.errors import RkvoiceError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "config.yaml"
SYSTEM_CONFIG = Path("/etc/rkvoice/config.yaml")


@dataclass(frozen=True)
class MatchaConfig:
    """Matcha + Vocos voice (board: .rknn buckets on the NPU; anywhere: their .onnx twins, or the
    published dynamic-shape ONNX files, on onnxruntime)."""

    dir: str = "board"
    """Base directory of the files below, relative to models.dir unless absolute."""
    acoustic: str = "matcha-rknn/matcha-t*"
    """Glob of the Matcha token buckets (models/convert_rknn.py matcha: matcha-t{K}.rknn + .onnx twin +
    .json sidecar). Without a suffix ``runtime`` picks .rknn or .onnx; a path ending in .onnx/.rknn is
    taken as is (e.g. matcha-zh-en/model-steps-3.onnx, the published dynamic-shape graph)."""
    vocoder: str = "matcha-rknn/vocos-f*"
    """Glob of the Vocos frame buckets (vocos-f{N}), same rules (e.g. matcha-zh-en/vocos-16khz-univ.onnx)."""
    lexicon: str = "matcha-zh-en/lexicon.txt"
    tokens: str = "matcha-zh-en/tokens.txt"
    runtime: str = "auto"
    """auto (.rknn on RKNNLite where rknn-toolkit-lite2 is installed, else the .onnx twins), rknn or onnx."""
    vocoder_context: int = 32
    """Frames of context either side when a mel is longer than the largest Vocos bucket (Vocos sees
    27 frames either side: 27 or more gives the same frames as one whole-mel run)."""
    seed: int = 0
    """Seed of the ODE noise (drawn per generate call, so one text always sounds the same)."""
    first_chars: int = 24
    """Longest first piece for this voice (seeds/001: 24 characters, first audio ~0.4 s on the board)."""
    chunk_chars: int = 40
    """Longest later piece for this voice (seeds/001: 40)."""
    sample_rate: int = 16000
    add_blank: bool = False
    pad_id: int = 0
    noise_scale: float = 0.667
    n_fft: int = 1024
    hop_length: int = 256
    win_length: int = 1024
    window: str = "hann"
    espeak_lib_dir: str = "board/espeak/lib"
    """Unpacked libespeak-ng1/libpcaudio0/libsonic0 + espeak-ng-data (board install), relative to
    models.dir; when absent the system's espeak-ng is used."""

    def __post_init__(self) -> None:
        for name in ("first_chars", "chunk_chars"):
            if getattr(self, name) < 1:
                raise RkvoiceError("config", "bad-value", f"tts.matcha.{name}: {getattr(self, name)} must be >= 1")
        if self.vocoder_context < 0:
            raise RkvoiceError("config", "bad-value", f"tts.matcha.vocoder_context: {self.vocoder_context} must be >= 0")
        if self.runtime not in ("auto", "rknn", "onnx"):
            raise RkvoiceError("config", "bad-value",
                               f"tts.matcha.runtime: {self.runtime!r}; choose one of: auto, rknn, onnx")


@dataclass(frozen=True)
class FastSpeech2Config:
    """Where the ``fastspeech2`` voice runs its MB-MelGAN vocoder (the acoustic model stays on onnxruntime)."""

    vocoder: str = ""
    """Empty: models/portable/fastspeech2/mb_melgan.onnx on onnxruntime, the whole mel in one call.
    Otherwise a fixed-window vocoder, relative to models.dir unless absolute: a .rknn runs on the
    NPU (RKNNLite; config.board.yaml: board/fastspeech2/mb_melgan-50.rknn from models/convert_rknn.py),
    a .onnx on onnxruntime, both in overlapping windows of vocoder_frames."""
    vocoder_frames: int = 50
    """The fixed input length the .rknn was built for (convert_rknn.py vocoder --frames; <= 50)."""
    vocoder_context: int = 16
    """Frames of context on each side of a window's kept centre: against one whole-mel run of the
    float vocoder 16 gives ~60-67 dB SNR (below the NPU's own fp16 error, 44-49 dB), 12 only ~37-41 dB."""
    core_mask: str = "auto"
    """NPU core mask for the .rknn vocoder: auto, 0, 1, 0_1."""

    def __post_init__(self) -> None:
        if self.vocoder_context < 0 or self.vocoder_frames <= 2 * self.vocoder_context:
            raise RkvoiceError(
                "config", "bad-value",
                f"tts.fastspeech2: vocoder_frames {self.vocoder_frames} must exceed twice vocoder_context "
                f"{self.vocoder_context} (e.g. frames 50, context 16)",
            )


@dataclass(frozen=True)
class TtsConfig:
    engine: str = "auto"
    """Engine name from the TTS registry, or "auto" for the best installed one for the text."""
    threads: int = 1
    """Intra-op threads per ONNX session (1 beat 2 for the small voices on 2 cores)."""
    speed: float = 1.0
    sid: int = 0
    first_chars: int = 12
    """Longest first piece (characters): the first sound waits for it. bench/tts_latency.py,
    fastspeech2 on 2 x86 cores: first audio 0.22 x whole-text synthesis at 12, 0.33 at 24, no gaps."""
    chunk_chars: int = 40
    coalesce_chars: int = 0
    """Merge pieces of one turn that queued up while the TTS worker was busy into one synthesis
    call of at most this many characters (never the turn's first piece); 0: off."""
    max_text_chars: int = 4000
    """Longest text one --say/--text speaks (about 15 minutes of speech); longer input is refused."""
    vits_voice: str = "auto"
    """vits voice: piper-joe (portable, English), vits-zh-aishell3 (board), or auto (installed one)."""
    matcha_core_mask: str = "auto"
    """NPU core mask for RKNNLite: auto, 0, 1, 0_1."""
    matcha: MatchaConfig = field(default_factory=MatchaConfig)
    fastspeech2: FastSpeech2Config = field(default_factory=FastSpeech2Config)


@dataclass(frozen=True)
class AudioConfig:
    player: str = "auto"
    """aplay, sounddevice, wav, null, or auto (aplay or sounddevice if a device exists, else wav)."""
    device: str = "default"
    """ALSA device for aplay / sounddevice device name."""
    output_rate: int = 16000
    block_ms: int = 20
    """Size of the fixed output blocks handed to the player."""
    crossfade_ms: int = 10
    input: str = "sounddevice"
    """Microphone source: sounddevice or arecord."""
    input_device: str = "default"


@dataclass(frozen=True)
class ModelsConfig:
    dir: str = "models"
    """Where model files live; relative paths are taken from the install directory."""
    profile: str = "portable"

    @property
    def path(self) -> Path:
        p = Path(self.dir)
        return p if p.is_absolute() else ROOT / p


@dataclass(frozen=True)
class HearConfig:
    asr: str = "auto"
    """ASR engine: whisper (portable), paraformer (board), or auto (by models.profile)."""
    wake: str = "auto"
    """Wake engine: asr-match (portable), kws (board), or auto (by models.profile)."""
    wake_phrase: str = "小智小智"
    wake_tolerance: float = 0.75
    """asr-match: largest pinyin mismatch cost accepted (a syllable off by initial or final = 0.5)."""
    wake_probe_s: float = 2.5
    """asr-match: a segment longer than this + 1.5 s is first checked on its first seconds only
    (spares the CPU on long unrelated speech); 0: always transcribe whole segments."""
    kws_threshold: float = 0.25
    kws_score: float = 1.5
    kws_dir: str = ""
    """Keyword-spotter model folder (encoder*/decoder*/joiner*.onnx + tokens.txt); empty =
    models.dir/board/kws-zh, relative = under the install dir (the board-hearing tests' stand-ins)."""
    paraformer_dir: str = ""
    """Paraformer folder (model.int8.onnx or model.onnx + tokens.txt); empty = models.dir/board/paraformer-zh."""
    threads: int = 2
    """Threads for the ASR engine."""
    whisper_beam: int = 5
    """Whisper beam size: 5 measured more accurate than 1 at about the same speed (bench/asr.py)."""
    vad_threshold: float = 0.5
    trailing_silence_ms: int = 500
    """A request ends after this much silence."""
    min_speech_ms: int = 250
    max_request_s: float = 12.0
    listen_timeout_s: float = 6.0
    """After a wake, give up if no speech starts within this time."""
    follow_up_s: float = 6.0
    """After an answer, speech within this window is a request without the wake phrase."""
    ack: str = "chime"
    """Wake acknowledgement: chime, voice (ack_text synthesised once at start-up) or none."""
    ack_text: str = "我在"

    def __post_init__(self) -> None:
        checks = (
            ("wake_tolerance", 0.0 <= self.wake_tolerance <= 2.0, "between 0 and 2"),
            ("wake_probe_s", self.wake_probe_s == 0 or 1.0 <= self.wake_probe_s <= 10.0, "0 (off) or 1 to 10"),
            ("threads", self.threads >= 1, "at least 1"),
            ("whisper_beam", 1 <= self.whisper_beam <= 10, "between 1 and 10"),
            ("vad_threshold", 0.0 < self.vad_threshold < 1.0, "between 0 and 1"),
            ("trailing_silence_ms", 100 <= self.trailing_silence_ms <= 5000, "between 100 and 5000"),
            ("min_speech_ms", 0 <= self.min_speech_ms <= 2000, "between 0 and 2000"),
            ("max_request_s", 1.0 <= self.max_request_s <= 60.0, "between 1 and 60"),
            ("listen_timeout_s", self.listen_timeout_s > 0, "above 0"),
            ("follow_up_s", self.follow_up_s >= 0, "0 (off) or more"),
            ("ack", self.ack in ("chime", "voice", "none"), "one of: chime, none, voice"),
        )
        for name, ok, want in checks:
            if not ok:
                raise RkvoiceError(
                    "config", "bad-value", f"hear.{name}: {getattr(self, name)!r} is out of range; use {want}"
                )


@dataclass(frozen=True)
class StateConfig:
    dir: str = ""
    """User state (todos, reminders); empty = $XDG_STATE_HOME/rkvoice, relative = under the install dir."""

    @property
    def path(self) -> Path:
        from rkvoice.state import resolve_state_dir

        return resolve_state_dir(self.dir, ROOT)


@dataclass(frozen=True)
class LlmConfig:
    engine: str = "auto"
    """llama (llama.cpp, portable), rkllm (RKLLM runtime on the NPU, board), or auto by profile."""
    model: str = ""
    """Model file; empty = the profile's default, relative = under models.dir."""
    threads: int = 1
    """llama.cpp threads. 1 leaves a core to the TTS thread that runs alongside (overlap); with 2 on a
    2-core machine llama's threads spin at barriers against TTS and collapse (see bench/overlap.py)."""
    context: int = 2048
    max_tokens: int = 200
    """Longest answer in tokens; generation stops there."""
    max_answer_chars: int = 160
    """Longest spoken answer in characters; the rest is cut at a sentence end."""
    temperature: float = 0.7
    top_p: float = 0.8
    top_k: int = 20
    repeat_penalty: float = 1.05
    seed: int = -1
    """Sampling seed; -1 = a new one per answer (benchmarks fix it to compare runs on the same text)."""
    timeout_s: float = 45.0
    """Generation taking longer than this is aborted and the user is told."""
    history_turns: int = 4
    """Earlier question/answer pairs kept in the prompt."""
    system_prompt: str = (
        "你是小智，一个在本地设备上离线运行的中文语音助手。用口语化的简体中文回答，"
        "一般两三句话；讲故事时讲五六句。不要用列表、表格、表情符号、代码或英文缩写。"
        "现在是{now}。"
    )
    """{now} is replaced by today's date and time in spoken Chinese."""
    rkllm_abi: str = "1.2"
    """librkllmrt.so ABI on the board: 1.2 (1.2.1-1.2.3) or 1.3 (1.3.0)."""
    rkllm_lib: str = "librkllmrt.so"
    rkllm_base_domain_id: int = 1
    rkllm_cpus_mask: int = 0xF0
    """CPUs for the runtime's threads (0xF0 = the four A72 cores of the RK3576)."""


@dataclass(frozen=True)
class DaemonConfig:
    lock_file: str = ""
    """Single-instance lock; empty = rkvoice.lock in the state directory."""
    max_failures: int = 5
    """This many failed turns in a row end the process (status 3) so systemd restarts it."""
    apology: str = "抱歉，刚才出了点问题。"
    """Spoken after a turn that failed."""
    answer_first_timeout_s: float = 20.0
    """A turn is aborted when the answer's first words take longer than this."""
    answer_gap_timeout_s: float = 10.0
    """... or when the answer stalls this long between two pieces of text."""
    device_retry_s: float = 1.0
    """First wait before reopening a missing microphone; doubles up to device_retry_max_s."""
    device_retry_max_s: float = 30.0
    stop_timeout_s: float = 1.5
    """On SIGTERM, wait this long for the current turn to stop (the whole exit stays under 2 s)."""
    stall_s: float = 120.0
    """No finished turn step for this long stops the watchdog pings (systemd restarts us)."""
    load_timeout_s: float = 90.0
    """Extra start-up time asked of systemd before each engine loads (EXTEND_TIMEOUT_USEC)."""

    def lock_path(self, state_dir: Path) -> Path:
        if not self.lock_file:
            return state_dir / "rkvoice.lock"
        p = Path(self.lock_file).expanduser()
        return p if p.is_absolute() else ROOT / p


@dataclass(frozen=True)
class Config:
    tts: TtsConfig = field(default_factory=TtsConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    state: StateConfig = field(default_factory=StateConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    hear: HearConfig = field(default_factory=HearConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Check (and lightly coerce) one YAML value against a dataclass field type."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RkvoiceError("config", "bad-type", f"{path}: expected a mapping, got {value!r}")
        return _build(tp, value, path)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, path)
            except RkvoiceError:
                continue
        raise RkvoiceError("config", "bad-type", f"{path}: {value!r} is not a {tp}")
    if origin in (list, tuple):
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            raise RkvoiceError("config", "bad-type", f"{path}: expected a list, got {value!r}")
        items = [_convert(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    elif isinstance(value, tp):
        return value
    raise RkvoiceError("config", "bad-type", f"{path}: expected {_type_name(tp)}, got {value!r}")


def _build(cls: Any, data: dict[str, Any], path: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise RkvoiceError(
                "config",
                "unknown-key",
                f"unknown config key {key_path!r}; known keys here: {', '.join(sorted(names))}",
            )
        kwargs[key] = _convert(value, hints[key], key_path)
    return cls(**kwargs)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


class _Loader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's underscore digit groups and sexagesimal numbers.

    Plain YAML reads ``0_1`` (an NPU core mask) as the integer 1 and ``22:05`` as 1325;
    here both stay strings, so a str field gets what the user wrote.
    """


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*|0x[0-9a-fA-F]+|0o[0-7]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."),
)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RkvoiceError("config", "unreadable", f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = _yaml_load(text)
    except yaml.YAMLError as exc:
        raise RkvoiceError("config", "bad-yaml", f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RkvoiceError("config", "bad-yaml", f"{path} must hold a mapping at the top level")
    return data


def parse_override(item: str) -> dict[str, Any]:
    """``"tts.threads=2"`` -> ``{"tts": {"threads": 2}}`` (the value parsed as YAML)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise RkvoiceError("config", "bad-override", f"--set expects KEY=VALUE, got {item!r}")
    value = _yaml_load(raw) if raw.strip() else ""
    node: dict[str, Any] = {}
    cur = node
    parts = key.strip().split(".")
    for part in parts[:-1]:
        cur[part] = {}
        cur = cur[part]
    cur[parts[-1]] = value
    return node


def load_config(
    overrides: list[dict[str, Any]] | None = None,
    files: list[Path] | None = None,
) -> Config:
    """Merge the default file, the system file (if present, or $RKVOICE_CONFIG) and overrides."""
    if files is None:
        files = [DEFAULT_CONFIG]
        env = os.environ.get("RKVOICE_CONFIG")
        if env:
            files.append(Path(env))
        elif SYSTEM_CONFIG.exists():
            files.append(SYSTEM_CONFIG)
    data: dict[str, Any] = {}
    for path in files:
        if path.exists() or path != DEFAULT_CONFIG:
            data = _merge(data, _read_yaml(path))
    for over in overrides or []:
        data = _merge(data, over)
    return _build(Config, data)
