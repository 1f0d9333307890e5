#!/usr/bin/env python3
"""Random-weight stand-ins for the board voice: Matcha zh-en (acoustic) and Vocos 16 kHz (vocoder).

The published files (sherpa-onnx's ``matcha-icefall-zh-en/model-steps-3.onnx`` and
``vocos-16khz-univ.onnx``) download only on a board with internet. Their architectures are on PyPI:
``matcha-tts`` 0.0.7.2 and ``vocos`` 0.1.0. This script builds both networks with the zh-en
hyper-parameters, fills them with seeded random weights and exports them the way the published files
were exported (torch.onnx, opset 14 for Matcha through ``synthesise`` with 3 ODE steps; the Vocos
backbone + ISTFT head with ``mag``/``x``/``y`` outputs), with the same input/output names and the
same kind of metadata. Same ops, same shapes, noise for audio: what the converter and the engine see
is the real graph.

Two deliberate choices keep the stand-in's behaviour plausible without training:
- the duration predictor's last bias is set so every token lasts about ``--frames-per-token``
  frames (a trained model gives ~6-9 at 16 kHz / hop 256); the rest of its weights stay random, so
  durations still vary from token to token;
- it also writes a lexicon.txt / tokens.txt pair in the published zh-en format (one toned-syllable
  token per Chinese character, IPA phone tokens for English) whose ids are the model's vocabulary.

Runs in the toolkit venv (python 3.11 + torch 2.13.0 CPU + matcha-tts/vocos installed --no-deps with
einops, conformer, diffusers 0.25): see ``models/convert_rknn.py setup-venv``.

    python models/standins/make_voice.py --out DIR [--seed 0] [--small | --tiny] [--frames-per-token 7]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import types
from pathlib import Path

SAMPLE_RATE = 16000
N_FFT = 1024
HOP = 256
N_MELS = 80

# The zh-en lexicon's token inventory: specials, then toned pinyin finals/initials as whole syllables
# (one token per character), then IPA phones for English words, then punctuation.
_SPECIALS = ["_", "^", "$", " "]
_PUNCT = list("，。！？、；：,.!?;:'\"-")
_IPA = ["a", "b", "d", "e", "f", "h", "i", "j", "k", "l", "m", "n", "o", "p", "s", "t", "u", "v", "w", "z",
        "æ", "ð", "ŋ", "ɑ", "ɔ", "ə", "ɛ", "ɡ", "ɪ", "ɹ", "ʃ", "ʊ", "ʌ", "ʒ", "θ", "ˈ", "ˌ", "ː", "ɾ", "ɜ",
        "aɪ", "aʊ", "eɪ", "oʊ", "ɔɪ", "tʃ", "dʒ"]


def _stub_training_imports() -> None:
    """Let the model code import without lightning/hydra/torchaudio (training-only dependencies)."""
    spec = importlib.util.find_spec("matcha")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("matcha-tts is not installed in this interpreter (pip install --no-deps matcha-tts==0.0.7.2)")
    root = Path(next(iter(spec.submodule_search_locations)))
    utils = types.ModuleType("matcha.utils")
    utils.__path__ = [str(root / "utils")]  # submodules (utils.model, utils.pylogger) load from disk

    def get_pylogger(name: str = __name__):
        import logging

        return logging.getLogger(name)

    utils.get_pylogger = get_pylogger
    pylogger = types.ModuleType("matcha.utils.pylogger")  # the real one imports lightning
    pylogger.get_pylogger = get_pylogger
    sys.modules["matcha.utils"] = utils
    sys.modules["matcha.utils.pylogger"] = pylogger
    base = types.ModuleType("matcha.models.baselightningmodule")
    import torch

    class BaseLightningClass(torch.nn.Module):
        def save_hyperparameters(self, *args, **kwargs) -> None:
            return None

        def update_data_statistics(self, data_statistics) -> None:
            stats = data_statistics or {"mel_mean": 0.0, "mel_std": 1.0}
            self.register_buffer("mel_mean", torch.tensor(stats["mel_mean"]))
            self.register_buffer("mel_std", torch.tensor(stats["mel_std"]))

    base.BaseLightningClass = BaseLightningClass
    sys.modules["matcha.models.baselightningmodule"] = base
    # matcha_tts imports the training-time aligner (a Cython extension); inference never calls it.
    sys.modules.setdefault("matcha.utils.monotonic_align", types.ModuleType("matcha.utils.monotonic_align"))
    vspec = importlib.util.find_spec("vocos")
    if vspec is None or not vspec.submodule_search_locations:
        raise SystemExit("vocos is not installed in this interpreter (pip install --no-deps vocos==0.1.0)")
    vocos = types.ModuleType("vocos")  # its __init__ pulls the pretrained loader (encodec, hub)
    vocos.__path__ = list(vspec.submodule_search_locations)
    sys.modules["vocos"] = vocos
    if importlib.util.find_spec("torchaudio") is None:
        ta = types.ModuleType("torchaudio")
        fn = types.ModuleType("torchaudio.functional")
        fnf = types.ModuleType("torchaudio.functional.functional")
        fnf._hz_to_mel = lambda f, mel_scale="htk": 2595.0 * math.log10(1.0 + f / 700.0)
        fnf._mel_to_hz = lambda m, mel_scale="htk": 700.0 * (10 ** (m / 2595.0) - 1.0)
        ta.functional, fn.functional = fn, fnf
        sys.modules.update({"torchaudio": ta, "torchaudio.functional": fn, "torchaudio.functional.functional": fnf})


def zh_en_tokens() -> list[str]:
    """Token inventory in the published order of kinds: specials, toned syllables, IPA, punctuation."""
    from pypinyin.constants import PINYIN_DICT
    from pypinyin.style import convert

    syllables: set[str] = set()
    for readings in PINYIN_DICT.values():
        for r in readings.split(","):
            s = convert(r, style=8, strict=True)  # Style.TONE3: ni3; neutral tone has no digit
            if s and s.isascii():
                syllables.add(s if s[-1].isdigit() else s + "5")
    return _SPECIALS + sorted(syllables) + _IPA + _PUNCT


def write_lexicon(out: Path, tokens: list[str]) -> None:
    """tokens.txt (``token id``) and lexicon.txt (``word tok tok ...``): every common CJK character
    with its first pinyin reading, plus a few English words in IPA phones."""
    from pypinyin import Style, pinyin

    (out / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    ids = set(tokens)
    lines = []
    for cp in range(0x4E00, 0x9FA6):
        ch = chr(cp)
        r = pinyin(ch, style=Style.TONE3, neutral_tone_with_five=True, strict=True)[0][0]
        if r in ids:
            lines.append(f"{ch} {r}")
    english = {"hello": "h ə l oʊ", "python": "p aɪ θ ə n", "github": "ɡ ɪ t h ʌ b", "world": "w ɜ l d"}
    lines += [f"{w} {p}" for w, p in english.items()]
    (out / "lexicon.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_matcha(n_vocab: int, seed: int, frames_per_token: float, small: bool, tiny: bool = False):
    import torch
    from matcha.models.matcha_tts import MatchaTTS

    ns = types.SimpleNamespace
    torch.manual_seed(seed)
    enc = ns(encoder_type="RoPE Encoder",
             encoder_params=ns(n_feats=N_MELS, n_channels=96 if small else 192,
                               filter_channels=384 if small else 768, filter_channels_dp=256, n_heads=2,
                               n_layers=2 if small else 6, kernel_size=3, p_dropout=0.1, spk_emb_dim=64,
                               n_spks=1, prenet=True),
             duration_predictor_params=ns(filter_channels_dp=256, kernel_size=3, p_dropout=0.1))
    dec = {"channels": [64, 64] if tiny else [256, 256], "dropout": 0.05, "attention_head_dim": 32 if tiny else 64,
           "n_blocks": 1, "num_mid_blocks": 1 if tiny else 2, "num_heads": 2, "act_fn": "snakebeta"}
    cfm = ns(name="CFM", solver="euler", sigma_min=1e-4)
    model = MatchaTTS(n_vocab=n_vocab, n_spks=1, spk_emb_dim=64, n_feats=N_MELS, encoder=enc, decoder=dec,
                      cfm=cfm, data_statistics={"mel_mean": -5.5, "mel_std": 2.1}, out_size=None)
    with torch.no_grad():
        proj = model.encoder.proj_w.proj
        proj.weight.mul_(0.05)  # durations vary a little around frames_per_token ...
        proj.bias.fill_(math.log(frames_per_token))  # ... instead of exp(random) in [0, 1e3]
    return model.eval()


class _MatchaExport:
    """The published export's forward: synthesise(...)["mel"] with a fixed ODE step count."""

    def __new__(cls, model, steps: int):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, x, x_length, noise_scale, length_scale):
                return self.model.synthesise(x=x, x_lengths=x_length, n_timesteps=steps,
                                             temperature=noise_scale, length_scale=length_scale)["mel"]

        return Wrapper().eval()


