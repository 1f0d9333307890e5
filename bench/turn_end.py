"""The end-of-turn decision on the Chinese turn-end set (tests/support/turn_set.py), per installed
Chinese voice: how many complete requests end at the short silence, how many requests that go on
after a pause are ended too early, for each threshold, and the threshold that meets the goals.

    py312/bin/python -m bench.turn_end [--quick] [--speeds 0.85,1.0,1.15] [--seed N] [--looks FILE] [--out FILE]
    py312/bin/python -m bench.turn_end --replay FILE [FILE ...]     (judge saved looks; several: pooled)

Each clip (0.5 s of silence, the clip, 2 s of silence; a -80 dB dither) streams through the product's
TurnEnd (the real silero VAD at hear.endpoint.short_silence_ms, the installed Smart Turn model on one
thread) with the threshold set out of reach, so every look the decision would take up to
max_silence_ms is taken and recorded (stream time, probability, ms). A threshold t then ends a
request at its first look with p >= t: a look before the clip's speech is over that reaches t is a
cut-off; a whole request whose first look after its end reaches t ends at the short silence
(``early_end_share``). ``cutoff_rate``: paused requests (300-800 ms pauses where people pause) cut
off; ``whole_cut_rate``: whole requests cut at a pause of their own; ``cut_waited_share``: requests
the speaker left unfinished that the model did not end at the short silence. With ``words`` a policy also takes the words' second
opinion (rkvoice.text.unfinished on the installed ASR's transcript of the speech held at each pause,
``hear.endpoint.words``): a look that reaches t on speech whose transcript stops on a word that needs
more or names a topic alone does not end it, and that pause is not looked at again; a look below t on
speech whose transcript closes a question ends it. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from rkvoice.config import Config, load_config
from rkvoice.hear.asr import create_asr
from rkvoice.hear.turn_end import TurnEnd
from rkvoice.hear.turn_model import SmartTurn, turn_model_path
from rkvoice.hear.vad import SAMPLE_RATE, Segmenter
from rkvoice.stages import installed_voice
from rkvoice.text.unfinished import finished, topic, unfinished
from rkvoice.tts.registry import PREFERENCE, engine_voices, installed_voices
from tests.support import bench_run, percentile
from tests.support.turn_set import Clip, Voice, clips_for, requests

LEAD_S, TAIL_S = 0.5, 2.0
FRAME = 512
THRESHOLDS = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))  # 0.3 .. 0.95
GOAL_CUTOFF, GOAL_EARLY = 0.03, 0.80
COLLECT_RECHECK_MS, COLLECT_MAX_MS = 300, 1500
FAST = ("tool", "home")  # the turns bench/endpoint.py's latency goal is for


class Looks:
    """The model, recording each look: (stream time, probability, the transcript of the speech held,
    the pause's number). ``on_pause`` transcribes the held speech with ``asr`` (as rkvoice.hear.ahead
    would, here before the look)."""

    def __init__(self, model: SmartTurn, asr: Any) -> None:
        self.model = model
        self.asr = asr
        self.dec: TurnEnd | None = None
        self.seen: list[tuple[float, float, str, int]] = []
        self.text, self.pauses = "", 0

    def load(self) -> None:
        pass

    def on_pause(self, samples: np.ndarray) -> None:
        self.text, self.pauses = self.asr.transcribe(samples), self.pauses + 1

    def probability(self, samples: np.ndarray) -> float:
        assert self.dec is not None
        p = self.model.probability(samples)
        self.seen.append((self.dec.now_s, p, self.text, self.pauses))
        return p


@dataclasses.dataclass
class Run:
    clip: Clip
    looks: list[tuple[float, float, float, float, str, int]]
    """(stream time, silence ms, probability, ms, transcript of the speech held, pause number) of each look."""
    speech_end_s: float
    pause_ms: float = 0.0
    """The longest silence the decision waited through before the speech was over."""
    silence_cut: bool = False
    """Whether mode silence (hear.trailing_silence_ms) ended the request before its speech was over."""


def collecting(cfg: Config) -> Config:
    """``cfg`` with a threshold no look reaches: every look on the grid short + k * 300 ms up to
    1.5 s of silence is taken."""
    ep = dataclasses.replace(cfg.hear.endpoint, threshold=0.999999, budget_ms=10000, recheck_ms=COLLECT_RECHECK_MS,
                             max_silence_ms=COLLECT_MAX_MS)
    return dataclasses.replace(cfg, hear=dataclasses.replace(cfg.hear, endpoint=ep))


def stream(clip: Clip, rng: np.random.Generator) -> np.ndarray:
    audio = np.concatenate([np.zeros(int(LEAD_S * SAMPLE_RATE), np.float32), clip.audio,
                            np.zeros(int(TAIL_S * SAMPLE_RATE), np.float32)])
    return (audio + 1e-4 * rng.standard_normal(len(audio))).astype(np.float32)


def look_at(dec: TurnEnd, plain: Segmenter, looks: Looks, clip: Clip, rng: np.random.Generator) -> Run:
    """Stream ``clip`` through the decision (every look it took) and through mode silence's segmenter."""
    dec.restart(0)
    plain.restart(0)
    looks.seen, looks.pauses = [], 0
    audio = stream(clip, rng)
    speech_end = LEAD_S + clip.speech_s
    judged, ends, pause = [], [], 0.0
    for i in range(0, len(audio) - FRAME + 1, FRAME):
        frame = audio[i: i + FRAME]
        for seg in dec.accept(frame):
            judged += [j for j in seg.judgements if j.probability is not None]
        if dec.now_s < speech_end:
            pause = max(pause, dec.waiting_ms)
        ends += [seg.end_s for seg in plain.accept(frame)]
    for seg in dec.flush():
        judged += [j for j in seg.judgements if j.probability is not None]
    assert len(judged) == len(looks.seen), (clip.name, len(judged), len(looks.seen))
    rows = [(t, j.silence_ms, p, j.ms, text, n) for (t, p, text, n), j in zip(looks.seen, judged)]
    return Run(clip, rows, speech_end, pause, bool(ends) and ends[0] < speech_end - 0.1)


