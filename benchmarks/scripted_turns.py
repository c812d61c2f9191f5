"""The scripted conversation of ``benchmarks/prepare.py``: turns whose words vary, as a list."""

from __future__ import annotations

import random

__all__ = ["scripted_history", "turn_messages"]

PEOPLE = ("Anna", "Bruno", "Chen Wei", "Dara", "Emil", "Fatima", "Goran", "Hana", "Ivo", "June")
SERVICES = ("checkout", "billing", "search", "payments", "inventory", "login", "shipping", "mail")
CHANGES = (
    "the retry policy and its timeouts",
    "the cache lifetime of product pages",
    "the database pool size",
    "the rate limit for partners",
    "the feature flag for gift cards",
    "the log level of the workers",
    "the alert threshold for latency",
    "the TLS certificates",
)
PLACES = ("Berlin", "Lyon", "Cork", "Osaka", "Lisbon", "Toronto", "Nairobi", "Hangzhou")


def turn_messages(turn: int) -> list[dict[str, object]]:
    """One scripted turn: a question, sometimes a tool exchange, and an answer.

    The words vary from turn to turn (a seeded choice of people, services, changes and
    places), so the cards archived from them are as different as a real user's, not
    near-duplicates of one line. The template's own words (turn, ask, change, deploy, team,
    meet) are in every turn and every question: a worst case for the keyword ranking (see
    BENCHMARKS.md, "prepare with recall").
    """
    pick = random.Random(turn)
    person, service, change, place = (
        pick.choice(PEOPLE),
        pick.choice(SERVICES),
        pick.choice(CHANGES),
        pick.choice(PLACES),
    )
    messages: list[dict[str, object]] = [
        {
            "role": "user",
            "content": f"Turn {turn}: {person} asks what changed in deploy {turn} of {service}"
            f" before the team meets in {place}.",
        }
    ]
    if turn % 4 == 0:
        call = f"call_{turn}"
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "get_deploy", "arguments": f'{{"id": {turn}}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": f"deploy {turn}: 3 files " * 8},
        ]
    messages.append(
        {
            "role": "assistant",
            "content": f"Deploy {turn} of {service} changed {change}; {person} signed it off.",
        }
    )
    return messages


def scripted_history(size: int, first_turn: int = 0) -> list[dict[str, object]]:
    """``size`` messages of scripted turns from ``first_turn`` on (never ending on a call)."""
    history: list[dict[str, object]] = []
    turn = first_turn
    while len(history) < size:
        messages = turn_messages(turn)[: size - len(history)]
        if messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
            messages = messages[:-1]
        history += messages
        turn += 1
    return history
