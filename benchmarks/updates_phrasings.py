"""Knowledge updates in phrasings the dev set does not use, for ``stratamem eval updates``.

The rules that read everyday facts (``memory/cards/everyday.py``) were written from the dev
set's phrasings, so its 0.99 says little about other users. This writes small sets in the dev
set's format (6 users each, 5 dated sessions, 4-6 facts that change once, asked 25-30 days after
the last session), each fact said in words of its own:

- ``tuned.json``: the phrasings stop 33's rule fixes were written from ("These days we're living
  in Valencia", "Just joined Northwind Labs", "I drive a Skoda Octavia", "took up climbing");
- ``tuned_34.json``: stop 33's held-out set, read and worked on in stop 34;
- ``probe.json`` and ``probe_zh.json`` (Chinese): written at the start of stop 34 as held-out
  sets, measured once before any change (current first 0.028 and 0.292), then read to find what
  fails;
- ``probe_previous.json``: read in stop 34 to find what fails for ``previous`` questions;
- ``held_out.json`` and ``held_out_zh.json``: written after that one measurement, before any
  change of stop 34, and never read to change one.

    python -m benchmarks.updates_phrasings --out /tmp/phrasings
    stratamem eval updates --data /tmp/phrasings/held_out.json

Run from the repository root. The values are made up; the sets are generated, not stored.
"""

# ruff: noqa: RUF001 (Chinese punctuation in the Chinese set)
from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

# A fact: the first statement, the change, the question now, the question about the value
# before (or None), and each user's (first, new) values.
Fact = tuple[str, str, str, str | None, list[tuple[str, str]]]

TUNED: dict[str, Fact] = {
    "city": (
        "We relocated to {a} in January.",
        "These days we're living in {b}; the {a} flat is gone.",
        "Which city am I based in these days?",
        "Which city was I based in before {b}?",
        [("Porto", "Valencia"), ("Leeds", "Glasgow"), ("Graz", "Salzburg"), ("Tartu", "Riga"),
         ("Lille", "Nantes"), ("Cork", "Galway")],
    ),
    "car": (
        "I drive a {a}.",
        "Sold the {a}; I drive a {b} now.",
        "What car have I got at the moment?",
        "What car did I drive before the {b}?",
        [("Skoda Octavia", "Tesla Model 3"), ("Honda Civic", "Kia Niro"),
         ("Ford Focus", "Renault Zoe"), ("Mazda 3", "Volvo XC40"), ("Fiat Panda", "Toyota Yaris"),
         ("Seat Ibiza", "Nissan Leaf")],
    ),
    "sport": (
        "My weekly exercise is swimming laps, which I do at the {a} pool.",
        "I gave up the pool and took up {b} instead.",
        "What exercise am I into lately?",
        None,
        [("community", "climbing"), ("city", "rowing"), ("hotel", "tennis"), ("school", "boxing"),
         ("leisure centre", "yoga"), ("university", "squash")],
    ),
    "employer": (
        "I work for {a} as an analyst.",
        "Just joined {b}; my last day at {a} was Friday.",
        "Who is my employer at the moment?",
        "Who did I work for before {b}?",
        [("Acme Foods", "Northwind Labs"), ("Bluefin Media", "Harbor Analytics"),
         ("Crestline Bank", "Quill Robotics"), ("Dovetail Games", "Ember Health"),
         ("Evergreen Mills", "Juniper Freight"), ("Fathom Audio", "Lumen Grid")],
    ),
    "phone": (
        "I'm on an {a}.",
        "Upgraded yesterday, I carry a {b} these days.",
        "Which phone am I carrying now?",
        None,
        [("iPhone 12", "Pixel 9"), ("Galaxy A54", "iPhone 15"), ("Nokia G22", "Galaxy S24"),
         ("Pixel 6a", "OnePlus 12"), ("Moto G54", "Nothing Phone 2"), ("iPhone SE", "Pixel 8a")],
    ),
}  # fmt: skip

