"""The words' opinions on the end of a turn (rkvoice.text.unfinished): a transcript that stops on a word
needing more is unfinished; whole requests, including ones that end on words that often lead (的,
有哪些, 这个, a bare verb after its object, a coverb phrase with its verb), are not. A question its
last word closes is finished; a noun phrase alone is one, and names a topic (it opens more) unless it
ends on what the assistant reports on (a terse whole request)."""

from __future__ import annotations

import pytest

from rkvoice.text.unfinished import bare_noun_phrase, finished, topic, unfinished

UNFINISHED = {
    # coverbs and conjunctions with nothing after them
    "帮我把": "把", "把窗帘和": "和", "从": "从", "你往": "往", "开灯或者": "或者",
    "先关灯然后": "然后", "是开灯还是": "还是", "因为": "因为",
    # a verb without its target
    "空调调到": "调到", "把音量设成": "设成", "亮度改为": "改为", "闹钟定在": "定在", "把温度降到": "降到",
    # a numeral and measure word without their noun
    "帮我设一个": "一个", "给我讲两个": "两个", "来三杯": "三杯", "订一张": "一张",
    # only the opening of a request
    "那个": "那个", "嗯": "嗯", "那个就是": "就是", "你知道吗": "你知道吗", "嗯你说": "嗯你说", "我想问一下": "问一下", "帮我查一下": "查一下",
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


FINISHED = {
    "明天会下雨吗": "吗", "你在吗？": "吗", "那个就是后天会下雪吗?": "吗", "我的钥匙呢": "呢", "那明天呢": "呢",
    "今天几号": "几号", "后天星期几": "星期几", "现在几点。": "几点", "这件衣服多少钱": "多少钱",
    "珠穆朗玛峰有多高": "多高", "从这里到机场要多久": "多久", "手机没电了怎么办": "怎么办",
    "明天天气怎么样": "怎么样", "我们去公园好不好": "好不好",
}
NOT_FINISHED = [
    "几点", "多少钱", "为什么", "北京有哪些", "帮我把", "那个", "你能不能", "空调调到", "打开客厅灯", "我的手机",
    "帮我问一下明天会不会", "明天早上", "你知道吗",
]


@pytest.mark.parametrize("text", list(FINISHED))
def test_a_question_closed_by_its_last_word_is_finished(text):
    assert finished(text) == FINISHED[text]


@pytest.mark.parametrize("text", NOT_FINISHED)
def test_a_bare_question_word_an_opening_or_a_statement_is_not(text):
    assert finished(text) is None


@pytest.mark.parametrize("text", ["我的iPhone", "我的 iPhone。", "拜登", "客厅的灯", "上海天气", "他的电脑", "Spotify",
                                  "两杯咖啡", "我的台 phone", "一歌"])
def test_a_noun_phrase_alone_is_one(text):
    assert bare_noun_phrase(text)


@pytest.mark.parametrize("text", ["打开客厅的灯", "我的手机呢", "我的手机坏了", "什么天气", "今天几号", "好的", "对",
                                  "十五分钟", "七点", "下午三点", ""])
def test_a_verb_a_question_a_number_or_a_time_is_no_bare_noun_phrase(text):
    assert bare_noun_phrase(text) is None


@pytest.mark.parametrize("text", ["我的iPhone", "客厅的灯", "宇宙拜登", "两杯咖啡", "我的台 phone。", "北京"])
def test_a_noun_phrase_about_nothing_the_assistant_reports_names_a_topic(text):
    assert topic(text) == bare_noun_phrase(text)


@pytest.mark.parametrize("text", ["北京明天的天气", "上海天气", "客厅的温度", "卧室湿度", "我的日程", "本机IP", "音量",
                                  "打开客厅的灯", "十五分钟", "今天几号"])
def test_a_terse_request_for_what_it_reports_or_no_noun_phrase_is_no_topic(text):
    assert topic(text) is None
