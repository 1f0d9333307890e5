#!/usr/bin/env python3
"""Build the board-hearing stand-ins: random-weight models with the real architectures and I/O.

The board hears through sherpa-onnx with two published models that only download on a board: a
streaming zipformer2 transducer keyword spotter and an offline Paraformer. This script builds
small models of the same architectures from the real model code on PyPI (``zipformer`` 0.1.3:
icefall's streaming zipformer2 and its ONNX export; ``funasr`` 1.4.16: Paraformer and its ONNX
export), with random weights from fixed seeds, the published input/output names and the
metadata sherpa-onnx reads, int8-quantised like the published files. Four model folders:

- ``kws/``: random-weight keyword spotter (encoder, decoder, joiner, ppinyin tokens.txt).
- ``kws-wake/``: the same network with its encoder projection zeroed and its joiner solved so
  that, whatever it hears, it emits the wake phrase's tokens (``--phrase``). The decoder sees two
  tokens of context, so the phrase must not repeat a token pair (你好小智 works, 小智小智 cannot).
- ``paraformer/``: random-weight Paraformer (``speech``, ``speech_lengths`` -> ``logits``,
  ``token_num``) with a tokens.txt holding ``</s>``.
- ``paraformer-rigged/``: the same network whose predictor fires exactly once per utterance and
  whose decoder always emits one known token (``--token``).

Runs in its own venv (torch; see models/standins/requirements.txt), not in py312/:

    /tmp/rkvoice-standins-venv/bin/python models/standins/make_hearing.py --out DIR

and writes ``standins.json`` (what was built, with every file's sha256). The tests use the build
that models/standins/hearing_cache.py makes once per version of this script (.cache/standins/).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import types
from pathlib import Path

import numpy as np

log = logging.getLogger("make_hearing")

SEED = 20261130
PHRASE = "你好小智"
TOKEN = "几点"
CHUNK, LEFT = 16, 64  # streaming chunk and left context (encoder frames), as the published KWS
SUFFIX = f"standin-chunk-{CHUNK}-left-{LEFT}"
LFR_M, LFR_N, FEAT_DIM = 7, 6, 80


def _training_only(name: str, attrs: list[str]) -> None:
    """zipformer imports torchaudio and atdataset at package level for training and file decoding;
    building and exporting a model never calls them, so they are registered as empty modules
    whose functions refuse to run instead of installing torchaudio (no matching CPU wheel here)."""

    def refuse(*_a: object, **_k: object) -> None:
        raise RuntimeError(f"{name} is a training-only import of the model code")

    mod = types.ModuleType(name)
    for attr in attrs:
        setattr(mod, attr, refuse)
    sys.modules.setdefault(name, mod)


def legacy_onnx_export() -> None:
    """torch 2.13's torch.onnx.export defaults to the dynamo exporter (needs onnxscript); the model
    packages' export code was written for the TorchScript exporter, which stays available."""
    import functools

    import torch

    if not getattr(torch.onnx.export, "_rkvoice_legacy", False):
        patched = functools.partial(torch.onnx.export, dynamo=False)
        patched._rkvoice_legacy = True  # type: ignore[attr-defined]
        torch.onnx.export = patched


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_tokens(path: Path, tokens: list[str]) -> None:
    path.write_text("".join(f"{t} {i}\n" for i, t in enumerate(tokens)), encoding="utf-8")


# --- keyword spotter ---------------------------------------------------------------------------


def ppinyin(text: str) -> list[str]:
    """Partial pinyin as sherpa-onnx's text2token(tokens_type="ppinyin"): initial + toned final."""
    from pypinyin import Style, pinyin

    initials = pinyin(text, style=Style.INITIALS, strict=False, errors="ignore")
    finals = pinyin(text, style=Style.FINALS_TONE, strict=False, errors="ignore")
    out: list[str] = []
    for (ini,), (fin,) in zip(initials, finals):
        out += [t for t in (ini, fin) if t]
    return out


def kws_tokens() -> list[str]:
    """<blk>, <sos/eos>, <unk>, then every ppinyin token of the common CJK block, sorted."""
    from pypinyin import Style, pinyin

    chars = "".join(chr(c) for c in range(0x4E00, 0x9FA6))
    seen: set[str] = set()
    for style in (Style.INITIALS, Style.FINALS_TONE):
        for (tok,) in pinyin(chars, style=style, strict=False, errors="ignore"):
            if tok:
                seen.add(tok)
    return ["<blk>", "<sos/eos>", "<unk>"] + sorted(seen)