TUNED_34: dict[str, Fact] = {
    "city": (
        "I've been living in {a} since last autumn.",
        "Quick update: I moved out of {a}, home is {b} now.",
        "Where is home for me right now?",
        "Where did I live before {b}?",
        [("Ghent", "Utrecht"), ("Bergen", "Aarhus"), ("Turin", "Verona"), ("Krakow", "Wroclaw"),
         ("Seville", "Malaga"), ("Dundee", "Aberdeen")],
    ),
    "employer": (
        "I'm a designer at {a}.",
        "I handed in my notice at {a} and I now work at {b}.",
        "Where do I work currently?",
        "Where did I work before {b}?",
        [("Orchid Studio", "Tidewater Systems"), ("Maple Analytics", "Granite Works"),
         ("Copperleaf Media", "Halcyon Bio"), ("Brightpath Energy", "Silverline Software"),
         ("Redwood Partners", "Cobalt Health"), ("Sunfield Foods", "Ironbark Labs")],
    ),
    "sport": (
        "Most weekends I play {a}.",
        "I stopped playing {a}; these days I do {b}.",
        "What sport do I do these days?",
        None,
        [("tennis", "bouldering"), ("football", "swimming"), ("badminton", "running"),
         ("basketball", "cycling"), ("squash", "yoga"), ("golf", "rowing")],
    ),
    "diet": (
        "I'm a vegetarian.",
        "Heads up, I've gone vegan.",
        "What's my diet now?",
        None,
        [("vegetarian", "vegan")] * 6,
    ),
    "phone": (
        "My phone is an {a}.",
        "I replaced my phone with a {b} last week.",
        "What phone do I have now?",
        "What phone did I have before the {b}?",
        [("iPhone 11", "Pixel 7"), ("Galaxy S21", "iPhone 14"), ("Pixel 5", "Galaxy S23"),
         ("Moto G32", "Fairphone 4"), ("iPhone XR", "Pixel 8 Pro"), ("Nokia X20", "iPhone 13")],
    ),
}  # fmt: skip

PROBE: dict[str, Fact] = {
    "city": (
        "My flat in {a} is tiny but I love the neighbourhood.",
        "Finally settled in {b} after leaving {a}.",
        "Which city do I live in?",
        "Which city did I live in before {b}?",
        [("Lyon", "Bordeaux"), ("Leipzig", "Dresden"), ("Bilbao", "Zaragoza"),
         ("Gdansk", "Poznan"), ("Bristol", "Cardiff"), ("Lund", "Malmo")],
    ),
    "employer": (
        "I've been at {a} for three years now.",
        "Starting Monday I'm with {b}, so goodbye {a}.",
        "Which company am I with?",
        "Which company was I with before {b}?",
        [("Pinecrest Logistics", "Aurora Biotech"), ("Saltmarsh Press", "Vantage Motors"),
         ("Hollow Oak Games", "Meridian Pay"), ("Larkspur Retail", "Northgate Cloud"),
         ("Tallow & Wick", "Beacon Robotics"), ("Riverbend Dairy", "Keystone Audio")],
    ),
    "instrument": (
        "I'm learning the {a}.",
        "I switched from the {a} to the {b}.",
        "Which instrument am I learning?",
        None,
        [("piano", "cello"), ("guitar", "drums"), ("violin", "flute"), ("ukulele", "saxophone"),
         ("trumpet", "clarinet"), ("harp", "banjo")],
    ),
    "drink": (
        "I drink {a} every morning.",
        "No more {a} for me, it's {b} in the mornings now.",
        "What do I drink in the mornings?",
        None,
        [("black coffee", "green tea"), ("espresso", "matcha"), ("earl grey", "rooibos"),
         ("cappuccino", "chai"), ("hot chocolate", "mint tea"), ("orange juice", "kombucha")],
    ),
    "pet": (
        "We have a cat called {a}.",
        "Sadly {a} died in the spring; we've since adopted a puppy, {b}.",
        "What's the name of my pet?",
        None,
        [("Mochi", "Biscuit"), ("Luna", "Pepper"), ("Oscar", "Maple"), ("Tigger", "Rufus"),
         ("Pumpkin", "Ziggy"), ("Shadow", "Noodle")],
    ),
    "commute": (
        "I commute by {a}.",
        "My commute changed: it's the {b} from now on, the {a} takes too long.",
        "How do I get to work?",
        None,
        [("bike", "tram"), ("bus", "train"), ("car", "bike"), ("tram", "scooter"),
         ("train", "bus"), ("ferry", "car")],
    ),
}  # fmt: skip