@dataclasses.dataclass(frozen=True)
class Policy:
    """A threshold, and how often the decision looks again while the silence grows (in steps of the
    collected looks' ``recheck_ms``; 0: once per pause, at the short silence)."""

    threshold: float
    every: int = 1
    max_ms: float = 1500.0
    words: bool = False


def taken(silence_ms: float, short_ms: float, base_ms: float, every: int) -> bool:
    """Whether a look at ``silence_ms`` (on the grid short + k * base) is taken with ``every``."""
    k = round((silence_ms - short_ms) / base_ms)
    return k == 0 or (every > 0 and k % every == 0)


def outcome(run: Run, policy: Policy, short_ms: float, base_ms: float) -> tuple[bool, bool, float]:
    """(cut off, ended at the short silence, the silence it ended after) under ``policy``, as
    rkvoice.hear.turn_end decides at each look taken: p >= threshold ends the request, unless (with the
    words) its transcript stops on a word that needs more or names a topic alone (that pause is not
    looked at again); p < threshold ends it when its transcript closes a question."""
    ends: list[tuple[float, float]] = []  # (stream time, silence) of each end the looks would make
    done: set[int] = set()
    for when, sil, p, _, text, pause in run.looks:
        if sil >= policy.max_ms or pause in done or not taken(sil, short_ms, base_ms, policy.every):
            continue
        if p < policy.threshold:
            if policy.words and finished(text) is not None:
                ends.append((when, sil))
                done.add(pause)
            continue
        done.add(pause)
        if policy.words and (unfinished(text) is not None or topic(text) is not None):
            continue
        ends.append((when, sil))
    cut = run.pause_ms >= policy.max_ms or any(when < run.speech_end_s for when, _ in ends)
    after = sorted(sil for when, sil in ends if when >= run.speech_end_s)
    early = not cut and bool(after) and after[0] < short_ms + base_ms / 2
    return cut, early, after[0] if after else policy.max_ms


