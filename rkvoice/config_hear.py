"""The configuration sections for hearing: the ASR, the wake phrase and its engine, the VAD and the end
of a request (``hear``, ``hear.endpoint``). rkvoice.config puts them in ``Config`` beside the others."""

from __future__ import annotations

from dataclasses import dataclass, field

from rkvoice.config_fields import Section, num, one_of

GREETINGS = ("你好", "您好", "嗨", "嘿", "哈喽")
"""Greetings a wake phrase may open with before the assistant's name."""


@dataclass(frozen=True)
class EndpointConfig(Section):
    """When a request ends: Smart Turn v3 judges the speech so far at a short pause (rkvoice.hear.turn_end)."""

    PATH = "hear.endpoint"
    mode: str = one_of("smart", "silence")
    """smart: after short_silence_ms the end-of-turn model judges whether the request is complete and
    it ends at once if so, else at the latest after max_silence_ms; silence: every request ends after
    hear.trailing_silence_ms (also the fallback when the model is missing or fails)."""
    short_silence_ms: int = num(200, 100, 2000)
    """The pause after which the model first judges the request."""
    max_silence_ms: int = num(1500, 200, 10000)
    """A request judged unfinished ends after this much silence all the same."""
    recheck_ms: int = num(0, 50, 5000, also=((0, "once"),))
    """While the silence grows, the model judges again this often; 0: once per pause (then the request
    ends at max_silence_ms unless the speech goes on)."""
    threshold: float = num(0.75, 0.0, 1.0, lo_open=True, hi_open=True)
    """The model's probability of a finished request at or above which the request ends (chosen on
    the Chinese turn-end set: docs/decisions/0013-end-of-turn.md)."""
    model: str = "auto"
    """The end-of-turn model file: auto (on the board profile the NPU build board/turn-npu/smart-turn.rknn
    when ./install.sh built it, else the profile's CPU file turn/smart-turn-v3.2-cpu.onnx), or a path
    under models.dir unless absolute: a .rknn runs on RKNNLite (without rknn-toolkit-lite2: the CPU file,
    one warning), a .onnx on onnxruntime."""
    threads: int = num(1, 1, 64)
    """CPU threads of the model's onnxruntime session."""
    budget_ms: int = num(300, 10, 10000)
    """The model runs on its own thread and is waited for this long: a slower judgement counts as
    failed and that request ends by silence (one warning). 300: hear.trailing_silence_ms minus
    short_silence_ms, so a slow model never ends a request much later than mode silence."""
    words: bool = True
    """With hear.transcribe_ahead: a request the model judged finished ends once its transcript (made
    while the model judged; the answer needs it anyway) does not stop on a word that needs more
    (帮我把, 空调调到, 设一个, 我想问一下: rkvoice.text.unfinished); if it does, the request waits for
    the speech to go on, at most max_silence_ms, as it does when the transcript names a topic and nothing
    about it (我的iPhone, 客厅的灯: a noun phrase alone, not one of what the assistant reports on, such as
    北京明天的天气). A transcript not made by hear.trailing_silence_ms is not waited for. One the model
    judged unfinished ends as soon as its transcript closes a question (明天会下雨吗, 今天几号)."""


@dataclass(frozen=True)
class HearConfig(Section):
    PATH = "hear"
    asr: str = "auto"
    """ASR engine: whisper (portable), paraformer (board), or auto (by models.profile)."""
    wake: str = "auto"
    """Wake engine: asr-match (portable), kws (board), or auto (by models.profile)."""
    wake_phrase: str = "小智小智"
    """Also names the assistant (``name``): the tools and the LLM's system prompt use it."""
    wake_tolerance: float = num(0.75, 0.0, 2.0)
    """asr-match: largest pinyin mismatch cost accepted (a syllable off by initial or final = 0.5)."""
    wake_probe_s: float = num(2.5, 1.0, 10.0, also=((0, "off"),))
    """asr-match: a segment longer than this + 1.5 s is first checked on its first seconds only
    (spares the CPU on long unrelated speech); 0: always transcribe whole segments."""
    kws_threshold: float = num(0.25, 0.0, 1.0, lo_open=True, hi_open=True)
    """kws: sherpa-onnx keyword threshold; lower wakes more easily (and falsely more often)."""
    kws_score: float = num(1.5, 0.0, 20.0)
    """kws: sherpa-onnx keyword boost score; higher favours the wake phrase's tokens."""
    kws_dir: str = ""
    """Keyword-spotter model folder (encoder*/decoder*/joiner*.onnx + tokens.txt); empty =
    models.dir/board/kws-zh, relative = under the install dir (the board-hearing tests' stand-ins)."""
    paraformer_dir: str = ""
    """Paraformer folder (model.int8.onnx or model.onnx + tokens.txt); empty = models.dir/board/paraformer-zh."""
    threads: int = num(2, 1, 64)
    """CPU threads of the ASR (Whisper's CTranslate2, or Paraformer's onnxruntime)."""
    whisper_beam: int = num(5, 1, 10)
    """Whisper beam size: 5 measured more accurate than 1 at about the same speed (bench/asr.py)."""
    vad_threshold: float = num(0.5, 0.0, 1.0, lo_open=True, hi_open=True)
    """Silero speech probability above which a window counts as speech."""
    trailing_silence_ms: int = num(500, 100, 5000)
    """A request ends after this much silence (with hear.endpoint.mode silence, or when its model
    is missing or fails)."""
    transcribe_ahead: bool = True
    """Start the ASR when speech pauses for 150 ms, before the request ends (rkvoice.hear.ahead)."""
    min_speech_ms: int = num(250, 0, 2000)
    """Shorter bursts of speech are ignored (coughs, clicks)."""
    max_request_s: float = num(12.0, 1.0, 60.0)
    """A request is cut after this many seconds of speech and answered as heard."""
    listen_timeout_s: float = num(6.0, 0.0, 600.0, lo_open=True)
    """After a wake, give up if no speech starts within this time."""
    follow_up_s: float = num(6.0, 0.0, 600.0)
    """After an answer, speech within this window is a request without the wake phrase; 0: off."""
    aec: str = one_of("auto", "webrtc", "speex", "off", "external")
    """Echo cancellation with the played audio as reference, before VAD/wake/ASR: speex, webrtc
    (AEC3, an optional extra), auto (the first installed), off (the wake and follow-up path is muted
    while the speaker plays and for the echo tail after), external (the sound server cancels it)."""
    echo_tail_ms: int = num(300, 0, 3000)
    """How long the room rings after the last played block (plus the measured delay): the mute
    fallback's extra silence, and how long after playback the canceller keeps running."""
    ack: str = one_of("chime", "voice", "none")
    """Wake acknowledgement: chime, voice (ack_text synthesised once at start-up) or none."""
    ack_text: str = "我在"
    """What the voice acknowledgement says (``ack: voice``)."""
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)

    @property
    def name(self) -> str:
        """What the user calls the assistant, from the wake phrase: a name said twice ("小智小智")
        or after a greeting ("你好小智", "嘿小智") -> "小智"; any other phrase as it is."""
        phrase = "".join(c for c in self.wake_phrase if c.isalnum())
        half = len(phrase) // 2
        if half and phrase[:half] == phrase[half:]:
            return phrase[:half]
        greeting = next((g for g in GREETINGS if phrase.startswith(g) and len(phrase) > len(g)), "")
        return phrase[len(greeting):]

    def __post_init__(self) -> None:
        if self.aec is False:  # YAML 1.1 reads a bare off as false
            object.__setattr__(self, "aec", "off")
        super().__post_init__()
