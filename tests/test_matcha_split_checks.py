"""The split Matcha's build checks that depend on weights or on the toolkit's log (no toolkit needed).

- A frame window is chosen from the model's own speaking rate (npu_voice.window_for); one whose
  halvings meet the token count (W in 497..512 for 32 tokens: a voice at ~12.5 frames a token) was
  refused by a check left from the whole-graph rewrite ("gives a decoder length equal to the
  32-token bucket"), so the installer's t32 failed (exit 2) on such weights (stand-in seed 42 at 12
  frames a token: window 512). The split decoder has no token axis: any window is masked alike.
- rknn-toolkit2's error lines are read: a REGTASK overflow or an unknown error line refuses the
  build; "Unkown op target" (printed on every decoder build here) is warned of, last on stderr.
"""

from __future__ import annotations

import sys

import pytest

from rkvoice.config import ROOT

sys.path.insert(0, str(ROOT / "models"))  # the converter's modules are scripts beside each other
import convert_rknn  # noqa: E402
import matcha_graph as mg  # noqa: E402
import matcha_mask  # noqa: E402
import npu_toolkit  # noqa: E402
import npu_voice  # noqa: E402

# Lines as rknn-toolkit2 2.3.2 prints them (colour codes and all), from builds on this machine and
# the Matcha decoder's old [1, 8, 32*W] GroupNorm layout.
UNKNOWN = "\x1b[1;31mE\x1b[0m RKNN: [07:10:45.302] Unkown op target: 0\n"
REGTASK = ("E RKNN: [10:01:02.003] REGTASK: The bit width of field value exceeds the limit, target: NPU, "
           "offset: 0x4038, shift = 16, limit: 0x1fff, value: 0x2cff\n")


@pytest.mark.parametrize("tokens", [4, 16, 24, 32, 48, 64, 96, 140])
def test_every_window_of_a_bucket_is_accepted(tokens):
    """Each multiple of 4 from 2*tokens+4 up to 16 frames a token: the masks cover its halvings."""
    for w in range(2 * tokens + 4, 16 * tokens + 1, 4):
        lengths = matcha_mask._decoder_lengths(mg.Rewrite(tokens=tokens, frames=w))
        assert lengths[:3] == [w, w // 2, w // 4]


def test_the_window_seed_42_chose_for_32_tokens_is_accepted():
    # window_for on stand-in seed 42 (12 frames a token): longest probe 409 frames * 1.25 -> 512
    assert matcha_mask._decoder_lengths(mg.Rewrite(tokens=32, frames=512))[:5] == [512, 256, 128, 64, 32]


def test_toolkit_lines_are_counted_and_judged():
    clean = npu_toolkit.toolkit_errors("I rknn building ...\n" + UNKNOWN * 5 + "I rknn building done.\n")
    assert clean["count"] == 5 and clean["regtask"] == 0 and clean["unknown_op_target"] == 5
    refuse, warn = npu_toolkit.error_verdict(clean)
    assert refuse == [] and warn == ["5 x 'E RKNN: Unkown op target: 0'"]
    bad = npu_toolkit.toolkit_errors(UNKNOWN + REGTASK * 3 + "E build: something else went wrong\n")
    assert bad["count"] == 5 and bad["regtask"] == 3 and bad["regtask_values"] == ["0x2cff"]
    refuse, warn = npu_toolkit.error_verdict(bad)
    assert len(refuse) == 2 and "REGTASK" in refuse[0] and "something else" in refuse[1] and len(warn) == 1
    assert npu_toolkit.error_verdict(None) == ([], [])  # --verify onnx-only: nothing was built


def _report(errors: dict | None) -> dict:
    return {"model": "matcha", "out": "/x/matcha-t32.rknn", "snr_vs_original_db": 133.0, "true_frames_ok": True,
            "verify": "simulator", "snr_db": 66.4, "wave_snr_db": 66.4, "toolkit_errors": errors}


def test_a_regtask_build_is_not_ok_and_said_last_on_stderr(capsys):
    good = _report(npu_toolkit.toolkit_errors(UNKNOWN * 5))
    bad = _report(npu_toolkit.toolkit_errors(UNKNOWN + REGTASK))
    assert npu_voice._matcha_ok(good) and not npu_voice._matcha_ok(bad)  # the simulator's 66 dB does not clear it
    assert good["toolkit_warnings"] and not good["toolkit_refused"] and bad["toolkit_refused"]
    convert_rknn.say_toolkit_lines("matcha", [good, bad])
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("convert_rknn.py matcha: matcha-t32.rknn warning: rknn-toolkit2 printed 5 x")
    assert "REFUSED" in err[1] and "REGTASK" in err[1] and "0x" in err[1]
