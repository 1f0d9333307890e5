"""Local tools: five or more phrasings per intent, ASR variants, speakable answers, persistence."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import rkvoice.answer.tools.network as network
from rkvoice.answer.tools.arithmetic import evaluate
from rkvoice.answer.tools.base import ToolAnswer, ToolContext
from rkvoice.answer.tools.match import clean
from rkvoice.answer.tools.numerals import parse_number
from rkvoice.answer.tools.router import route
from rkvoice.answer.tools.scheduler import ReminderScheduler
from rkvoice.answer.tools.when import parse_when
from rkvoice.config import HearConfig
from rkvoice.state import StateStore
from rkvoice.text.normalize import speakable

ROOT = Path(__file__).resolve().parent.parent
TZ = timezone(timedelta(hours=8))
NOW = datetime(2026, 10, 21, 14, 5, 30, tzinfo=TZ)  # a Wednesday afternoon


class Clock:
    def __init__(self, t: datetime = NOW) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t


def make_ctx(tmp_path: Path, clock: Clock | None = None, **kw: object) -> ToolContext:
    clock = clock or Clock()
    store = StateStore(tmp_path / "state")
    return ToolContext(now=clock, store=store, scheduler=ReminderScheduler(store, clock), **kw)  # type: ignore[arg-type]


def ask(text: str, ctx: ToolContext) -> ToolAnswer:
    ans = route(text, ctx)
    assert ans is not None, f"{text!r} was not answered by a tool"
    assert speakable(ans.text) == ans.text, f"not speakable as is: {ans.text!r}"
    assert not any(c.isdigit() and c.isascii() for c in ans.text)
    return ans


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return make_ctx(tmp_path)


# -- time and date ---------------------------------------------------------------------------

@pytest.mark.parametrize("q", ["现在几点", "几点了？", "现在几点钟", "现在时间", "现在什么时间", "鸡点了", "报时",
                               "幾點了", "现在是几点啊"])
def test_time(q: str, ctx: ToolContext) -> None:
    ans = ask(q, ctx)
    assert ans.tool == "time" and ans.text == "现在是下午两点零五分。"


@pytest.mark.parametrize("q", ["今天几号", "今天几月几号", "今天是几号？", "今天日期", "今天是什么日子", "几好了今天"])
def test_date(q: str, ctx: ToolContext) -> None:
    ans = ask(q, ctx)
    assert ans.tool == "date" and ans.text == "今天是二零二六年十月二十一日，星期三。"


@pytest.mark.parametrize("q,expected", [
    ("今天星期几", "今天是星期三。"), ("礼拜几", "今天是星期三。"), ("今天周几", "今天是星期三。"),
    ("明天星期几", "明天是星期四。"), ("后天是礼拜几", "后天是星期五。"), ("昨天星期几", "昨天是星期二。"),
    ("心期几", "今天是星期三。"),
])
def test_weekday(q: str, expected: str, ctx: ToolContext) -> None:
    assert ask(q, ctx).text == expected


def test_other_day_dates_and_midnight(ctx: ToolContext, tmp_path: Path) -> None:
    assert ask("明天几号", ctx).text == "明天是二零二六年十月二十二日，星期四。"
    late = make_ctx(tmp_path / "b", Clock(datetime(2026, 12, 31, 0, 7, tzinfo=TZ)))
    assert ask("几点了", late).text == "现在是凌晨十二点零七分。"
    assert ask("明天几号", late).text == "明天是二零二七年一月一日，星期五。"


@pytest.mark.parametrize("q", ["给我讲个故事", "我没有时间", "下个星期我要去北京", "明天几点日出", "做这个要多长时间"])
def test_not_clock_questions(q: str, ctx: ToolContext) -> None:
    assert route(q, ctx) is None


# -- device status ---------------------------------------------------------------------------

def fake_machine(root: Path, zones: dict[str, int], meminfo: bool = True) -> ToolContext:
    sys_root, proc = root / "sys", root / "proc"
    for i, (kind, milli) in enumerate(zones.items()):
        z = sys_root / "class" / "thermal" / f"thermal_zone{i}"
        z.mkdir(parents=True)
        (z / "type").write_text(kind + "\n")
        (z / "temp").write_text(f"{milli}\n")
    proc.mkdir(parents=True)
    if meminfo:
        (proc / "meminfo").write_text("MemTotal:        3986464 kB\nMemFree:  100 kB\nMemAvailable:    2396160 kB\n")
    (proc / "uptime").write_text("11100.52 20000.00\n")
    (proc / "loadavg").write_text("0.52 0.40 0.33 2/300 1234\n")
    ctx = make_ctx(root)
    ctx.sys_root, ctx.proc_root = sys_root, proc
    return ctx


RK3576_ZONES = {"soc-thermal": 50800, "bigcore0-thermal": 52700, "bigcore1-thermal": 51000,
                "littlecore-thermal": 49000, "gpu-thermal": 48000, "npu-thermal": 49900, "ddr-thermal": 45000}


@pytest.mark.parametrize("q", ["现在温度多少", "温度", "设备温度是多少？", "你现在多少度", "芯片热不热", "稳度多少"])
def test_temperature(q: str, tmp_path: Path) -> None:
    ctx = fake_machine(tmp_path, RK3576_ZONES)
    ans = ask(q, ctx)
    assert ans.tool == "device"
    assert ans.text == ("芯片五十点八度，处理器五十二点七度，神经网络处理器四十九点九度，"
                        "图形处理器四十八度，内存芯片四十五度。")


def test_missing_values_are_left_out(tmp_path: Path) -> None:
    ctx = fake_machine(tmp_path, {"x86_pkg_temp": 61000, "iwlwifi_1": 40000}, meminfo=False)
    assert ask("温度多少", ctx).text == "芯片六十一度。"  # no NPU on a PC: not invented
    assert ask("系统状态", ctx).text == "芯片六十一度，已经运行了三小时五分钟，一分钟平均负载零点五二。"
    empty = fake_machine(tmp_path / "e", {}, meminfo=False)
    assert ask("温度多少", empty).text == "这台设备上读不到温度。"


@pytest.mark.parametrize("q,expected", [
    ("内存还剩多少", "内存共三千八百九十三兆，可用二千三百四十兆。"),
    ("内存多少", "内存共三千八百九十三兆，可用二千三百四十兆。"),
    ("看看内纯", "内存共三千八百九十三兆，可用二千三百四十兆。"),
    ("运行多久了", "已经运行了三小时五分钟。"),
    ("开机多长时间了", "已经运行了三小时五分钟。"),
    ("负载多少", "一分钟平均负载零点五二。"),
    ("系统状态怎么样", ("芯片五十点八度，处理器五十二点七度，神经网络处理器四十九点九度，图形处理器四十八度，"
                   "内存芯片四十五度，内存共三千八百九十三兆，可用二千三百四十兆，已经运行了三小时五分钟，"
                   "一分钟平均负载零点五二。")),
])
def test_memory_uptime_load_status(q: str, expected: str, tmp_path: Path) -> None:
    assert ask(q, fake_machine(tmp_path, RK3576_ZONES)).text == expected


@pytest.mark.parametrize("q", ["外面温度多少", "今天气温多少度", "我的体温三十八度正常吗"])
def test_weather_is_not_device_temperature(q: str, tmp_path: Path) -> None:
    ans = route(q, fake_machine(tmp_path, RK3576_ZONES))
    assert ans is None or ans.tool == "weather"


@pytest.mark.parametrize("q", ["今天天气怎么样", "明天会下雨吗", "外面温度多少", "今天气温多少度", "明天要带伞吗",
                               "北京明天天气", "空气质量怎么样"])
def test_weather_says_offline_instead_of_inventing(q: str, ctx: ToolContext) -> None:
    ans = ask(q, ctx)
    assert ans.tool == "weather" and "查不到天气" in ans.text


def test_real_machine_status_is_speakable(ctx: ToolContext) -> None:
    ans = ask("系统状态", ctx)
    assert "内存共" in ans.text  # /proc/meminfo exists on any Linux


# -- IP --------------------------------------------------------------------------------------

@pytest.mark.parametrize("q", ["本机IP", "IP地址是多少", "你的ip", "查一下网络地址", "联网了吗", "本机地址"])
def test_ip(q: str, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(network, "ip_addresses", lambda: [("wlan0", "192.168.0.103"), ("eth0", "10.0.0.2")])
    assert ask(q, ctx).text == "本机地址：无线网一九二点一六八点零点一零三；有线网一零点零点零点二。"


def test_ip_offline_and_real(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ask("本机IP", ctx).tool == "ip"  # this machine's own addresses
    monkeypatch.setattr(network, "ip_addresses", list)
    assert ask("本机IP", ctx).text == "现在没有联网，没有网络地址。"


# -- todos -----------------------------------------------------------------------------------

@pytest.mark.parametrize("q,item", [
    ("添加待办买牛奶", "买牛奶"), ("记一下明天买牛奶", "明天买牛奶"), ("把交电费加到待办", "交电费"),
    ("待办里加上给花浇水", "给花浇水"), ("帮我新建一个待办：写周报", "写周报"), ("添加代办事项取快递", "取快递"),
    ("帮我记下买3斤苹果", "买3斤苹果"),
])
def test_todo_add(q: str, item: str, ctx: ToolContext) -> None:
    ans = ask(q, ctx)
    assert ans.tool == "todo" and ans.text.startswith("好的，已添加待办：")
    assert ctx.store is not None
    assert [t["text"] for t in ctx.store.load("todos", [])] == [item]


def test_todo_lifecycle(ctx: ToolContext) -> None:
    assert ask("看看待办", ctx).text == "你现在没有待办事项。"
    for q in ("添加待办买牛奶", "添加待办交电费", "添加待办买3斤苹果"):
        ask(q, ctx)
    for q in ("看看待办", "我有什么待办", "我的待办有哪些", "待办事项", "念一下待办", "查看代办"):
        assert ask(q, ctx).text == "你有三条待办：第一，买牛奶；第二，交电费；第三，买三斤苹果。"
    assert ask("第一条完成了", ctx).text == "好的，买牛奶，已完成。还剩两条待办。"
    assert ask("交电费做完了", ctx).text == "好的，交电费，已完成。还剩一条待办。"
    assert ask("完成第五条", ctx).text == "没有第五条待办，你现在有一条。"
    ask("添加待办写周报", ctx)
    assert ask("划掉第二条", ctx).text == "好的，写周报，已完成。还剩一条待办。"
    assert ask("清空待办", ctx).text == "好的，已清空全部待办，共一条。"
    assert ask("删除所有待办", ctx).text == "待办本来就是空的。"


@pytest.mark.parametrize("q", ["完成第一条", "第一条待办完成了", "第一个做完了", "划掉第一条", "删掉第一条待办"])
def test_todo_complete_phrasings(q: str, ctx: ToolContext) -> None:
    ask("添加待办买牛奶", ctx)
    ask("添加待办交电费", ctx)
    assert ask(q, ctx).text == "好的，买牛奶，已完成。还剩一条待办。"


@pytest.mark.parametrize("q", ["清空待办", "清除所有待办", "删除所有待办事项", "待办全部删掉", "把待办都清空"])
def test_todo_clear_phrasings(q: str, ctx: ToolContext) -> None:
    ask("添加待办买牛奶", ctx)
    ans = route(q, ctx)
    assert ans is not None and ans.text == "好的，已清空全部待办，共一条。", q


def test_todos_survive_restart(tmp_path: Path) -> None:
    ask("添加待办买牛奶", make_ctx(tmp_path))
    assert ask("看看待办", make_ctx(tmp_path)).text == "你有一条待办：第一，买牛奶。"


# -- reminders and alarms --------------------------------------------------------------------

@pytest.mark.parametrize("q,answer,due,text", [
    ("20分钟后提醒我吃药", "好的，二十分钟后提醒你吃药。", NOW + timedelta(minutes=20), "吃药"),
    ("二十分钟以后提醒我吃药", "好的，二十分钟后提醒你吃药。", NOW + timedelta(minutes=20), "吃药"),
    ("一个半小时后提醒我关火", "好的，一个半小时后提醒你关火。", NOW + timedelta(minutes=90), "关火"),
    ("半小时之后提醒我出门", "好的，半小时后提醒你出门。", NOW + timedelta(minutes=30), "出门"),
    ("两个小时后叫我", "好的，闹钟定在两个小时后。", NOW + timedelta(hours=2), ""),
    ("明天早上七点叫我起床", "好的，明天早上七点整叫你起床。", datetime(2026, 10, 22, 7, 0, tzinfo=TZ), "起床"),
    ("下午三点提醒我开会", "好的，今天下午三点整提醒你开会。", datetime(2026, 10, 21, 15, 0, tzinfo=TZ), "开会"),
    ("三点半提醒我接孩子", "好的，今天下午三点三十分提醒你接孩子。", datetime(2026, 10, 21, 15, 30, tzinfo=TZ), "接孩子"),
    ("提醒我晚上八点给妈妈打电话", "好的，今天晚上八点整提醒你给妈妈打电话。",
     datetime(2026, 10, 21, 20, 0, tzinfo=TZ), "给妈妈打电话"),
    ("设一个明天早上六点半的闹钟", "好的，闹钟定在明天早上六点三十分。", datetime(2026, 10, 22, 6, 30, tzinfo=TZ), ""),
    ("明早七点十五叫醒我", "好的，闹钟定在明天早上七点十五分。", datetime(2026, 10, 22, 7, 15, tzinfo=TZ), ""),
    ("十分钟后题醒我关火", "好的，十分钟后提醒你关火。", NOW + timedelta(minutes=10), "关火"),
    ("7:30提醒我跑步", "好的，今天晚上七点三十分提醒你跑步。", datetime(2026, 10, 21, 19, 30, tzinfo=TZ), "跑步"),
    ("后天下午两点提醒我去医院", "好的，后天下午两点整提醒你去医院。",
     datetime(2026, 10, 23, 14, 0, tzinfo=TZ), "去医院"),
    ("明天早上7点叫我起床", "好的，明天早上七点整叫你起床。", datetime(2026, 10, 22, 7, 0, tzinfo=TZ), "起床"),
])
def test_reminder_phrasings(q: str, answer: str, due: datetime, text: str, ctx: ToolContext) -> None:
    assert ask(q, ctx).text == answer
    assert ctx.scheduler is not None
    (item,) = ctx.scheduler.items()
    assert item["due"] == pytest.approx(due.timestamp()) and item["text"] == text


def test_when_parser_rolls_over() -> None:
    morning = datetime(2026, 10, 21, 9, 0, tzinfo=TZ)
    w = parse_when("八点提醒我", morning)  # 8:00 passed -> 20:00 today
    assert w is not None and w.due == datetime(2026, 10, 21, 20, 0, tzinfo=TZ)
    w = parse_when("早上八点提醒我", morning)  # explicit morning -> tomorrow
    assert w is not None and w.due == datetime(2026, 10, 22, 8, 0, tzinfo=TZ)


def test_reminder_fires_when_due_and_survives_restart(tmp_path: Path) -> None:
    clock = Clock()
    said: list[str] = []
    ctx = make_ctx(tmp_path, clock)
    ask("20分钟后提醒我吃药", ctx)
    ask("明天早上七点叫我起床", ctx)
    assert ask("我有哪些提醒", ctx).text == "你有两个提醒：今天下午两点二十五分，吃药；明天早上七点整，起床。"
    # restart: a new scheduler on the same state directory
    clock.t = NOW + timedelta(minutes=21)
    store = StateStore(tmp_path / "state")
    sched = ReminderScheduler(store, clock, said.append)
    assert sched.fire_due() == ["到时间了，提醒你吃药。"]
    assert said == ["到时间了，提醒你吃药。"]
    assert sched.fire_due() == []  # fired once only
    assert [r["text"] for r in sched.items()] == ["起床"]
    assert 0 < (sched.seconds_to_next() or 0) < 17 * 3600
    clock.t = datetime(2026, 10, 22, 7, 0, 1, tzinfo=TZ)
    assert ReminderScheduler(store, clock).fire_due() == ["到时间了，提醒你起床。"]
    for text in said:
        assert speakable(text) == text


def test_scheduler_thread_speaks_due_reminder(tmp_path: Path) -> None:
    import threading

    fired = threading.Event()
    said: list[str] = []
    store = StateStore(tmp_path)
    now = [datetime.now().astimezone()]
    sched = ReminderScheduler(store, lambda: now[0], lambda t: (said.append(t), fired.set()))
    sched.start()
    try:
        sched.add(now[0] + timedelta(seconds=0.2), "喝水")  # wakes the sleeping thread
        now[0] += timedelta(seconds=1)
        assert fired.wait(5)
    finally:
        sched.stop()
    assert said == ["到时间了，提醒你喝水。"]


@pytest.mark.parametrize("q,n", [("取消所有提醒", 2), ("删除全部提醒", 2), ("取消闹钟", 1), ("关掉闹钟", 1),
                                 ("不要提醒", 1)])
def test_reminder_cancel(q: str, n: int, ctx: ToolContext) -> None:
    ask("20分钟后提醒我吃药", ctx)
    ask("设一个明天早上六点半的闹钟", ctx)
    ans = ask(q, ctx)
    assert ctx.scheduler is not None and len(ctx.scheduler.items()) == 2 - n
    assert ans.text.startswith("好的，已取消")


def test_reminder_without_time_asks(ctx: ToolContext) -> None:
    assert "什么时候" in ask("提醒我吃药", ctx).text


WRITER = textwrap.dedent(
    """
    import sys
    from datetime import datetime, timedelta
    from pathlib import Path
    from rkvoice.answer.tools.scheduler import ReminderScheduler
    from rkvoice.answer.tools.todos import TodoList
    from rkvoice.state import StateStore
    store = StateStore(Path(sys.argv[1]))
    now = datetime(2026, 10, 21, 14, 0).astimezone()
    sched = ReminderScheduler(store, lambda: now)
    todos = TodoList(store)
    i = 0
    while True:
        i += 1
        sched.add(now + timedelta(minutes=i), "事项%d" % i)
        todos.add("待办%d" % i, now)
        if i == 5:
            print("ready", flush=True)
    """
)


def test_todos_and_reminders_survive_kill_9(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = StateStore(tmp_path)
    reminders = ReminderScheduler(store, Clock()).items()
    todos = store.load("todos", None)
    assert len(reminders) >= 5 and todos is not None and len(todos) >= 5
    # every stored list is a complete prefix of what was written, nothing half-written
    assert [r["text"] for r in reminders] == [f"事项{i}" for i in range(1, len(reminders) + 1)]
    assert [t["text"] for t in todos] == [f"待办{i}" for i in range(1, len(todos) + 1)]
    assert not list(tmp_path.glob("*.corrupt-*"))


# -- arithmetic ------------------------------------------------------------------------------

@pytest.mark.parametrize("q,expected", [
    ("12乘以8等于多少", "十二乘以八等于九十六。"),
    ("十二乘八", "十二乘以八等于九十六。"),
    ("三百六十五除以七", "三百六十五除以七约等于五十二点一四。"),
    ("一加一等于几", "一加一等于二。"),
    ("帮我算一下100减去37", "一百减三十七等于六十三。"),
    ("3.5乘以2是多少", "三点五乘以二等于七。"),
    ("一百二十三加四百五十六等于多少？", "一百二十三加四百五十六等于五百七十九。"),
    ("2+3×4", "二加三乘以四等于十四。"),
    ("负三加五", "负三加五等于二。"),
    ("一万零五减五", "一万零五减五等于一万。"),
    ("十除以四", "十除以四等于二点五。"),
    ("五减八", "五减八等于负三。"),
    ("十二成以八等于多少", "十二乘以八等于九十六。"),
    ("两千乘以三千", "二千乘以三千等于六百万。"),
    ("2的10次方是多少", "二的十次方等于一千零二十四。"),
    ("一百的平方", "一百的平方等于一万。"),
    ("三的平方加四的平方等于多少", "三的平方加四的平方等于二十五。"),
    ("十的立方", "十的立方等于一千。"),
    ("百分之二十乘以五十", "零点二乘以五十等于十。"),
    ("2的100次方", "这个结果太大了，我读不出来。"),
])
def test_arithmetic(q: str, expected: str, ctx: ToolContext) -> None:
    ans = ask(q, ctx)
    assert ans.tool == "arithmetic" and ans.text == expected


def test_division_by_zero_and_non_expressions(ctx: ToolContext) -> None:
    assert ask("二十除以零", ctx).text == "零不能做除数，这道题没有答案。"
    for q in ("七点半", "加油", "一加手机好用吗", "三除", "乘以八"):
        ans = route(q, ctx)
        assert ans is None or ans.tool != "arithmetic", q


@pytest.mark.parametrize("q", ["九成已九", "九成已九等于多少", "九成以九", "九乘已九。"])
def test_arithmetic_accepts_asr_variants_of_chengyi(q: str, ctx: ToolContext) -> None:
    ans = ask(q, ctx)
    assert ans.tool == "arithmetic" and ans.text == "九乘以九等于八十一。"
    assert evaluate(q.rstrip("。")) is not None  # the tool itself knows them, not only clean()


@pytest.mark.parametrize("q", ["八成已经好了", "这事有九成已经定了", "九成以上", "九成已", "成已九", "打九成"])
def test_chengyi_variants_are_no_arithmetic_in_other_sentences(q: str, ctx: ToolContext) -> None:
    ans = route(q, ctx)
    assert ans is None or ans.tool != "arithmetic", (q, ans)


def test_parser_is_exact_and_never_evals() -> None:
    assert parse_number("三百六十五") == 365 and parse_number("一亿二千万") == 120_000_000
    assert parse_number("负五点五") == -5.5 and parse_number("二零二六") == 2026
    assert evaluate(clean("__import__('os')")) is None
    result = evaluate("一除以三乘以三")
    assert result is not None and result[1] == 1  # exact fractions, not floats


# -- stop ------------------------------------------------------------------------------------

@pytest.mark.parametrize("q", ["停", "停！", "别说了", "不要说了", "闭嘴", "停下", "好了好了", "小智停一下", "安静"])
def test_stop(q: str, ctx: ToolContext) -> None:
    ans = route(q, ctx)
    assert ans is not None and ans.tool == "stop" and ans.action == "stop" and ans.text == ""


# -- the assistant's name ----------------------------------------------------------------------

@pytest.mark.parametrize(("phrase", "name"), [("小智小智", "小智"), ("你好小白", "小白"), ("嘿，阿福！", "阿福"),
                                              ("小白同学", "小白同学"), ("芝麻开门", "芝麻开门")])
def test_the_name_comes_from_the_wake_phrase(phrase: str, name: str) -> None:
    assert HearConfig(wake_phrase=phrase).name == name


def test_tools_skip_the_configured_name_not_a_built_in_one(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, name=HearConfig(wake_phrase="你好小白").name)
    assert ask("小白停一下", ctx).action == "stop"
    assert ask("小白算一下三加四", ctx).text == "三加四等于七。"
    assert ask("小白帮我添加待办买牛奶", ctx).text.startswith("好的，已添加待办：买牛奶。")
    for q in ("小智停一下", "小智算一下三加四", "小智帮我添加待办买牛奶"):  # another name: the LLM's
        assert route(q, ctx) is None, q
    assert ask("小智算一下三加四", make_ctx(tmp_path / "default")).text == "三加四等于七。"


@pytest.mark.parametrize("q", ["停车场在哪里", "别说话的时候要注意什么", "给我讲个故事"])
def test_not_stop(q: str, ctx: ToolContext) -> None:
    ans = route(q, ctx)
    assert ans is None or ans.tool != "stop"
