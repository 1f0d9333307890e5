"""The LLM prompt's layout: stable system prompt, time in the newest question, history as sent."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from rkvoice.answer.conversation import TIME_NOTE, Conversation, spoken_now
from rkvoice.config import Config, HearConfig, LlmConfig

NOW = datetime(2026, 10, 21, 22, 5)


class Clock:
    def __init__(self) -> None:
        self.t = NOW

    def __call__(self) -> datetime:
        return self.t


def _cfg(**llm: object) -> Config:
    return Config(llm=dataclasses.replace(LlmConfig(), **llm))


def test_the_assistant_calls_itself_by_its_wake_phrase() -> None:
    cfg = dataclasses.replace(_cfg(), hear=dataclasses.replace(HearConfig(), wake_phrase="你好小白"))
    prompt = Conversation(cfg, Clock()).system_prompt()
    assert prompt.startswith("你是小白，") and "小智" not in prompt


def test_spoken_now() -> None:
    assert spoken_now(NOW) == "二零二六年十月二十一日，星期三，晚上十点零五分"


def test_time_opens_the_newest_question_and_the_system_prompt_never_changes() -> None:
    clock = Clock()
    conv = Conversation(_cfg(), clock)
    first = conv.messages("今天适合出门吗？")
    system = LlmConfig().system_prompt.replace("{name}", "小智") + TIME_NOTE
    assert first[0] == {"role": "system", "content": system} and system.startswith("你是小智，")
    assert first[-1] == {"role": "user", "content": f"[{spoken_now(NOW)}] 今天适合出门吗？"}
    clock.t = NOW + timedelta(days=1, minutes=7)
    assert conv.messages("x")[0] == first[0]  # a day later: same system prompt, same cached tokens
    assert conv.messages("x")[-1]["content"].startswith("[二零二六年十月二十二日，星期四，晚上十点十二分] ")


def test_history_keeps_questions_as_sent_so_the_next_prompt_extends_the_last() -> None:
    clock = Clock()
    conv = Conversation(_cfg(), clock)
    first = conv.messages("你好")
    clock.t = NOW + timedelta(minutes=3)  # the answer took long enough for the minute to change
    conv.remember("你好", "你好，有什么事？")
    second = conv.messages("讲个笑话")
    assert second[: len(first)] == first  # the first prompt is a prefix of the second
    assert second[len(first)] == {"role": "assistant", "content": "你好，有什么事？"}
    assert second[-1]["content"] == f"[{spoken_now(clock.t)}] 讲个笑话"


def _talk(conv: Conversation, turns: int) -> list[list[dict[str, str]]]:
    prompts = []
    for i in range(turns):
        prompts.append(conv.messages(f"问{i}"))
        conv.remember(f"问{i}", f"答{i}")
    return prompts


def test_history_is_bounded_and_skips_empty_answers() -> None:
    conv = Conversation(_cfg(history_turns=4), Clock())
    _talk(conv, 4)
    conv.messages("空")
    conv.remember("空", "  ")
    msgs = conv.messages("新问题")
    t = f"[{spoken_now(NOW)}] "
    assert [m["role"] for m in msgs] == ["system", *["user", "assistant"] * 4, "user"]
    assert [m["content"] for m in msgs[1:5]] == [t + "问0", "答0", t + "问1", "答1"]
    conv.remember("新问题", "答")  # a fifth pair: the older half goes at once
    assert [q for q, _ in conv.history] == [t + "问3", t + "新问题"]
    conv.history.clear()
    assert len(conv.messages("x")) == 2
    assert len(Conversation(_cfg(history_turns=0), Clock()).history) == 0


def test_remember_without_messages_stamps_the_question_now() -> None:
    conv = Conversation(_cfg(), Clock())
    conv.messages("甲")
    conv.remember("乙", "答")  # not the question messages() built last
    assert conv.history[-1] == (f"[{spoken_now(NOW)}] 乙", "答")


def test_a_custom_prompt_with_now_keeps_the_time_there() -> None:
    conv = Conversation(_cfg(system_prompt="你是助手。现在是{now}。"), Clock())
    msgs = conv.messages("几点了")
    assert msgs[0]["content"] == f"你是助手。现在是{spoken_now(NOW)}。"
    assert msgs[-1]["content"] == "几点了"


def test_a_full_history_breaks_the_cached_prefix_one_turn_in_three_not_every_turn() -> None:
    conv = Conversation(_cfg(history_turns=4), Clock())
    prompts = _talk(conv, 14)
    kept = [later[: len(earlier)] == earlier for earlier, later in zip(prompts, prompts[1:])]
    assert all(len(p) <= 2 + 2 * 4 for p in prompts)
    assert kept[:4] == [True] * 4  # filling up: every turn extends the last
    assert kept[4:] == [False, True, True] * 3  # then one re-evaluation per three turns
    one = _talk(Conversation(_cfg(history_turns=1), Clock()), 3)
    assert [len(p) for p in one] == [2, 4, 4]
