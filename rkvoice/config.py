"""Configuration: repo ``config.yaml`` defaults -> ``/etc/rkvoice/config.yaml`` -> CLI flags. Every
section is a frozen dataclass whose fields declare what they accept (``rkvoice.config_fields``)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rkvoice.config_fields import ROOT, Section, build, merge, num, one_of, read_yaml, yaml_load
from rkvoice.config_ha import HomeAssistantConfig, SatelliteConfig, WyomingConfig
from rkvoice.config_hear import HearConfig
from rkvoice.endpoint import parse_uri
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.state import resolve_state_dir

DEFAULT_CONFIG = ROOT / "config.yaml"
SYSTEM_CONFIG = Path("/etc/rkvoice/config.yaml")
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class MatchaConfig(Section):
    """Matcha + Vocos voice (board: .rknn buckets on the NPU; anywhere: their .onnx twins, or the
    published dynamic-shape ONNX files, on onnxruntime)."""

    PATH = "tts.matcha"
    dir: str = "board"
    """Base directory of the files below, relative to models.dir unless absolute."""
    acoustic: str = "matcha-rknn/matcha-t*"
    """Glob of the Matcha token buckets (matcha-t{K}.rknn + .onnx twin + .json sidecar); ``runtime`` picks
    the suffix, a path ending in .onnx/.rknn is taken as is (e.g. matcha-zh-en/model-steps-3.onnx)."""
    vocoder: str = "matcha-rknn/vocos-f*"
    """Glob of the Vocos frame buckets (vocos-f{N}), same rules (e.g. matcha-zh-en/vocos-16khz-univ.onnx)."""
    lexicon: str = "matcha-zh-en/lexicon.txt"
    """Lexicon of the zh-en frontend (one toned-syllable token per Chinese character), relative to ``dir``."""
    tokens: str = "matcha-zh-en/tokens.txt"
    """Token table of the voice (token -> id), relative to ``dir``."""
    runtime: str = one_of("auto", "rknn", "onnx")
    """auto (.rknn on RKNNLite where rknn-toolkit-lite2 is installed, else the .onnx twins), rknn or onnx."""
    vocoder_context: int = num(32, 0, 512)
    """Frames of context either side when a mel is longer than the largest Vocos bucket (Vocos sees
    27 frames either side: 27 or more gives the same frames as one whole-mel run)."""
    seed: int = num(0, 0, INT32_MAX)
    """Seed of the ODE noise (drawn per generate call, so one text always sounds the same)."""
    first_chars: int = num(24, 1, 500)
    """Longest first piece for this voice (24 gave first audio ~0.4 s on the board in a published field report: docs/performance.md)."""
    chunk_chars: int = num(40, 1, 500)
    """Longest later piece for this voice (40 in the same report)."""
    sample_rate: int = num(16000, 8000, 48000)
    """Output rate of the voice when the model's metadata names none."""
    add_blank: bool = False
    """Interleave ``pad_id`` between the token ids (models other than zh-en); the model's metadata wins."""
    pad_id: int = num(0, 0, 1_000_000)
    """Token id used for padding and blanks when the model's metadata names none."""
    noise_scale: float = num(0.667, 0.0, 2.0)
    """Scale of the ODE start noise: lower is flatter and more even, higher more varied."""
    n_fft: int = num(1024, 16, 8192)
    """ISTFT size after Vocos when the vocoder's metadata names none (Vocos 16 kHz: 1024)."""
    hop_length: int = num(256, 1, 8192)
    """ISTFT hop in samples, same fallback rule (Vocos 16 kHz: 256)."""
    win_length: int = num(1024, 16, 8192)
    """ISTFT window length in samples, same fallback rule."""
    window: str = "hann"
    """ISTFT window type, same fallback rule (hann is the one supported)."""
    espeak_lib_dir: str = "board/espeak/lib"
    """Unpacked libespeak-ng1/libpcaudio0/libsonic0 + espeak-ng-data (board install), relative to
    models.dir; when absent the system's espeak-ng is used."""


