"""The turn handle: ids, cancel once with a reason, on_cancel callbacks, fail, finish, wait, raise_if_failed."""

from __future__ import annotations

import logging
import threading

import pytest

from rkvoice.errors import RkvoiceError
from rkvoice.timeline import Ev, Timeline
from rkvoice.turn import Turn
from tests.support import FakeClock


def test_ids_grow_and_a_turn_has_its_own_timeline_unless_given_one() -> None:
    clock = FakeClock()
    tl = Timeline(clock)
    a, b = Turn(tl, text="几点了"), Turn(clock=clock)
    assert b.id > a.id
    assert a.timeline is tl and a.clock is clock and a.text == "几点了"
    assert b.timeline is not tl and b.clock is clock
    assert not a.cancelled and a.reason == "" and a.result is None and a.exception is None
    assert not a.done.is_set() and repr(a) == f"Turn({a.id}, open)"


def test_cancel_runs_each_callback_once_on_the_cancelling_thread_and_marks_the_reason() -> None:
    turn = Turn(Timeline(FakeClock()))
    seen: list[tuple[str, str]] = []
    turn.on_cancel(lambda t: seen.append(("llm", threading.current_thread().name)))
    turn.on_cancel(lambda t: seen.append(("speaker", t.reason)))

    cancelled: list[bool] = []
    worker = threading.Thread(target=lambda: cancelled.append(turn.cancel("barge-in")), name="canceller")
    worker.start()
    worker.join(5)
    assert cancelled == [True]
    assert seen == [("llm", "canceller"), ("speaker", "barge-in")]
    assert turn.cancelled and turn.reason == "barge-in"
    assert not turn.cancel("stop")  # already cancelled: the first reason stays, callbacks do not run again
    assert turn.reason == "barge-in" and len(seen) == 2
    (mark,) = turn.timeline.find(Ev.CANCELLED)
    assert mark.get("reason") == "barge-in" and mark.get("turn") == turn.id
    assert repr(turn) == f"Turn({turn.id}, open, cancelled: barge-in)"


def test_a_callback_registered_after_the_cancel_runs_at_once() -> None:
    turn = Turn()
    turn.cancel("stop")
    seen: list[str] = []
    turn.on_cancel(lambda t: seen.append(t.reason))
    assert seen == ["stop"]


def test_an_empty_reason_still_cancels() -> None:
    turn = Turn()
    assert turn.cancel("")
    assert turn.cancelled and turn.reason == "cancelled"


def test_a_failing_callback_does_not_keep_the_other_stages_running(caplog: pytest.LogCaptureFixture) -> None:
    turn = Turn()
    stopped: list[str] = []

    def broken(_turn: Turn) -> None:
        raise RuntimeError("player gone")

    turn.on_cancel(broken)
    turn.on_cancel(lambda t: stopped.append("speaker"))
    with caplog.at_level(logging.ERROR, logger="rkvoice.turn"):
        assert turn.cancel("shutdown")
    assert stopped == ["speaker"]
    assert any("cancel callback failed" in r.getMessage() for r in caplog.records)


def test_fail_keeps_the_first_error_and_cancels_with_reason_error() -> None:
    turn = Turn()
    stopped: list[str] = []
    turn.on_cancel(lambda t: stopped.append(t.reason))
    first = RkvoiceError("tts", "synthesis-failed", "the voice failed")
    turn.fail(first)
    turn.fail(RuntimeError("later"))
    assert turn.exception is first and turn.reason == "error" and stopped == ["error"]
    with pytest.raises(RkvoiceError, match="the voice failed"):
        turn.raise_if_failed()


def test_finish_ends_the_turn_once_and_keeps_the_first_result() -> None:
    turn = Turn()
    late: list[str] = []
    turn.on_cancel(lambda t: late.append(t.reason))
    turn.finish("好的。")
    turn.finish("another")
    assert turn.done.is_set() and turn.result == "好的。"
    assert not turn.cancel("barge-in")  # a finished turn cannot be cancelled any more
    assert not turn.cancelled and late == []
    turn.raise_if_failed()  # finished without an error: nothing raised
    assert repr(turn) == f"Turn({turn.id}, done)"


def test_a_cancelled_turn_is_not_done_until_finished() -> None:
    turn = Turn()
    turn.cancel("barge-in")
    assert not turn.done.is_set()
    turn.finish()
    assert turn.done.is_set() and turn.result is None and turn.cancelled