def build_kws(vocab_size: int):
    import torch

    _training_only("torchaudio", [])
    _training_only("atdataset", ["SpecAugment", "time_warp", "fix_random_seed", "ATDataloader", "Fbank"])
    from zipformer.modules.model import AsrModel

    torch.manual_seed(SEED)
    stacks = 6
    def rep(v: int) -> str:
        return ",".join([str(v)] * stacks)

    model = AsrModel(
        feature_dim=FEAT_DIM, downsampling_factor="1,2,4,8,4,2", encoder_dim=rep(64),
        num_encoder_layers=rep(1), encoder_unmasked_dim=rep(64), query_head_dim=rep(16),
        pos_head_dim=rep(4), value_head_dim=rep(8), num_heads=rep(2), feedforward_dim=rep(96),
        cnn_module_kernel=rep(15), pos_dim=16, causal=True, chunk_size=str(CHUNK),
        left_context_frames=str(LEFT), use_ctc=False, blank_id=0, vocab_size=vocab_size,
        use_transducer=True, decoder_dim=64, context_size=2, joiner_dim=64,
    )
    model.eval()
    return model


def export_kws(model, out: Path) -> dict[str, Path]:
    """encoder/decoder/joiner ONNX with the streaming metadata, encoder and joiner also int8."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from zipformer.bin import export as zexport
    from zipformer.modules.model import (
        OnnxDecoderWrapper,
        OnnxJoinerWrapper,
        OnnxStreamingEncoderWrapper,
    )

    out.mkdir(parents=True, exist_ok=True)
    encoder = OnnxStreamingEncoderWrapper(model.encoder, model.encoder_embed, model.joiner.encoder_proj)
    decoder = OnnxDecoderWrapper(model.decoder, model.joiner.decoder_proj)
    joiner = OnnxJoinerWrapper(model.joiner.output_linear)
    tmp = {name: out / f"{name}-{SUFFIX}.fp32.onnx" for name in ("encoder", "decoder", "joiner")}
    with torch.no_grad():
        meta = zexport.get_streaming_meta_data(encoder, "streaming zipformer2 (rkvoice stand-in, random weights)")
        zexport.export_streaming_encoder_onnx(
            encoder, str(tmp["encoder"]), feature_dim=FEAT_DIM, dynamic_batch=True,
            use_external_data=False, output_name="encoder_out", meta_data=meta, opset_version=13,
        )
        zexport._export_decoder_model_onnx(decoder, tmp["decoder"], opset_version=13)
        zexport._export_joiner_model_onnx(joiner, tmp["joiner"], opset_version=13)
    files = {
        "encoder": out / f"encoder-{SUFFIX}.int8.onnx",
        "decoder": out / f"decoder-{SUFFIX}.onnx",
        "joiner": out / f"joiner-{SUFFIX}.int8.onnx",
    }
    for name in ("encoder", "joiner"):  # like the published files: the decoder stays fp32
        quantize_dynamic(tmp[name], files[name], op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
        tmp[name].unlink()
    tmp["decoder"].replace(files["decoder"])
    return files


def rig_kws(model, tokens: list[str], phrase: str, margin: float = 40.0) -> list[int]:
    """Make the joiner emit the phrase's tokens one after another, whatever the audio.

    The encoder projection is zeroed, so the joiner sees only the decoder's output for the last
    two tokens; its output layer is then solved (least squares) so that each context's argmax is
    the phrase's next token, by ``margin`` logits, and blank after the phrase's last pair.
    """
    import torch

    ids = {t: i for i, t in enumerate(tokens)}
    want = ppinyin(phrase)
    missing = [t for t in want if t not in ids]
    if missing:
        raise SystemExit(f"phrase {phrase!r}: tokens {missing} are not in tokens.txt")
    seq = [ids[t] for t in want]
    blank = 0
    contexts: dict[tuple[int, int], int] = {(-1, blank): seq[0], (blank, blank): seq[0], (-1, -1): seq[0]}
    history = [blank, seq[0]]
    for nxt in seq[1:] + [blank]:
        key = (history[-2], history[-1])
        if key in contexts and contexts[key] != nxt:
            raise SystemExit(
                f"phrase {phrase!r} repeats the token pair {tokens[key[0]]} {tokens[key[1]]}: the decoder's two "
                "tokens of context cannot tell the repeats apart; choose a phrase without one (e.g. 你好小智)"
            )
        contexts[key] = nxt
        history.append(nxt)
    with torch.no_grad():
        proj = model.joiner.encoder_proj
        for p in proj.parameters():
            p.zero_()
        y = torch.tensor(list(contexts), dtype=torch.int64)
        dec = model.joiner.decoder_proj(model.decoder(y, need_pad=False).squeeze(1))
        h = torch.tanh(dec).double()  # (contexts, joiner_dim)
        target = torch.full((len(contexts), len(tokens)), -margin, dtype=torch.float64)
        for row, nxt in enumerate(contexts.values()):
            target[row, nxt] = margin
        weight = torch.linalg.lstsq(h, target).solution.T  # (vocab, joiner_dim)
        got = (h @ weight.T).argmax(dim=1).tolist()
        if got != list(contexts.values()):
            raise SystemExit("could not solve the joiner for the phrase (contexts not separable)")
        lin = model.joiner.output_linear
        lin.weight.copy_(weight.float())
        lin.bias.zero_()
    return seq


# --- Paraformer ------------------------------------------------------------------------------


def para_tokens(token: str) -> list[str]:
    """<blank>, <s>, </s>, the rigged token, 400 common characters, <unk>."""
    chars = [chr(c) for c in range(0x4E00, 0x4E00 + 400)]
    return ["<blank>", "<s>", "</s>", token] + [c for c in chars if c != token] + ["<unk>"]


def build_paraformer(vocab_size: int, tail_threshold: float = 0.45):
    import importlib

    import torch
    from funasr.models.paraformer.model import Paraformer

    for name in ("funasr.models.sanm.encoder", "funasr.models.paraformer.cif_predictor",
                 "funasr.models.paraformer.decoder"):
        importlib.import_module(name)  # registers the classes Paraformer builds by name

    torch.manual_seed(SEED + 1)
    model = Paraformer(
        encoder="SANMEncoder",
        encoder_conf={"output_size": 64, "attention_heads": 2, "linear_units": 128, "num_blocks": 2,
                      "dropout_rate": 0.0, "positional_dropout_rate": 0.0, "attention_dropout_rate": 0.0,
                      "input_layer": "pe", "pos_enc_class": "SinusoidalPositionEncoder", "normalize_before": True,
                      "kernel_size": 11, "sanm_shfit": 0, "selfattention_layer_type": "sanm"},
        decoder="ParaformerSANMDecoder",
        decoder_conf={"attention_heads": 2, "linear_units": 128, "num_blocks": 2, "dropout_rate": 0.0,
                      "positional_dropout_rate": 0.0, "self_attention_dropout_rate": 0.0,
                      "src_attention_dropout_rate": 0.0, "att_layer_num": 2, "kernel_size": 11, "sanm_shfit": 0},
        predictor="CifPredictorV2",
        predictor_conf={"idim": 64, "threshold": 1.0, "l_order": 1, "r_order": 1, "tail_threshold": tail_threshold},
        input_size=FEAT_DIM * LFR_M,
        vocab_size=vocab_size,
        sos=1, eos=2,
    )
    model.eval()
    return model


def rig_paraformer(model, token_id: int, margin: float = 40.0) -> None:
    """One fire per utterance (alphas ~0, tail 1.0 -> token_num 1) and always ``token_id``."""
    import torch

    with torch.no_grad():
        model.predictor.cif_output.weight.zero_()
        model.predictor.cif_output.bias.fill_(-30.0)
        model.predictor.tail_threshold = 1.0
        out = model.decoder.output_layer
        out.weight.zero_()
        out.bias.fill_(-margin)
        out.bias[token_id] = margin


def export_paraformer(model, tokens: list[str], out: Path) -> dict[str, Path]:
    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out.mkdir(parents=True, exist_ok=True)
    exported = model.export(type="onnx", encoder="SANMEncoder", predictor="CifPredictorV2",
                            decoder="ParaformerSANMDecoder", max_seq_len=512, device="cpu")
    fp32 = out / "model.fp32.onnx"
    with torch.no_grad():
        torch.onnx.export(
            exported, exported.export_dummy_inputs(), str(fp32), opset_version=14,
            input_names=exported.export_input_names(), output_names=exported.export_output_names(),
            dynamic_axes=exported.export_dynamic_axes(),
        )
    rng = np.random.default_rng(SEED + 2)  # CMVN like a real am.mvn: log-mel means ~ -8..-14, stddev ~3-5
    neg_mean = -rng.uniform(8.0, 14.0, FEAT_DIM)
    inv_std = 1.0 / rng.uniform(3.0, 5.0, FEAT_DIM)
    meta = {
        "model_type": "paraformer",
        "version": "1",
        "model_author": "rkvoice stand-in (random weights, funasr Paraformer)",
        "vocab_size": str(len(tokens)),
        "lfr_window_size": str(LFR_M),
        "lfr_window_shift": str(LFR_N),
        "neg_mean": ",".join(f"{v:.6f}" for v in np.tile(neg_mean, LFR_M)),
        "inv_stddev": ",".join(f"{v:.6f}" for v in np.tile(inv_std, LFR_M)),
    }
    proto = onnx.load(str(fp32))
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(fp32))
    model_path = out / "model.int8.onnx"
    quantize_dynamic(fp32, model_path, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
    fp32.unlink()
    tokens_path = out / "tokens.txt"
    write_tokens(tokens_path, tokens)
    return {"model": model_path, "tokens": tokens_path}


# --- self-checks with onnxruntime (what sherpa-onnx will feed) --------------------------------


def check_rigged_kws(files: dict[str, Path], seq: list[int]) -> None:
    """Greedy decode of the rigged decoder+joiner: the phrase's tokens, then blank."""
    import onnxruntime as ort

    dec = ort.InferenceSession(str(files["decoder"]))
    join = ort.InferenceSession(str(files["joiner"]))
    enc_out = np.zeros((1, 64), np.float32)
    ctx, got = [-1, 0], []
    for _ in range(len(seq) + 2):
        d = dec.run(None, {"y": np.array([ctx[-2:]], np.int64)})[0]
        k = int(join.run(None, {"encoder_out": enc_out, "decoder_out": d})[0].argmax())
        if k == 0:
            break
        got.append(k)
        ctx.append(k)
    if got != seq:
        raise SystemExit(f"rigged joiner decodes {got}, wanted {seq}")


