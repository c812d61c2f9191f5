"""Knowledge updates in phrasings the dev set does not use, for ``stratamem eval updates``.

The rules that read everyday facts (``memory/cards/everyday.py``) were written from the dev
set's phrasings, so its 0.99 says little about other users. This writes two small sets in the
dev set's format (6 English users each, 5 dated sessions, 5 facts that change once, asked 25-30
days after the last session), each fact said in words of its own:

- ``tuned.json``: the phrasings stop 33's rule fixes were written from ("These days we're living
  in Valencia", "Just joined Northwind Labs", "I drive a Skoda Octavia", "took up climbing");
- ``held_out.json``: other phrasings, written before those fixes and never used to change a
  rule.

    python -m benchmarks.updates_phrasings --out /tmp/phrasings
    stratamem eval updates --data /tmp/phrasings/held_out.json

Run from the repository root. The values are made up; the sets are generated, not stored.
"""

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

HELD_OUT: dict[str, Fact] = {
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

SMALL_TALK = [
    "Can you suggest a name for a book club?",
    "What's a polite way to decline an invite?",
    "How do I keep basil alive?",
    "What should I pack for a weekend away?",
    "Recommend a podcast about history.",
]


def make_users(facts: dict[str, Fact], prefix: str, seed: int) -> list[dict[str, Any]]:
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
            questions.append(_question(now, new, [old]))
            if before is not None:
                questions.append(_question(before.format(a=old, b=new), old, [], "previous"))
        sessions = []
        for k, (date, lines) in enumerate(zip(dates, said, strict=True)):
            lines = lines + chance.sample(SMALL_TALK, 3)
            chance.shuffle(lines)
            messages = []
            for line in lines:
                reply = "Here are a few ideas." if line.endswith("?") else "Thanks, noted."
                messages += [_said("user", line), _said("assistant", reply)]
            sessions.append({"id": f"{prefix}-{number}-s{k + 1}", "date": date.isoformat(),
                             "messages": messages})  # fmt: skip
        ask = dates[-1] + timedelta(days=25 + number)
        users.append({"user": f"{prefix}-en-{number:02d}", "ask_date": ask.isoformat(),
                      "sessions": sessions, "questions": questions})  # fmt: skip
    return users


def _question(text: str, current: str, stale: list[str], kind: str = "update") -> dict[str, Any]:
    return {"q": text, "current": current, "stale": stale, "kind": kind, "lang": "en"}


def _said(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the two JSON files")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, facts, seed in (("tuned", TUNED, 33), ("held_out", HELD_OUT, 331)):
        users = make_users(facts, name.replace("_", ""), seed)
        path = args.out / f"{name}.json"
        path.write_text(json.dumps(users, indent=1) + "\n", encoding="utf-8")
        print(f"{path}: {len(users)} users, {sum(len(u['questions']) for u in users)} questions")


if __name__ == "__main__":
    main()
