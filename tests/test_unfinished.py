"""The words' second opinion on the end of a turn (rkvoice.text.unfinished): a transcript that stops on
a word needing more is unfinished; whole requests, including ones that end on words that often lead
(的, 有哪些, 这个, a bare verb after its object, a coverb phrase with its verb), are not."""

from __future__ import annotations

import pytest

from rkvoice.text.unfinished import unfinished

UNFINISHED = {
    # coverbs and conjunctions with nothing after them
    "帮我把": "把", "把窗帘和": "和", "从": "从", "你往": "往", "开灯或者": "或者",
    "先关灯然后": "然后", "是开灯还是": "还是", "因为": "因为",
    # a verb without its target
    "空调调到": "调到", "把音量设成": "设成", "亮度改为": "改为", "闹钟定在": "定在", "把温度降到": "降到",
    # a numeral and measure word without their noun
    "帮我设一个": "一个", "给我讲两个": "两个", "来三杯": "三杯", "订一张": "一张",
    # only the opening of a request
    "那个": "那个", "嗯": "嗯", "那个就是": "就是", "我想问一下": "问一下", "帮我查一下": "查一下",
    "明天早上": "明天早上", "星期五晚上": "星期五晚上", "帮我打开": "帮我打开", "请播放": "请播放",
    "提醒我": "提醒我", "把亮度调到百分之": "百分之",
    # a reminder with its time but not what it is about
    "提醒我下午三点": "提醒我下午三点", "明天提醒我早上八点": "明天提醒我早上八点", "提醒我在周五": "提醒我在周五",
    # a coverb phrase with no verb after it
    "把卧室的灯": "把卧室的灯", "用微信": "用微信", "帮我把它": "把它", "你从北京": "从北京",
}
WHOLE = [
    "现在几点", "今天几号", "明天早上七点叫我起床", "帮我设一个十分钟的计时器", "提醒我下午三点开会",
    "帮我把客厅灯打开", "空调调到二十六度", "把卧室的灯关掉", "卧室的灯关掉", "打开客厅的空调", "关掉所有的灯",
    "我想问一下长城有多长", "给我讲一个关于月亮的故事", "为什么天空是蓝色的", "天空为什么是蓝色的",
    "北京好玩的地方有哪些", "这个怎么用", "我要这个", "找不到", "好的", "对", "停", "你好", "讲个笑话",
    "声音小一点", "明天呢", "把亮度调到百分之五十", "用Python写一个排序", "播放Taylor Swift的歌",
    "今天天气怎么样。", "打开灯，",
    "把这个给我", "用什么", "用微信付款", "从北京到上海", "把空调打开吧", "在吗", "我和你一样", "把门关上",
    "提醒我下午三点开会", "下午三点提醒我开会", "提醒我明天带伞", "叫我明天早上七点起床",
]


@pytest.mark.parametrize("text", list(UNFINISHED))
def test_a_transcript_that_stops_on_a_word_needing_more_is_unfinished(text):
    assert unfinished(text) == UNFINISHED[text]


@pytest.mark.parametrize("text", WHOLE)
def test_a_whole_request_is_not(text):
    assert unfinished(text) is None


def test_the_asr_s_punctuation_and_spaces_are_not_words():
    assert unfinished("帮我把，") == "把" and unfinished("空调 调到 。") == "调到"


def test_no_words_at_all_is_unfinished():
    assert unfinished("") == "" and unfinished("，。 ") == ""