def share(flags: list[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def figures(runs: list[Run], policy: Policy, short_ms: float, base_ms: float) -> dict[str, Any]:
    by = {shape: [outcome(r, policy, short_ms, base_ms) for r in runs if r.clip.shape == shape]
          for shape in ("whole", "paused", "cut")}
    ends = [after for cut, _, after in by["whole"] if not cut]
    answered = {kind: [outcome(r, policy, short_ms, base_ms) for r in runs if r.clip.shape == "whole" and r.clip.kind == kind]
                for kind in FAST}
    slowest = [percentile([after for cut, _, after in rows if not cut], 50) for rows in answered.values()]
    return {**dataclasses.asdict(policy),
            "early_end_share": share([early for _, early, _ in by["whole"]]),
            "cutoff_rate": share([cut for cut, _, _ in by["paused"]]),
            "whole_cut_rate": share([cut for cut, _, _ in by["whole"]]),
            "cut_waited_share": share([not (cut or early) for cut, early, _ in by["cut"]]),
            "end_silence_p50_ms": percentile(ends, 50),
            "end_silence_mean_ms": round(float(np.mean(ends)), 1) if ends else None,
            "tool_home_end_p50_ms": max((x for x in slowest if x is not None), default=None)}


def silence_figures(runs: list[Run], trailing_ms: float) -> dict[str, Any]:
    """Mode silence on the same clips: every request ends after ``trailing_ms``; a pause that long cuts."""
    return {"cutoff_rate": share([r.silence_cut for r in runs if r.clip.shape == "paused"]),
            "whole_cut_rate": share([r.silence_cut for r in runs if r.clip.shape == "whole"]),
            "early_end_share": 0.0, "end_silence_p50_ms": trailing_ms}


POLICIES = tuple(Policy(t, every, m, words) for words in (False, True) for m in (800.0, 1000.0, 1500.0)
                 for every in (1, 2, 0) for t in THRESHOLDS)
"""Looks every recheck_ms (1), every other one (2), or once per pause (0), at each threshold, ending
after each max_silence_ms, with and without the words' second opinion."""


def choose(sweep: dict[str, list[dict[str, Any]]], trailing_ms: float) -> tuple[Policy, str]:
    """On every voice's worst figures: of the policies within both goals, the one with the fewest
    cut-offs (paused and whole; a cut-off loses the request, an early end saves ~300 ms), then the most
    early ends. None within both: the most early ends within the cut-off goal. None within that: of the
    policies that end complete tool requests and complete home requests (the latency goal's turns)
    each no later than mode silence at the median, and complete requests no later than it on average,
    the one with the fewest cut-offs."""
    def worst(i: int, key: str, pick: Any) -> float:
        return float(pick((row[i][key] or 0.0) for row in sweep.values()))

    def cuts(i: int) -> float:
        return max(worst(i, "cutoff_rate", max), worst(i, "whole_cut_rate", max))

    rows = range(len(POLICIES))
    ok = [i for i in rows if cuts(i) <= GOAL_CUTOFF]
    if both := [i for i in ok if worst(i, "early_end_share", min) >= GOAL_EARLY]:
        return POLICIES[min(both, key=lambda i: (cuts(i), -worst(i, "early_end_share", min)))], \
            "goals met: the fewest cut-offs within both"
    if ok:
        return POLICIES[max(ok, key=lambda i: (worst(i, "early_end_share", min), -cuts(i)))], \
            "cut-off goal met, early-end goal not: the most early ends within it"
    fast = [i for i in rows if worst(i, "tool_home_end_p50_ms", max) <= trailing_ms
            and worst(i, "end_silence_mean_ms", max) <= trailing_ms] or list(rows)
    best = min(fast, key=lambda i: (cuts(i), -worst(i, "early_end_share", min), worst(i, "end_silence_mean_ms", max)))
    return POLICIES[best], "goal not met: the fewest cut-offs, tool and home requests no slower than mode silence at the median, whole requests not on average"


def chinese_voices(cfg: Config) -> tuple[list[str], list[str]]:
    """(installed Chinese voices, the others not installed here)."""
    have = [name for name, v in installed_voices(cfg).items() if "zh" in v.languages]
    every = [v.name for e in PREFERENCE["zh"] for v in engine_voices(e) if "zh" in v.languages]
    return have, [n for n in every if n not in have]


def collect(cfg: Config, quick: bool, speeds: tuple[float, ...], seed: int = 0) -> dict[str, list[Run]]:
    """Every look of the decision on every clip of the set, per installed Chinese voice (``seed``: the
    -80 dB noise each clip is streamed with)."""
    model = SmartTurn(turn_model_path(cfg), cfg.hear.endpoint.threads)
    model.load()
    asr = create_asr(cfg)
    asr.load()
    looks = Looks(model, asr)
    dec = TurnEnd(collecting(cfg), judge=looks)
    dec.on_pause = looks.on_pause
    looks.dec = dec
    dec.load()
    plain = Segmenter(cfg)
    plain.load()
    rng = np.random.default_rng(seed)
    runs: dict[str, list[Run]] = {}
    for name in chinese_voices(cfg)[0]:
        voice = Voice(name, installed_voice(cfg, installed_voices(cfg)[name]))
        runs[name] = [look_at(dec, plain, looks, clip, rng) for speed in speeds for kind, text in requests(quick)
                      for clip in clips_for(voice, text, kind, speed)]
    return runs


def saved(runs: dict[str, list[Run]]) -> dict[str, Any]:
    """The looks without the audio (``--looks``), read back by ``--replay``."""
    return {name: [{"name": r.clip.name, "kind": r.clip.kind, "shape": r.clip.shape, "pause_ms": r.clip.pause_ms,
                    "speech_end_s": r.speech_end_s, "looks": r.looks, "waited_ms": r.pause_ms,
                    "silence_cut": r.silence_cut} for r in rs] for name, rs in runs.items()}


def replayed(data: dict[str, Any]) -> dict[str, list[Run]]:
    empty = np.zeros(0, np.float32)
    return {name: [Run(Clip(r["name"], r["kind"], "", r["shape"], empty, 0.0, r["pause_ms"]),
                       [tuple(x) for x in r["looks"]], r["speech_end_s"], r["waited_ms"], r["silence_cut"]) for r in rs]
            for name, rs in data.items()}


def pooled(collections: list[dict[str, list[Run]]]) -> dict[str, list[Run]]:
    """Several collections' runs per voice as one (the same set streamed with other noise: more looks)."""
    out: dict[str, list[Run]] = {}
    for runs in collections:
        for name, rs in runs.items():
            out.setdefault(name, []).extend(rs)
    return out


def shipped_policy(cfg: Config) -> Policy:
    """The configured decision as a policy on the collected grid (recheck_ms a multiple of its step)."""
    ep = cfg.hear.endpoint
    every = 0 if not ep.recheck_ms else max(1, round(ep.recheck_ms / COLLECT_RECHECK_MS))
    return Policy(ep.threshold, every, float(ep.max_silence_ms), ep.words and cfg.hear.transcribe_ahead)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="five requests, one speed")
    ap.add_argument("--speeds", default="0.85,1.0,1.15", help="speaking rates of each voice")
    ap.add_argument("--looks", type=Path, help="also write every look here (JSON, for --replay)")
    ap.add_argument("--replay", type=Path, nargs="+",
                    help="judge the looks of earlier --looks files (several: pooled) instead of the set")
    ap.add_argument("--seed", type=int, default=0, help="the noise the clips are streamed with (collecting)")
    args, report = bench_run("turn_end", ap, argv)
    cfg = load_config()
    ep = cfg.hear.endpoint
    speeds = (1.0,) if args.quick else tuple(float(s) for s in args.speeds.split(","))
    runs = pooled([replayed(json.loads(f.read_text())) for f in args.replay]) if args.replay else \
        collect(cfg, args.quick, speeds, args.seed)
    if args.looks:
        args.looks.write_text(json.dumps(saved(runs), ensure_ascii=False))
    short, base, trailing = float(ep.short_silence_ms), float(COLLECT_RECHECK_MS), float(cfg.hear.trailing_silence_ms)
    sweep = {name: [figures(rs, policy, short, base) for policy in POLICIES] for name, rs in runs.items()}
    every = [r for rs in runs.values() for r in rs]
    shipped = shipped_policy(cfg)
    at = figures(every, shipped, short, base)
    ms = [look[3] for r in every for look in r.looks]
    chosen, why = choose(sweep, trailing)
    report.emit({
        **{k: at[k] for k in ("cutoff_rate", "early_end_share", "whole_cut_rate", "cut_waited_share",
                              "end_silence_p50_ms", "end_silence_mean_ms")},
        "policy": dataclasses.asdict(shipped), "chosen": {**dataclasses.asdict(chosen), "why": why},
        "silence_mode": silence_figures(every, trailing),
        "judge_p50_ms": percentile(ms, 50), "judge_p90_ms": percentile(ms, 90), "looks": len(ms),
        "short_silence_ms": ep.short_silence_ms, "recheck_grid_ms": COLLECT_RECHECK_MS,
        "clips": {shape: sum(r.clip.shape == shape for r in every) for shape in ("whole", "paused", "cut")},
        "speeds": speeds, "voices": {name: figures(rs, shipped, short, base) for name, rs in runs.items()},
        "voices_not_installed": chinese_voices(cfg)[1],
        "kinds": {kind: figures([r for r in every if r.clip.kind == kind], shipped, short, base)
                  for kind in ("tool", "home", "llm", "mixed")},
        "cut_off": sorted(r.clip.name for r in every if r.clip.shape != "cut" and outcome(r, shipped, short, base)[0]),
        "sweep": sweep,
    }, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
