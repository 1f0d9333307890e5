#!/usr/bin/env python3
"""A stand-in for vits-zh-aishell3 in its layout, from the installed Piper voice's real VITS network.

The board's ``--tts vits`` fallback is sherpa-onnx VITS with vits-zh-aishell3: a multi-speaker
network (inputs x, x_length, noise_scale, length_scale, noise_scale_w, sid), a Chinese lexicon and
tokens file read by sherpa-onnx's own lexicon frontend, and rule FSTs that rewrite the text first.
That download only happens on a board, so this script builds the same configuration around the
portable install's Piper voice (models/portable/piper-joe/model.onnx, 22.05 kHz):

- ``vits-aishell3.onnx``: the Piper graph with the aishell3 input names (``scales`` rebuilt from
  the three scale inputs), a ``sid`` input that scales the output by 1/(1+sid) (so a speaker id
  is visibly used), and aishell3-style metadata (``n_speakers``, ``language: Chinese``, a comment
  that is neither piper nor icefall, so sherpa-onnx picks its lexicon frontend);
- ``lexicon.txt``: every character of the common CJK block -> its pinyin (tone digit included)
  spelled in the Piper voice's phoneme tokens; ``tokens.txt``: the voice's own tokens;
- ``number.fst`` (digits -> 零..九), ``phone.fst``, ``date.fst``, ``new_heteronym.fst`` (identity):
  byte-level rewrite FSTs as sherpa-onnx's kaldifst TextNormalizer reads them.

The speech is meaningless (an English voice reading pinyin letters); the plumbing is the board's.
Runs in py312/ (onnx, kaldifst, pypinyin):

    py312/bin/python models/standins/make_aishell3.py --piper models/portable/piper-joe --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DIGITS = "零一二三四五六七八九"
N_SPEAKERS = 4
RULE_FSTS = ("phone.fst", "date.fst", "number.fst", "new_heteronym.fst")
LETTER_FIX = {"g": "ɡ"}  # Piper's phoneme set spells g as the IPA letter


def read_tokens(path: Path) -> dict[str, int]:
    table = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() or line.startswith(" "):
            token, _, ident = line.rpartition(" ")
            table[token] = int(ident)
    return table


def lexicon_lines(tokens: dict[str, int]) -> list[str]:
    """``字 p i n 1``: each character's TONE3 pinyin, one Piper token per letter or digit."""
    from pypinyin import Style, pinyin

    chars = [chr(c) for c in range(0x4E00, 0x9FA6)]
    lines = []
    for ch, (syl,) in zip(chars, pinyin("".join(chars), style=Style.TONE3, neutral_tone_with_five=True, errors=lambda x: [[""]] * len(x))):
        phones = [LETTER_FIX.get(c, c) for c in syl]
        if phones and all(p in tokens for p in phones):
            lines.append(f"{ch} {' '.join(phones)}")
    return lines


def wrap_graph(src: Path, dst: Path, sample_rate: int) -> None:
    """Piper's (input, input_lengths, scales) -> aishell3's (x, x_length, noise_scale, length_scale,
    noise_scale_w, sid); output multiplied by 1/(1+sid)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(src))
    g = model.graph
    taken = {t.name for t in g.initializer} | {o for node in g.node for o in node.output}
    renames = {"input": "x", "input_lengths": "x_length"}
    for name in ("x", "x_length", "noise_scale", "length_scale", "noise_scale_w", "sid"):
        if name in taken:  # the voice's own tensor of that name (Piper has a constant "sid") steps aside
            renames[name] = f"piper_{name}"
    for t in g.initializer:
        t.name = renames.get(t.name, t.name)
    for node in g.node:
        node.output[:] = [renames.get(n, n) for n in node.output]
    for node in g.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
    out_name = g.output[0].name
    for node in g.node:
        node.output[:] = [f"{out_name}_voice" if n == out_name else n for n in node.output]
    old_inputs = {i.name: i for i in g.input}
    x = old_inputs["input"]
    x.name = "x"
    lengths = old_inputs["input_lengths"]
    lengths.name = "x_length"
    scalars = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1])
               for n in ("noise_scale", "length_scale", "noise_scale_w")]
    sid = helper.make_tensor_value_info("sid", TensorProto.INT64, [1])
    del g.input[:]
    g.input.extend([x, lengths, *scalars, sid])
    one = helper.make_tensor("rk_one", TensorProto.FLOAT, [1], [1.0])
    g.initializer.append(one)
    voice = list(g.node)
    del g.node[:]
    g.node.extend([  # nodes stay topologically sorted: the new inputs first, the gain last
        helper.make_node("Concat", ["noise_scale", "length_scale", "noise_scale_w"], ["scales"], axis=0),
        helper.make_node("Cast", ["sid"], ["rk_sid_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["rk_sid_f", "rk_one"], ["rk_sid_1"]),
        helper.make_node("Div", ["rk_one", "rk_sid_1"], ["rk_gain"]),
        *voice,
        helper.make_node("Mul", [f"{out_name}_voice", "rk_gain"], [out_name]),
    ])
    del model.metadata_props[:]
    meta = {"model_type": "vits", "comment": "aishell3 stand-in (Piper network)", "language": "Chinese",
            "add_blank": "1", "n_speakers": str(N_SPEAKERS), "sample_rate": str(sample_rate),
            "punctuation": "; : , . ! ? ， 。 ！ ？ ； ：", "version": "1"}
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))


def rule_fst(path: Path, rewrite_digits: bool) -> None:
    """A byte-level rewrite FST (one state): every byte maps to itself, and with rewrite_digits
    the ASCII digits 0-9 map to the UTF-8 bytes of 零..九."""
    import kaldifst

    arcs, state = [], 1
    for b in range(1, 256):
        if not (rewrite_digits and 48 <= b <= 57):
            arcs.append(f"0 0 {b} {b}")
    if rewrite_digits:
        for d, zh in enumerate(DIGITS):
            out = zh.encode("utf-8")
            prev = 0
            for i, byte in enumerate(out):
                nxt = 0 if i == len(out) - 1 else state
                arcs.append(f"{prev} {nxt} {48 + d if i == 0 else 0} {byte}")
                if nxt:
                    prev, state = nxt, state + 1
    kaldifst.compile("\n".join(arcs + ["0"]), acceptor=False).write(str(path))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--piper", type=Path, required=True, help="folder with the Piper voice's model.onnx and tokens.txt")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    src = args.piper / "model.onnx"
    if not src.is_file():
        print(f"make_aishell3: {src} is missing (run ./install.sh for the portable Piper voice)", file=sys.stderr)
        return 1
    from rkvoice.tts.vits import read_onnx_metadata

    rate = int(read_onnx_metadata(src).get("sample_rate", "22050"))
    args.out.mkdir(parents=True, exist_ok=True)
    tokens = read_tokens(args.piper / "tokens.txt")
    (args.out / "tokens.txt").write_bytes((args.piper / "tokens.txt").read_bytes())
    lexicon = lexicon_lines(tokens)
    (args.out / "lexicon.txt").write_text("\n".join(lexicon) + "\n", encoding="utf-8")
    wrap_graph(src, args.out / "vits-aishell3.onnx", rate)
    for name in RULE_FSTS:
        rule_fst(args.out / name, rewrite_digits=name == "number.fst")
    print(json.dumps({"out": str(args.out), "lexicon_entries": len(lexicon), "n_speakers": N_SPEAKERS,
                      "sample_rate": rate}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
