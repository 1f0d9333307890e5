"""Words a Chinese request cannot end with: the end-of-turn decision's second opinion.

Smart Turn hears intonation; what the speaker said so far is a second, independent signal. A request
whose transcript ends on a word that needs something after it has not ended, whatever its pitch did:

- a coverb or conjunction with nothing after it: 帮我把, 空调和, 从, 或者, 然后, 还是 ...;
- a verb that needs its target: 调到, 设成, 改为, 定在 ... (空调调到);
- a numeral and measure word without their noun: 设一个, 讲一个, 来两杯 ... (帮我设一个);
- only words that open a request: fillers, a time, a polite frame and at most a bare verb: 那个,
  就是, 明天早上, 我想问一下, 帮我打开 ...; a reminder with its time but not what it is about:
  提醒我下午三点 (the turn-end set's speakers went on: 开会);
- a coverb phrase with no verb after it: 把卧室的灯, 用Python, 从北京 (jieba's part-of-speech tags,
  the word cutter the voice already loads: rkvoice.text.words);
- a polite frame and 吧 alone: 帮我吧, the ASR's spelling of 帮我把 cut at its pause.

``unfinished(text)`` names the word the request stops on, or gives None. The rules are about how
Chinese sentences are built, not about the requests of any one home; they err toward waiting: a
request wrongly judged unfinished waits until ``hear.endpoint.max_silence_ms``, one wrongly judged
finished is cut off.
"""

from __future__ import annotations

import re

from rkvoice.text.words import tagged

_PUNCT = re.compile(r"[\s，,。.！!？?、；;：:…—~～\"'“”‘’()（）]+")

TRAILING_WORDS = (
    # coverbs and conjunctions that take what follows them
    "把", "将", "给", "跟", "和", "与", "同", "向", "往", "从", "被", "让", "及", "或", "并",
    "或者", "还是", "还有", "然后", "而且", "但是", "可是", "所以", "因为", "如果", "要是", "并且", "以及",
    "比如", "就是", "就是说", "那个", "嗯", "呃", "额",
    # verbs that need their target
    "调到", "调成", "调为", "设到", "设为", "设成", "设置为", "设置成", "改成", "改为", "换成", "变成", "定在",
    "设在", "开到", "升到", "降到", "掉到", "加到", "减到", "放到", "移到", "调至", "设定为",
    # a request that asks for something not said yet
    "问一下", "查一下", "看一下", "说一下", "讲一下", "搜一下", "百分之",
)
"""Words a request does not end on."""
_LONGEST_FIRST = tuple(sorted(TRAILING_WORDS, key=len, reverse=True))  # 就是说 before 就是

_MEASURE = re.compile(r"[一二两三四五六七八九十几每某半\d]+[个只条张本件次位台块首部段杯份篇道]$")

_TIME = (r"今天|明天|后天|大后天|昨天|前天|今晚|明晚|每天|早上|上午|中午|下午|傍晚|晚上|凌晨|半夜|"
         r"周[一二三四五六日天]|星期[一二三四五六日天]|[零一二两三四五六七八九十百\d]+(?:点钟|点半|点|分|号|月|日)")
_OPENING = re.compile(
    r"^(?:那个|就是|然后|嗯|呃|额|啊|你知道吗|你说|"  # fillers
    r"请问|请你|请|麻烦你|麻烦|帮我|帮忙|给我|你能不能|能不能|你可以|可以|你|我想要|我想|我要|我|"  # a polite frame
    rf"{_TIME})*"  # a time
    r"(?:打开|关掉|关闭|关上|播放|放|调|设置|设|定|提醒我|叫我|告诉我|讲讲|讲|说说|搜索|查询|查|问|看看|"
    # a reminder or a message with its time but not yet what it is about: 提醒我下午三点 (… 开会)
    rf"(?:提醒我|提醒|告诉我)(?:{_TIME}|[的在到])+)?$")


COVERBS = frozenset("把将用拿从被往向跟")
"""Coverbs (tagged p) that open a phrase a verb must follow: 把灯 … 关掉."""
_VERB_LIKE = frozenset(("给", "到"))  # tagged p, but the phrase's verb after 把: 把这个给我
_QUESTION_END = ("吗", "呢", "吧", "啊", "么", "什么", "谁", "哪", "哪里", "哪儿", "怎么", "怎样", "多少", "几")


def _verbless_coverb_phrase(words: str) -> str | None:
    """The coverb phrase ``words`` ends in when no verb follows its coverb (把卧室的灯), else None."""
    if words.endswith(_QUESTION_END):
        return None
    tokens = tagged(words)
    for i in range(len(tokens) - 2, -1, -1):
        word, tag = tokens[i]
        if tag == "p" and word in COVERBS:
            rest = tokens[i + 1:]
            if any((t.startswith("v") and t != "vn") or w in _VERB_LIKE for w, t in rest):
                return None
            return "".join(w for w, _ in tokens[i:])
    return None