def export_matcha(model, path: Path, steps: int, pad_id: int) -> None:
    import onnx
    import torch

    wrapper = _MatchaExport(model, steps)
    x = torch.ones(1, 1000, dtype=torch.int64)  # long initial length for the rotary embedding cache
    args = (x, torch.tensor([1000], dtype=torch.int64), torch.tensor([1.0]), torch.tensor([1.0]))
    with torch.no_grad():
        torch.onnx.export(wrapper, args, str(path), opset_version=14, dynamo=False,
                          input_names=["x", "x_length", "noise_scale", "length_scale"], output_names=["mel"],
                          dynamic_axes={"x": {0: "N", 1: "L"}, "x_length": {0: "N"}, "mel": {0: "N", 2: "L"}})
    meta = {"model_type": "matcha-tts", "language": "Chinese+English", "voice": "zh-en", "has_espeak": 1,
            "jieba": 1, "n_speakers": 1, "sample_rate": SAMPLE_RATE, "version": 1, "pad_id": pad_id,
            "use_eos_bos": 0, "num_ode_steps": steps, "model_author": "rkvoice stand-in (random weights)",
            "maintainer": "rkvoice"}
    _set_metadata(path, meta)
    onnx.checker.check_model(str(path))


def build_vocos(seed: int, small: bool):
    import torch
    from vocos.heads import ISTFTHead
    from vocos.models import VocosBackbone

    torch.manual_seed(seed + 1)
    backbone = VocosBackbone(input_channels=N_MELS, dim=256 if small else 512,
                             intermediate_dim=768 if small else 1536, num_layers=4 if small else 8)
    head = ISTFTHead(dim=256 if small else 512, n_fft=N_FFT, hop_length=HOP, padding="center")
    with torch.no_grad():
        head.out.weight.mul_(0.1)  # keep exp(mag) in a sane range
        head.out.bias.zero_()

    class Export(torch.nn.Module):
        """backbone -> head's linear -> (mag, cos, sin): the published graph stops before the ISTFT."""

        def __init__(self) -> None:
            super().__init__()
            self.backbone, self.head = backbone, head

        def forward(self, mels):
            h = self.head.out(self.backbone(mels)).transpose(1, 2)
            mag, p = h.chunk(2, dim=1)
            mag = torch.clip(torch.exp(mag), max=1e2)
            return mag, torch.cos(p), torch.sin(p)

    return Export().eval()