PROBE_ZH: dict[str, Fact] = {
    "city": (
        "我住在{a}已经两年了。",
        "上个月我从{a}搬到了{b}。",
        "我现在住在哪个城市？",
        "搬到{b}之前我住在哪里？",
        [("南京", "苏州"), ("武汉", "长沙"), ("青岛", "大连"), ("厦门", "福州"),
         ("昆明", "贵阳"), ("沈阳", "哈尔滨")],
    ),
    "employer": (
        "我是{a}的会计。",
        "我从{a}辞职了，现在在{b}上班。",
        "我目前在哪家公司上班？",
        "在{b}之前我在哪家公司？",
        [("远山物流", "星河科技"), ("清泉饮料", "蓝鲸软件"), ("金穗粮油", "云帆传媒"),
         ("松林家具", "海潮医疗"), ("朝阳印刷", "银杏教育"), ("明湖酒店", "赤霞新能源")],
    ),
    "phone": (
        "我用的手机是{a}。",
        "我把{a}换成了{b}。",
        "我现在用什么手机？",
        None,
        [("小米13", "华为Mate 60"), ("iPhone 12", "OPPO Find X7"), ("vivo X90", "小米14"),
         ("荣耀90", "iPhone 15"), ("华为P50", "vivo X100"), ("OPPO Reno 10", "荣耀Magic 6")],
    ),
    "sport": (
        "我每周都去打{a}。",
        "我不打{a}了，最近迷上了{b}。",
        "我最近喜欢什么运动？",
        None,
        [("羽毛球", "瑜伽"), ("乒乓球", "游泳"), ("篮球", "跑步"), ("网球", "骑行"),
         ("排球", "攀岩"), ("高尔夫", "太极拳")],
    ),
}  # fmt: skip

HELD_OUT: dict[str, Fact] = {
    "city": (
        "Home for me is {a}.",
        "The move is done, we live in {b} now.",
        "What city do I live in now?",
        "Which city did I live in before {b}?",
        [("Oslo", "Trondheim"), ("Basel", "Zurich"), ("Nice", "Marseille"), ("Brno", "Prague"),
         ("York", "Bath"), ("Cluj", "Sibiu")],
    ),
    "employer": (
        "I work as a nurse at {a}.",
        "New job! I'm a nurse at {b} now.",
        "Which hospital do I work at?",
        "Where did I work before {b}?",
        [("St Anne's Hospital", "Riverside Clinic"), ("Kingsbridge Infirmary", "Westfield Medical"),
         ("Hillcrest Hospital", "Lakeside Care"), ("Mercy General", "Oakridge Hospital"),
         ("Northfield Clinic", "Seaview Hospital"), ("Elmwood Hospital", "Highgate Medical")],
    ),
    "phone": (
        "I use a {a}.",
        "My {a} broke, so I bought a {b}.",
        "What phone do I use?",
        None,
        [("Pixel 4a", "Galaxy S23"), ("iPhone 8", "Pixel 8"), ("Galaxy A52", "iPhone 14"),
         ("Moto G7", "Nokia G60"), ("OnePlus 9", "iPhone 15"), ("Xperia 5", "Pixel 7a")],
    ),
    "diet": (
        "I'm {a}.",
        "I've changed how I eat: I'm {b} since the summer.",
        "Do I follow a particular diet?",
        None,
        [("pescatarian", "vegetarian"), ("vegetarian", "vegan"), ("vegan", "vegetarian"),
         ("pescatarian", "vegan"), ("vegetarian", "pescatarian"), ("vegan", "pescatarian")],
    ),
    "hobby": (
        "My hobby is {a}.",
        "Lately I've been spending my free time on {b}.",
        "What's my hobby?",
        None,
        [("knitting", "pottery"), ("chess", "painting"), ("photography", "gardening"),
         ("baking", "woodworking"), ("birdwatching", "sailing"), ("sketching", "fishing")],
    ),
    "language": (
        "I'm studying {a} on my phone every evening.",
        "I dropped {a} and started {b} lessons.",
        "Which language am I studying?",
        "Which language did I study before {b}?",
        [("Spanish", "Japanese"), ("French", "Korean"), ("German", "Italian"),
         ("Portuguese", "Mandarin"), ("Dutch", "Arabic"), ("Swedish", "Greek")],
    ),
}  # fmt: skip