_FRAME_BA = re.compile(r"^(?:请你|麻烦你|你|请)?(?:帮我|给我|替我|帮忙)吧$")
"""A polite frame and 吧, nothing asked: how Whisper spells a speaker who paused after 把 (帮我把 ->
帮我吧; 把 and 吧 are both "ba"). 帮帮我吧 (a plea) is not one."""


def unfinished(text: str) -> str | None:
    """The word ``text`` (a transcript of the request so far) stops on when it cannot be a whole
    request ("" when it has no words at all), else None. Punctuation and spaces the ASR put in are
    not words."""
    words = _PUNCT.sub("", text)
    if not words:
        return ""  # no words heard yet: nothing to answer, nothing lost by waiting
    if word := next((w for w in _LONGEST_FIRST if words.endswith(w)), None):
        return word
    if m := _MEASURE.search(words):
        return m.group(0)
    if _OPENING.match(words) or _FRAME_BA.match(words):
        return words
    return _verbless_coverb_phrase(words)


# -------------------------------------------------------------------- the words' other two opinions

_CLOSING = ("吗", "呢", "嘛", "几号", "几点", "几点钟", "星期几", "礼拜几", "周几", "多少钱", "多少度", "多少岁",
            "多长", "多远", "多久", "多高", "多大", "怎么办", "怎么样", "好不好", "行不行", "对不对")
"""Words that close a question: a final particle (明天会下雨吗, 我的手机呢), a question about a
quantity or a time (今天几号, 长城有多长), a tag question (好不好)."""
_CLOSING_LONGEST_FIRST = tuple(sorted(_CLOSING, key=len, reverse=True))
MIN_BEFORE_CLOSING = 2
"""Characters a question needs before its closing word (几点 alone is no request)."""
_NOUN_TAGS = ("n", "r", "u", "t", "s", "f", "b", "x", "eng", "m", "q")
"""jieba's tags of a noun phrase's words: nouns and names, pronouns, 的, times, places, spaces, and
numerals and measure words before a noun (两杯咖啡, 我的那台电脑)."""
_COUNT_TAGS = ("m", "q")
"""A numeral or measure word is no noun phrase's last word (七点, 十五分钟: a time, an amount)."""
REPORTED = ("天气", "气温", "温度", "湿度", "空气", "空气质量", "雾霾", "风力", "预报", "时间", "日期", "农历",
            "星期", "日程", "安排", "待办", "待办事项", "提醒", "闹钟", "计时器", "倒计时", "电量", "内存", "负载",
            "状态", "网速", "网络", "地址", "ip", "音量", "亮度", "功率", "用电量", "耗电")
"""What the assistant (its tools, or Home Assistant's sensors) reports on when asked by name alone: a
noun phrase ending on one is a terse whole request (北京明天的天气, 客厅温度, 我的日程)."""
_ASKING = ("什么", "哪", "怎么", "谁", "几", "多少")


def finished(text: str) -> str | None:
    """The word that closes ``text`` as a whole question when it does (明天会下雨吗 -> 吗, 今天几号 ->
    几号), else None: a request that ends on it has ended whatever its pitch did. Never one that
    ``unfinished`` holds back."""
    words = _PUNCT.sub("", text)
    word = next((w for w in _CLOSING_LONGEST_FIRST if words.endswith(w)), None)
    if word is None or len(words) - len(word) < MIN_BEFORE_CLOSING or unfinished(text) is not None:
        return None
    return word


def bare_noun_phrase(text: str) -> str | None:
    """``text`` when it is a noun phrase alone (我的iPhone, 客厅的灯, 北京天气, 一个故事: no verb, no
    question, not a bare number or time), else None."""
    words = _PUNCT.sub("", text)
    if not words or any(q in words for q in _ASKING) or finished(text) is not None:
        return None
    tags = [tag for _, tag in tagged(words)]
    if not tags or tags[-1].startswith(_COUNT_TAGS):
        return None
    return words if all(tag.startswith(_NOUN_TAGS) for tag in tags) else None


def topic(text: str) -> str | None:
    """``text`` when it is a noun phrase alone about nothing the assistant reports on (我的iPhone,
    客厅的灯, 用Python heard as 宇宙拜登), else None. Said alone it asks nothing: a speaker who names a
    topic goes on to say what about it (我的iPhone | 没电了怎么办, 客厅的灯 | 关掉), so the decision
    waits for that as it does for ``unfinished`` words. A noun phrase ending on what the assistant
    reports (``REPORTED``: 北京明天的天气, 客厅温度) is a terse whole request and ends as judged."""
    words = bare_noun_phrase(text)
    if words is None or words.lower().endswith(REPORTED):
        return None
    return words