@dataclass(frozen=True)
class FastSpeech2Config(Section):
    """Where the ``fastspeech2`` voice runs its MB-MelGAN vocoder (the acoustic model stays on onnxruntime)."""

    PATH = "tts.fastspeech2"
    vocoder: str = ""
    """Empty: models/portable/fastspeech2/mb_melgan.onnx on onnxruntime, the whole mel in one call.
    Otherwise a fixed-window vocoder (relative to models.dir unless absolute) in overlapping windows of
    vocoder_frames: a .rknn on the NPU (config.board.yaml), a .onnx on onnxruntime."""
    vocoder_frames: int = num(50, 3, 4096)
    """The fixed input length the .rknn was built for (convert_rknn.py vocoder --frames; <= 50)."""
    vocoder_context: int = num(16, 0, 2000)
    """Frames of context on each side of a window's kept centre: against one whole-mel run, 50-frame
    windows give 46.6-48.1 dB SNR at 16, 34.5-35.5 dB at 12 (tests/test_fastspeech2_board.py)."""
    core_mask: str = "auto"
    """NPU core mask for the .rknn vocoder: auto, 0, 1, 0_1."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.vocoder_frames <= 2 * self.vocoder_context:
            raise RkvoiceError(Stage.CONFIG, "bad-value", f"tts.fastspeech2: vocoder_frames {self.vocoder_frames} must "
                               f"exceed twice vocoder_context {self.vocoder_context} (e.g. frames 50, context 16)")


@dataclass(frozen=True)
class TtsConfig(Section):
    PATH = "tts"
    engine: str = "auto"
    """Engine name from the TTS registry, or "auto" for the best installed one for the text."""
    threads: int = num(1, 1, 64)
    """Intra-op threads per ONNX session (1 beat 2 for the small voices on 2 cores)."""
    speed: float = num(1.0, 0.25, 4.0)
    """Speaking rate: 2.0 speaks twice as fast, 0.5 half as fast."""
    sid: int = num(0, 0, 10_000)
    """Speaker id for voices with several speakers (VITS aishell3); ignored by single-speaker voices."""
    first_chars: int = num(12, 1, 500)
    """Longest first piece (characters): the first sound waits for it (bench/tts_latency.py: first
    audio 0.22 x whole-text synthesis at 12, 0.33 at 24, no gaps)."""
    chunk_chars: int = num(40, 1, 500)
    """Longest later piece (characters): each is synthesised while the one before plays."""
    coalesce_chars: int = num(0, 0, 2000)
    """Merge pieces of one turn that queued up while the TTS worker was busy into one synthesis
    call of at most this many characters (never the turn's first piece); 0: off."""
    max_text_chars: int = num(4000, 1, 1_000_000)
    """Longest text one --say/--text speaks (about 15 minutes of speech); longer input is refused."""
    vits_voice: str = "auto"
    """vits voice: piper-joe (portable, English), vits-zh-aishell3 (board), or auto (installed one)."""
    matcha_core_mask: str = "auto"
    """NPU core mask for RKNNLite: auto, 0, 1, 0_1."""
    matcha: MatchaConfig = field(default_factory=MatchaConfig)
    fastspeech2: FastSpeech2Config = field(default_factory=FastSpeech2Config)


@dataclass(frozen=True)
class AudioConfig(Section):
    PATH = "audio"
    player: str = "auto"
    """aplay, sounddevice, wav, null, or auto (aplay or sounddevice if a device exists, else wav)."""
    device: str = "default"
    """ALSA device for aplay / sounddevice device name."""
    output_rate: int = num(16000, 8000, 192_000)
    """Sample rate handed to the player; every voice is resampled to it once."""
    block_ms: int = num(20, 5, 500)
    """Size of the fixed output blocks handed to the player."""
    crossfade_ms: int = num(10, 0, 100)
    """Fade at the seams between pieces, so joins do not click."""
    input: str = "sounddevice"
    """Microphone source: sounddevice or arecord."""
    input_device: str = "default"
    """Microphone device name (sounddevice) or ALSA device (arecord)."""


@dataclass(frozen=True)
class ModelsConfig(Section):
    PATH = "models"
    dir: str = "models"
    """Where model files live; relative paths are taken from the install directory."""
    profile: str = "portable"
    """portable (CPU models, any Linux) or board (RK3576: NPU voice and LLM); decides what auto engines resolve to and which models ./install.sh fetches."""

    @property
    def path(self) -> Path:
        return ROOT / self.dir  # an absolute dir replaces ROOT


@dataclass(frozen=True)
class StateConfig(Section):
    PATH = "state"
    dir: str = ""
    """User state (todos, reminders); empty = $XDG_STATE_HOME/rkvoice, relative = under the install dir."""

    @property
    def path(self) -> Path:
        return resolve_state_dir(self.dir, ROOT)


@dataclass(frozen=True)
class LlmConfig(Section):
    PATH = "llm"
    engine: str = "auto"
    """llama (llama.cpp, portable), rkllm (RKLLM runtime on the NPU, board), or auto by profile."""
    model: str = ""
    """Model file; empty = the profile's default, relative = under models.dir."""
    threads: int | Literal["auto"] = num("auto", 1, 256)
    """llama.cpp threads while generating. auto: the cores free now until the answer's first piece goes
    to the voice, then one less than the cores, so the TTS thread keeps a core (rkvoice.answer.llm.cores)."""
    threads_batch: int | Literal["auto"] = num("auto", 1, 256)
    """llama.cpp threads while evaluating the prompt. auto: the cores free now, at least 1 (threads on
    busy cores stall each other: bench/llm_threads.py)."""
    context: int = num(2048, 128, 131_072)
    """Context window in tokens (prompt, history and answer together)."""
    max_tokens: int = num(200, 1, 8192)
    """Longest answer in tokens; generation stops there."""
    max_answer_chars: int = num(160, 1, 100_000)
    """Longest spoken answer in characters; the rest is cut at a sentence end."""
    temperature: float = num(0.7, 0.0, 2.0)
    """0: greedy (always the likeliest token)."""
    top_p: float = num(0.8, 0.0, 1.0, lo_open=True)
    """Nucleus sampling: draw from the likeliest tokens that together hold this probability."""
    top_k: int = num(20, 1, 1000)
    """Draw from at most this many likeliest tokens."""
    repeat_penalty: float = num(1.05, 0.5, 2.0)
    """Penalty on tokens already said; above 1 discourages loops."""
    seed: int = num(-1, 0, INT32_MAX, also=((-1, "a new seed per answer"),))
    """Sampling seed; -1 = a new one per answer (benchmarks fix it to compare runs on the same text)."""
    timeout_s: float = num(45.0, 0.0, 3600.0, lo_open=True)
    """Generation taking longer than this is aborted and the user is told."""
    history_turns: int = num(4, 0, 100)
    """Most earlier question/answer pairs kept in the prompt; one more drops the older half at once
    (the cached prompt then stays valid for the next turns; rkvoice.answer.conversation)."""
    system_prompt: str = (
        "你是{name}，一个在本地设备上离线运行的中文语音助手。用口语化的简体中文回答，"
        "一般两三句话；讲故事时讲五六句。不要用列表、表格、表情符号、代码或英文缩写。"
    )
    """The stable instructions, first in every prompt (their cache is kept between turns); ``{name}``
    becomes the assistant's name, taken from ``hear.wake_phrase`` (小智小智 -> 小智)."""
    rkllm_abi: str = "1.2"
    """librkllmrt.so ABI on the board: 1.2 (1.2.1-1.2.3) or 1.3 (1.3.0)."""
    rkllm_lib: str = "librkllmrt.so"
    """The RKLLM runtime library: a soname found by the loader, or an absolute path."""
    rkllm_base_domain_id: int = num(1, 0, 255)
    """RKLLM's NPU memory domain (1 keeps it apart from the voice's RKNN models)."""
    rkllm_cpus_mask: int = num(0xF0, 1, 2**32 - 1)
    """CPUs for the runtime's threads (0xF0 = the four A72 cores of the RK3576)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_tokens >= self.context:
            raise RkvoiceError(Stage.CONFIG, "bad-value", f"llm.max_tokens {self.max_tokens} leaves no room for the "
                               f"prompt in llm.context {self.context}; lower max_tokens or raise context")


@dataclass(frozen=True)
class DaemonConfig(Section):
    PATH = "daemon"
    lock_file: str = ""
    """Single-instance lock; empty = rkvoice.lock in the state directory."""
    max_failures: int = num(5, 1, 10_000)
    """This many failed turns in a row end the process (status 3) so systemd restarts it."""
    apology: str = "抱歉，刚才出了点问题。"
    """Spoken after a turn that failed."""
    answer_first_timeout_s: float = num(20.0, 0.0, 3600.0, lo_open=True)
    """A turn is aborted when the answer's first words take longer than this."""
    answer_gap_timeout_s: float = num(10.0, 0.0, 3600.0, lo_open=True)
    """... or when the answer stalls this long between two pieces of text."""
    device_retry_s: float = num(1.0, 0.0, 600.0, lo_open=True)
    """First wait before reopening a missing microphone; doubles up to device_retry_max_s."""
    device_retry_max_s: float = num(30.0, 0.0, 3600.0, lo_open=True)
    """Longest wait between two tries to reopen the microphone."""
    stop_timeout_s: float = num(1.5, 0.0, 60.0, lo_open=True)
    """On SIGTERM, wait this long for the current turn to stop (the whole exit stays under 2 s)."""
    stall_s: float = num(120.0, 0.0, 86_400.0, lo_open=True)
    """No finished turn step for this long stops the watchdog pings (systemd restarts us)."""
    load_timeout_s: float = num(90.0, 0.0, 3600.0, lo_open=True)
    """Extra start-up time asked of systemd before each engine loads (EXTEND_TIMEOUT_USEC)."""

    def lock_path(self, state_dir: Path) -> Path:
        return ROOT / Path(self.lock_file).expanduser() if self.lock_file else state_dir / "rkvoice.lock"


@dataclass(frozen=True)
class Config:
    tts: TtsConfig = field(default_factory=TtsConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    state: StateConfig = field(default_factory=StateConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    hear: HearConfig = field(default_factory=HearConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    wyoming: WyomingConfig = field(default_factory=WyomingConfig)
    home_assistant: HomeAssistantConfig = field(default_factory=HomeAssistantConfig)
    satellite: SatelliteConfig = field(default_factory=SatelliteConfig)

    def __post_init__(self) -> None:
        if self.satellite.uri and self.wyoming.uri and parse_uri(self.satellite.uri) == parse_uri(self.wyoming.uri):
            raise RkvoiceError(Stage.CONFIG, "bad-value", f"satellite.uri {self.satellite.uri!r} is wyoming.uri's "
                               "address; the satellite needs its own port (e.g. wyoming 10300, satellite 10700)")


def parse_override(item: str) -> dict[str, Any]:
    """``"tts.threads=2"`` -> ``{"tts": {"threads": 2}}`` (the value parsed as YAML)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise RkvoiceError(Stage.CONFIG, "bad-override", f"--set expects KEY=VALUE, got {item!r}")
    value: Any = yaml_load(raw) if raw.strip() else ""
    for part in reversed(key.strip().split(".")):
        value = {part: value}
    return value


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
    layers = [read_yaml(path) for path in files if path.exists() or path != DEFAULT_CONFIG] + (overrides or [])
    return build(Config, functools.reduce(merge, layers, {}))