HELD_OUT_ZH: dict[str, Fact] = {
    "city": (
        "我在{a}生活。",
        "我已经搬去{b}了。",
        "我住在哪里？",
        "去{b}之前我住在哪个城市？",
        [("合肥", "南昌"), ("太原", "济南"), ("兰州", "西宁"), ("南宁", "海口"),
         ("呼和浩特", "银川"), ("乌鲁木齐", "拉萨")],
    ),
    "employer": (
        "我在{a}做设计。",
        "我跳槽到{b}了。",
        "我现在的公司是哪家？",
        "跳槽到{b}之前我在哪家公司？",
        [("青松广告", "白鹭科技"), ("飞鸿传媒", "金桥建筑"), ("绿洲设计", "长风汽车"),
         ("晨光文具", "碧海游戏"), ("紫荆服装", "雪峰电器"), ("东方出版", "北辰网络")],
    ),
    "pet": (
        "我养了一只叫{a}的狗。",
        "{a}走了，我们又养了一只猫，叫{b}。",
        "我的宠物叫什么名字？",
        None,
        [("豆豆", "球球"), ("旺财", "咪咪"), ("小黑", "花花"), ("大黄", "团子"),
         ("可乐", "布丁"), ("毛毛", "汤圆")],
    ),
    "hobby": (
        "我平时喜欢{a}。",
        "最近我对{b}更感兴趣了。",
        "我现在的爱好是什么？",
        None,
        [("钓鱼", "摄影"), ("下棋", "书法"), ("唱歌", "跳舞"), ("画画", "园艺"),
         ("登山", "烘焙"), ("看书", "编织")],
    ),
}  # fmt: skip

# Read in stop 34 to find what fails for `previous` questions: first statements and changes no
# rule reads, but the car.
PROBE_PREVIOUS: dict[str, Fact] = {
    "city": (
        "Home for me is {a}.",
        "We finally moved, we're in {b} now.",
        "Where am I living now?",
        "Which city did I live in before {b}?",
        [("Oslo", "Bergen"), ("Basel", "Geneva"), ("Nice", "Lyon"), ("Brno", "Olomouc"),
         ("York", "Leeds"), ("Cluj", "Iasi")],
    ),
    "employer": (
        "I'm a teacher at {a}.",
        "New school: I teach at {b} now.",
        "Which school do I teach at?",
        "Where did I teach before {b}?",
        [("Hill Primary", "Oak Academy"), ("Elm School", "Bay College"),
         ("Ash High", "Pine School"), ("Fern Academy", "Rose College"),
         ("Lake School", "Moor High"), ("Vale Primary", "Glen Academy")],
    ),
    "hobby": (
        "My hobby is {a}.",
        "These days my free time goes to {b}.",
        "What's my hobby?",
        "What was my hobby before {b}?",
        [("knitting", "pottery"), ("chess", "painting"), ("photography", "gardening"),
         ("baking", "woodworking"), ("birdwatching", "sailing"), ("sketching", "fishing")],
    ),
    "car": (
        "I drive a {a}.",
        "Got a new car, a {b}.",
        "What car do I drive?",
        "What did I drive before the {b}?",
        [("Fiat 500", "Mini Cooper"), ("VW Golf", "Audi A3"), ("Ford Ka", "Opel Corsa"),
         ("Kia Rio", "Hyundai i20"), ("Seat Leon", "Skoda Fabia"), ("Mazda 2", "Honda Jazz")],
    ),
}  # fmt: skip

