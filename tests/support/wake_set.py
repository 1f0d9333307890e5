"""The wake test set: "小智小智" said alone, and things that must not wake, made by the portable voice.

    py312/bin/python -m bench.wake_set [--out .cache/wake_set] [--quick]   # build it ahead

Every clip is 16 kHz mono, built deterministically (fixed seeds, the FastSpeech2 voice is
deterministic) into a cache folder with a ``manifest.json``; a second run with the same spec reuses
the files. Positives: the phrase at several speeds and pitches (pitch by the resample trick: the
voice speaks slower by the pitch factor, then the clip is read at a rate raised by that factor),
under white and babble noise at several SNRs, at levels from -20 to +6 dB (clipped like a
microphone), and with short and long leading/trailing silence. Negatives: near misses that differ
in sound (one repetition 小智, 晓知, 消失, 小时小时, 小猪小猪, 你好, 小爱同学 ...), unrelated
sentences, noise alone and silence.

小志小志 / 小知小知 / 小字小字 are not negatives: their toneless pinyin equals the phrase's (zh/z
fold, as southern speakers merge them), so they sound the same as 小智小智 and waking on them is
correct. The matcher tests cover them as matches.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from rkvoice.config import ROOT, Config, load_config

RATE = 16000
PHRASE = "小智小智"
VERSION = 1  # bump when the recipe changes: the cache is rebuilt

NEAR_MISSES = ["小智", "晓知", "消失", "小时小时", "小猪小猪", "小明小明", "你好", "小爱同学", "知道了", "小朋友"]
UNRELATED = [
    "今天天气怎么样",
    "我们明天一起去公园散步吧",
    "帮我设置一个明天早上七点的闹钟",
    "把客厅的灯关掉",
    "北京明天会下雨吗",
    "这个周末你有什么安排",
    "晚饭想吃点什么",
    "谢谢你的帮助",
]
BABBLE_TEXTS = ["今天的会议推迟到下午", "请把窗户打开一点", "他说明天要去上海出差", "这本书非常有意思"]


@dataclass(frozen=True)
class Clip:
    name: str
    wake: bool
    """True when the clip holds the wake phrase alone."""
    condition: str
    """clean, speed-pitch, white, babble, level, silence-pad, near-miss, unrelated, noise, silence."""
    text: str
    speed: float = 1.0
    semitones: float = 0.0
    noise: str = ""
    snr_db: float | None = None
    gain_db: float = 0.0
    lead_s: float = 0.5
    trail_s: float = 1.0


def spec(quick: bool = False) -> list[Clip]:
    """The clips of the set (``quick``: a representative subset for tests)."""
    pos: list[Clip] = []
    speeds = (0.7, 0.85, 1.0, 1.15, 1.3)
    pitches = (-4.0, -2.0, 0.0, 2.0, 4.0)
    for sp in speeds:
        for st in pitches:
            cond = "clean" if (sp, st) == (1.0, 0.0) else "speed-pitch"
            pos.append(Clip(f"pos_sp{sp}_st{st:+g}", True, cond, PHRASE, sp, st))
    for sp in speeds:
        pos.append(Clip(f"pos_comma_sp{sp}", True, "speed-pitch", "小智，小智。", sp))
    voices = ((1.0, 0.0), (0.85, -2.0), (1.15, 2.0))
    for sp, st in voices:
        for noise in ("white", "babble"):
            for snr in (20.0, 10.0, 5.0):
                pos.append(Clip(f"pos_{noise}{snr:g}_sp{sp}_st{st:+g}", True, noise, PHRASE, sp, st, noise, snr))
        for gain in (-20.0, -10.0, 6.0):
            pos.append(Clip(f"pos_gain{gain:+g}_sp{sp}_st{st:+g}", True, "level", PHRASE, sp, st, gain_db=gain))
        for lead, trail in ((0.05, 0.6), (2.0, 3.0)):
            pos.append(Clip(f"pos_pad{lead}-{trail}_sp{sp}_st{st:+g}", True, "silence-pad", PHRASE, sp, st,
                            lead_s=lead, trail_s=trail))
    neg: list[Clip] = []
    for text in NEAR_MISSES:
        for sp, st in voices:
            neg.append(Clip(f"neg_near_{text}_sp{sp}_st{st:+g}", False, "near-miss", text, sp, st))
    for i, text in enumerate(UNRELATED):
        sp, st = voices[i % len(voices)]
        neg.append(Clip(f"neg_unrelated{i}", False, "unrelated", text, sp, st))
        neg.append(Clip(f"neg_unrelated{i}_white10", False, "unrelated", text, 1.0, 0.0, "white", 10.0))
    for kind in ("white", "babble"):
        for level in (-40.0, -26.0, -14.0):
            neg.append(Clip(f"neg_{kind}{level:g}dB", False, "noise", "", noise=kind, gain_db=level, trail_s=3.0))
    neg.append(Clip("neg_silence", False, "silence", "", trail_s=3.0))
    neg.append(Clip("neg_hiss-70dB", False, "silence", "", noise="white", gain_db=-70.0, trail_s=3.0))
    clips = pos + neg
    if quick:
        keep = {"pos_sp1.0_st+0", "pos_sp0.7_st+4", "pos_sp1.3_st-4", "pos_comma_sp0.85", "pos_babble10_sp0.85_st-2",
                "pos_white5_sp1.15_st+2", "pos_gain-20_sp1.0_st+0", "pos_pad2.0-3.0_sp1.0_st+0",
                "neg_near_小智_sp1.0_st+0", "neg_near_消失_sp0.85_st-2", "neg_near_小时小时_sp0.85_st-2",
                "neg_near_小猪小猪_sp1.0_st+0",
                "neg_unrelated1", "neg_babble-14dB", "neg_white-26dB", "neg_silence"}
        clips = [c for c in clips if c.name in keep]
    return clips


def _hash(clips: list[Clip]) -> str:
    blob = json.dumps([VERSION] + [asdict(c) for c in clips], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Maker:
    def __init__(self, cfg: Config) -> None:
        from rkvoice.tts.registry import create_tts

        self.tts = create_tts(cfg, "fastspeech2")
        self.tts.load()
        self._babble: np.ndarray | None = None

    def voice(self, text: str, speed: float = 1.0, semitones: float = 0.0) -> np.ndarray:
        """``text`` spoken at ``speed`` and raised by ``semitones``, 16 kHz float32."""
        import soxr

        factor = 2.0 ** (semitones / 12.0)
        audio, rate = self.tts.generate(text, speed=speed / factor)
        return soxr.resample(np.asarray(audio, np.float32), rate * factor, RATE, quality="HQ").astype(np.float32)

    def babble(self) -> np.ndarray:
        """Four other sentences at once (different pitches and offsets), looped to 10 s, unit RMS."""
        if self._babble is None:
            n = 10 * RATE
            mix = np.zeros(n, np.float32)
            for i, text in enumerate(BABBLE_TEXTS):
                talk = self.voice(text, 1.0 + 0.1 * (i % 2), (-3.0, 2.0, -1.0, 4.0)[i])
                talk = np.tile(talk, n // len(talk) + 2)
                mix += talk[i * RATE // 3 : i * RATE // 3 + n]
            self._babble = (mix / np.sqrt(np.mean(mix**2))).astype(np.float32)
        return self._babble

    def noise(self, kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
        if kind == "white":
            return rng.standard_normal(n).astype(np.float32)
        start = int(rng.integers(0, RATE * 5))
        return np.resize(self.babble()[start:], n).astype(np.float32)

    def make(self, clip: Clip, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        speech = self.voice(clip.text, clip.speed, clip.semitones) if clip.text else np.zeros(0, np.float32)
        lead, trail = np.zeros(int(clip.lead_s * RATE), np.float32), np.zeros(int(clip.trail_s * RATE), np.float32)
        audio = np.concatenate([lead, speech, trail])
        if clip.noise and clip.text and clip.snr_db is not None:  # noise at an SNR against the speech's RMS
            rms = np.sqrt(np.mean(speech**2))
            audio = audio + self.noise(clip.noise, len(audio), rng) * rms / 10 ** (clip.snr_db / 20.0)
            audio *= 10 ** (clip.gain_db / 20.0)
        elif clip.noise:  # noise alone at an absolute RMS level (dBFS)
            audio = self.noise(clip.noise, len(audio), rng) * 10 ** (clip.gain_db / 20.0)
        else:
            audio = audio * 10 ** (clip.gain_db / 20.0)
        return np.clip(audio, -1.0, 1.0).astype(np.float32)


def build(out: Path, clips: list[Clip], cfg: Config | None = None) -> list[tuple[Clip, Path]]:
    """Write the clips' WAVs under ``out`` (reused when the manifest matches) -> (clip, path) pairs."""
    import soundfile as sf

    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "manifest.json"
    digest = _hash(clips)
    pairs = [(c, out / f"{c.name}.wav") for c in clips]
    if manifest.is_file() and json.loads(manifest.read_text()).get("hash") == digest:
        if all(p.is_file() for _c, p in pairs):
            return pairs
    maker = Maker(cfg or load_config())
    for clip, path in pairs:
        seed = int.from_bytes(hashlib.sha256(clip.name.encode()).digest()[:4], "little")  # same clip, same noise
        sf.write(path, maker.make(clip, seed), RATE, subtype="FLOAT")
    manifest.write_text(json.dumps({"hash": digest, "clips": [asdict(c) for c in clips]}, ensure_ascii=False,
                                   indent=1))
    return pairs


def default_dir(quick: bool = False) -> Path:
    return ROOT / ".cache" / ("wake_set_quick" if quick else "wake_set")