def export_vocos(model, path: Path) -> None:
    import torch

    mels = torch.randn(1, N_MELS, 200)
    with torch.no_grad():
        torch.onnx.export(model, (mels,), str(path), opset_version=14, dynamo=False, input_names=["mels"],
                          output_names=["mag", "x", "y"],
                          dynamic_axes={"mels": {0: "N", 2: "L"}, "mag": {0: "N", 2: "L"},
                                        "x": {0: "N", 2: "L"}, "y": {0: "N", 2: "L"}})
    _set_metadata(path, {"model_type": "vocos", "model_author": "rkvoice stand-in (random weights)",
                         "sample_rate": SAMPLE_RATE, "n_fft": N_FFT, "hop_length": HOP, "win_length": N_FFT,
                         "window_type": "hann", "center": 1, "pad_mode": "reflect", "normalized": 0,
                         "version": 1})


def _set_metadata(path: Path, meta: dict) -> None:
    import onnx

    model = onnx.load(str(path))
    del model.metadata_props[:]
    for k, v in meta.items():
        p = model.metadata_props.add()
        p.key, p.value = k, str(v)
    onnx.save(model, str(path))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3, help="ODE steps baked into the graph (published: 3)")
    ap.add_argument("--frames-per-token", type=float, default=7.0)
    ap.add_argument("--small", action="store_true", help="fewer/narrower layers (same ops) for quick tests")
    ap.add_argument("--tiny", action="store_true",
                    help="--small and a narrow decoder with one mid block (same ops): the many-bucket test")
    args = ap.parse_args(argv)
    _stub_training_imports()
    import torch

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    args.out.mkdir(parents=True, exist_ok=True)
    tokens = zh_en_tokens()
    write_lexicon(args.out, tokens)
    matcha = build_matcha(len(tokens), args.seed, args.frames_per_token, args.small or args.tiny, args.tiny)
    export_matcha(matcha, args.out / f"model-steps-{args.steps}.onnx", args.steps, pad_id=0)
    export_vocos(build_vocos(args.seed, args.small or args.tiny), args.out / "vocos-16khz-univ.onnx")
    info = {"out": str(args.out), "n_vocab": len(tokens), "seed": args.seed, "small": args.small, "tiny": args.tiny,
            "frames_per_token": args.frames_per_token,
            "files": sorted(p.name for p in args.out.iterdir())}
    sys.stdout.write(json.dumps(info, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