SMALL_TALK = {
    "en": [
        "Can you suggest a name for a book club?",
        "What's a polite way to decline an invite?",
        "How do I keep basil alive?",
        "What should I pack for a weekend away?",
        "Recommend a podcast about history.",
    ],
    "zh": [
        "推荐一本适合入门的小说。",
        "怎么让面包保持新鲜？",
        "周末可以做些什么放松？",
        "如何给朋友写生日祝福？",
        "有什么好用的记账方法？",
    ],
}
REPLIES = {
    "en": ("Here are a few ideas.", "Thanks, noted."),
    "zh": ("这里有几个建议。", "好的，记下了。"),
}


def make_users(
    facts: dict[str, Fact], prefix: str, seed: int, lang: str = "en"
) -> list[dict[str, Any]]:
    """Six users, each stating every fact in one session and changing it in a later one."""
    chance = random.Random(seed)
    users = []
    for number in range(6):
        start = datetime(2025, 2, 3, 9) + timedelta(days=5 * number)
        dates = [start + timedelta(days=15 * k) for k in range(5)]
        said: list[list[str]] = [[] for _ in dates]
        questions = []
        for first, change, now, before, values in facts.values():
            old, new = values[number]
            stated, changed = sorted(chance.sample(range(len(dates)), 2))
            said[stated].append(first.format(a=old, b=new))
            said[changed].append(change.format(a=old, b=new))
            questions.append(_question(now, new, [old], "update", lang))
            if before is not None:
                questions.append(_question(before.format(a=old, b=new), old, [], "previous", lang))
        sessions = []
        for k, (date, lines) in enumerate(zip(dates, said, strict=True)):
            lines = lines + chance.sample(SMALL_TALK[lang], 3)
            chance.shuffle(lines)
            messages = []
            ideas, noted = REPLIES[lang]
            for line in lines:
                reply = ideas if line.endswith(("?", "？")) else noted
                messages += [_said("user", line), _said("assistant", reply)]
            sessions.append({"id": f"{prefix}-{number}-s{k + 1}", "date": date.isoformat(),
                             "messages": messages})  # fmt: skip
        ask = dates[-1] + timedelta(days=25 + number)
        users.append({"user": f"{prefix}-{lang}-{number:02d}", "ask_date": ask.isoformat(),
                      "sessions": sessions, "questions": questions})  # fmt: skip
    return users


def _question(text: str, current: str, stale: list[str], kind: str, lang: str) -> dict[str, Any]:
    return {"q": text, "current": current, "stale": stale, "kind": kind, "lang": lang}


def _said(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON files")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sets = (
        ("tuned", TUNED, 33, "en"),
        ("tuned_34", TUNED_34, 331, "en"),
        ("probe", PROBE, 34, "en"),
        ("probe_zh", PROBE_ZH, 341, "zh"),
        ("probe_previous", PROBE_PREVIOUS, 77, "en"),
        ("held_out", HELD_OUT, 342, "en"),
        ("held_out_zh", HELD_OUT_ZH, 343, "zh"),
    )
    for name, facts, seed, lang in sets:
        users = make_users(facts, name.replace("_", ""), seed, lang)
        path = args.out / f"{name}.json"
        path.write_text(json.dumps(users, indent=1) + "\n", encoding="utf-8")
        print(f"{path}: {len(users)} users, {sum(len(u['questions']) for u in users)} questions")


if __name__ == "__main__":
    main()