def check_rigged_paraformer(path: Path, token_id: int) -> None:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path))
    for frames in (3, 40):
        speech = np.random.default_rng(frames).standard_normal((1, frames, FEAT_DIM * LFR_M)).astype(np.float32)
        logits, num = sess.run(None, {"speech": speech, "speech_lengths": np.array([frames], np.int32)})
        if int(num[0]) != 1 or int(logits[0, 0].argmax()) != token_id:
            raise SystemExit(f"rigged Paraformer: token_num {num} argmax {logits[0, 0].argmax()} (want 1, {token_id})")


# --- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--phrase", default=PHRASE, help="wake phrase the rigged keyword spotter emits")
    ap.add_argument("--token", default=TOKEN, help="token the rigged Paraformer emits")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(1)
    legacy_onnx_export()
    out: Path = args.out
    built: dict[str, dict[str, Path]] = {}

    ktoks = kws_tokens()
    model = build_kws(len(ktoks))
    built["kws"] = export_kws(model, out / "kws")
    seq = rig_kws(model, ktoks, args.phrase)
    built["kws-wake"] = export_kws(model, out / "kws-wake")
    check_rigged_kws(built["kws-wake"], seq)
    for name in ("kws", "kws-wake"):
        write_tokens(out / name / "tokens.txt", ktoks)
        built[name]["tokens"] = out / name / "tokens.txt"

    ptoks = para_tokens(args.token)
    built["paraformer"] = export_paraformer(build_paraformer(len(ptoks)), ptoks, out / "paraformer")
    rigged = build_paraformer(len(ptoks))
    rig_paraformer(rigged, ptoks.index(args.token))
    built["paraformer-rigged"] = export_paraformer(rigged, ptoks, out / "paraformer-rigged")
    check_rigged_paraformer(built["paraformer-rigged"]["model"], ptoks.index(args.token))

    summary = {
        "seed": SEED,
        "phrase": args.phrase,
        "phrase_tokens": ppinyin(args.phrase),
        "token": args.token,
        "made_with": {"torch": torch.__version__, "zipformer": "0.1.3", "funasr": "1.4.16"},
        "files": {
            f"{name}/{p.name}": {"bytes": p.stat().st_size, "sha256": sha256(p)}
            for name, files in built.items() for p in files.values()
        },
    }
    (out / "standins.json").write_text(json.dumps(summary, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    total = sum(f["bytes"] for f in summary["files"].values())
    print(json.dumps({"out": str(out), "files": len(summary["files"]), "bytes": total}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
