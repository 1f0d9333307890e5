"""Todos: add, list, complete, clear; kept in the state directory (``todos.json``)."""

from __future__ import annotations

import functools
import re
from datetime import datetime
from typing import Any

from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.numerals import parse_int
from rkvoice.errors import RkvoiceError, Stage
from rkvoice.state import StateStore
from rkvoice.text.normalize import speakable
from rkvoice.text.spoken_numbers import cn_count, cn_int

NAME = "todo"
FILE = "todos"

_SYNONYMS = (("待办事项", "待办"), ("待做事项", "待办"), ("备忘录", "待办"), ("任务清单", "待办"),
             ("待办清单", "待办"), ("待办列表", "待办"), ("要做的事", "待办"))
_N = r"([零一二两三四五六七八九十百\d]+)"
_LEAD = "请|帮我|给我|麻烦你?"


@functools.lru_cache(maxsize=4)
def _add_patterns(name: str) -> tuple[re.Pattern[str], ...]:
    """"Add a todo" phrasings, after polite words and the assistant's ``name``."""
    lead = rf"^(?:{_LEAD}|{re.escape(name)})*" if name else rf"^(?:{_LEAD})*"
    return (
        re.compile(lead + r"(?:添加|加|新建|新增|记|建)(?:一个|个|一条|条|一项|项)?待办(?:是|叫|内容是)?(.+)$"),
        re.compile(lead + r"(?:在)?(?:我的)?待办(?:里|中|里面)?(?:添加|加上|加|记上|记|增加|新增)(?:一个|一条|个|条|一项)?(.+)$"),
        re.compile(lead + r"(?:把|将)?(.+?)(?:加到|加入|添加到|记到|放到|写到|加进|放进|记在)(?:我的)?待办(?:里|中|里面)?$"),
        re.compile(lead + r"(?:记一下|记下|记住|记个|记一笔)(.+)$"),
    )


_LIST = ("有哪些", "有什么", "看看", "查看", "列出", "列一下", "念一下", "读一下", "是什么", "几条", "几个",
         "多少", "还有", "说一下", "看一下", "查一下", "念念", "都有")
_CLEAR = re.compile(r"(?:清空|清除|删除|删掉|清理|去掉)(?:所有|全部)(?:的)?待办|(?:清空|清除|清理)(?:我的)?待办|"
                    r"(?:全部|所有)待办(?:都)?(?:删掉|删除|清空|清除)|"
                    r"待办(?:全部|都|统统)(?:删掉|删除|清空|清除|不要了)")
_DONE_BY_INDEX = (
    re.compile(r"(?:完成|做完|划掉|勾掉|删掉|删除|去掉|搞定)(?:了)?(?:待办)?(?:的)?第" + _N + r"(?:条|个|项|件)"),
    re.compile(r"第" + _N + r"(?:条|个|项|件)(?:待办)?(?:已经)?(?:完成了|做完了|搞定了|已完成|完成|删掉|划掉|删除|办完了)"),
)
_DONE_BY_TEXT = (
    re.compile(r"^(?:待办)?(?:完成|做完了|划掉|勾掉|删掉)(?:待办)?(.+)$"),
    re.compile(r"^(.+?)(?:已经)?(?:做完了|完成了|搞定了|办完了|弄完了)$"),
)


class TodoList:
    def __init__(self, store: StateStore) -> None:
        self.store = store

    def items(self) -> list[dict[str, Any]]:
        data = self.store.load(FILE, [])
        if not isinstance(data, list):
            raise RkvoiceError(Stage.STATE, "bad-todos", f"{self.store.path(FILE)} must hold a list; move it aside")
        return data

    def open_items(self) -> list[dict[str, Any]]:
        return [t for t in self.items() if not t.get("done")]

    def add(self, text: str, now: datetime) -> dict[str, Any]:
        items = self.items()
        item = {"id": max((t.get("id", 0) for t in items), default=0) + 1, "text": text, "done": False,
                "created": now.isoformat(timespec="seconds")}
        items.append(item)
        self.store.save(FILE, items)
        return item

    def complete(self, item_id: int) -> None:
        self.store.save(FILE, [t for t in self.items() if not t.get("done") and t.get("id") != item_id])

    def clear(self) -> int:
        n = len(self.open_items())
        self.store.save(FILE, [])
        return n


def _norm(text: str) -> str:
    for a, b in _SYNONYMS:
        text = text.replace(a, b)
    return text


def _strip_item(s: str) -> str:
    return re.sub(r"^(?:一下|一个|一条|是|叫|说)|(?:吧|哦|啊|呀|嘛|了吗)$", "", s).strip()


def _completed(todos: TodoList, item: dict[str, Any], left: int) -> ToolAnswer:
    todos.complete(item["id"])
    return ToolAnswer(NAME, f"好的，{speakable(item['text'])}，已完成。"
                            + (f"还剩{cn_count(left)}条待办。" if left else "待办全部完成了。"))


def _list_answer(todos: TodoList) -> str:
    items = todos.open_items()
    if not items:
        return "你现在没有待办事项。"
    body = "；".join(f"第{cn_int(i + 1)}，{speakable(t['text'])}" for i, t in enumerate(items))
    return f"你有{cn_count(len(items))}条待办：{body}。"


def handle(text: str, ctx: ToolContext) -> ToolAnswer | None:
    text = _norm(text)
    todos = TodoList(ctx.store)
    if "待办" in text and _CLEAR.search(text):
        n = todos.clear()
        return ToolAnswer(NAME, f"好的，已清空全部待办，共{cn_int(n)}条。" if n else "待办本来就是空的。")
    for pat in _DONE_BY_INDEX:
        m = pat.search(text)
        if m:
            items = todos.open_items()
            k = parse_int(m.group(1))
            if not 1 <= k <= len(items):
                return ToolAnswer(NAME, f"没有第{cn_int(k)}条待办，你现在有{cn_int(len(items))}条。")
            return _completed(todos, items[k - 1], len(items) - 1)
    add = _add_patterns(ctx.name)
    if "待办" in text and any(w in text for w in _LIST) and not any(p.match(text) for p in add[:3]):
        return ToolAnswer(NAME, _list_answer(todos))
    for pat in add:
        m = pat.match(text)
        if m:
            item = _strip_item(m.group(1))
            if not item or item in _LIST:
                continue
            todos.add(item, ctx.now())
            n = len(todos.open_items())
            return ToolAnswer(NAME, f"好的，已添加待办：{speakable(item)}。现在共有{cn_count(n)}条。")
    if text.rstrip("呢吗") in ("待办", "我的待办", "看待办"):
        return ToolAnswer(NAME, _list_answer(todos))
    open_items = todos.open_items()
    for pat in _DONE_BY_TEXT:
        m = pat.match(text)
        if m and open_items:
            what = m.group(1).replace("待办", "")
            for t in open_items:
                if what and (what in t["text"] or t["text"] in what):
                    return _completed(todos, t, len(open_items) - 1)
    return None
