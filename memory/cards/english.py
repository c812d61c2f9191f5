"""The English extraction rules: identity, profile, preferences, stack, decisions, tasks.

Each rule reads one sentence of the user's (case-insensitive) and words a card about "User".
Values stop at a clause boundary (a comma, "but", "because", "and I ..."), so one sentence can
give several cards and no card swallows the next clause.
"""

from __future__ import annotations

import re

from memory.cards.model import normalize_text
from memory.cards.phrasing import category_of
from memory.cards.rulebook import Finding, Rule, rule, word_set
from memory.cards.supersede import task_attribute

__all__ = [
    "END",
    "ENGLISH_RULES",
    "I_AM",
    "NAME",
    "PLACE",
    "VALUE",
    "capitalized_words",
    "clean_value",
]

ENGLISH_RULES: list[Rule] = []

#: Where a value ends: punctuation, the end, or a conjunction that starts another clause.
END = (
    r"(?=\s*(?:[,.;!?\n]|$)|\s+(?:but|because|since|so|though|although|which|while|as|"
    r"and\s+(?:i|i'm|we|my|our))\b)"
)
VALUE = r"(?P<v>[^,.;!?\n]+?)"
NAME = r"(?P<v>[^\W\d_][\w'-]*(?:\s+[^\W\d_][\w'-]*){0,2})"
PLACE = r"(?P<v>[^\W\d_][\w'.-]*(?:\s+(?:[^\W\d_][\w'.-]*)){0,3})"
I_AM = r"\b(?:i'm|i\u2019m|i am)"

# Capitalized words after "I'm" that are not names.
_NOT_NAMES = word_set(
    "sorry fine ok okay good great back here there done ready sure not so just also still "
    "american british english german french chinese japanese spanish italian canadian indian "
    "australian russian brazilian mexican korean dutch swedish polish portuguese irish "
    "christian muslim jewish catholic vegan vegetarian monday tuesday wednesday thursday "
    "friday saturday sunday today tomorrow tonight"
)
_JOBS = re.compile(
    r"(?:engineer|developer|programmer|designer|manager|teacher|student|doctor|nurse|lawyer|"
    r"accountant|analyst|scientist|consultant|architect|writer|artist|researcher|professor|"
    r"chef|pilot|driver|founder|ceo|cto|freelancer|photographer|journalist|editor|musician|"
    r"dentist|pharmacist|therapist|economist|translator|salesman|salesperson|intern|"
    r"administrator|admin|officer|technician|mechanic|electrician|plumber|carpenter|farmer)$",
    re.IGNORECASE,
)
_PRONOUNS = word_set("it that this them you him her those these one so much all")
_FILLER = re.compile(
    r"\s+(?:anymore|any more|at all|too|very much|a lot|so much|now|these days|though|either)$",
    re.IGNORECASE,
)
_ARTICLE = re.compile(r"^(?:the|a|an|to)\s+", re.IGNORECASE)


def clean_value(value: str) -> str:
    """``value`` stripped of trailing filler ("now", "these days", "anymore", ...)."""
    value = value.strip()
    while (shorter := _FILLER.sub("", value)) != value:
        value = shorter
    return value


def capitalized_words(value: str) -> str | None:
    """The capitalized words ``value`` starts with (a place's or a company's name), if any.

    ``"Porto with my wife"`` gives ``"Porto"``; a first word that is no name (``"Monday"``,
    ``"vegan"``) or a lower-case one gives ``None``.
    """
    kept: list[str] = []
    for word in value.split():
        if not word[0].isupper() and not word[0].isdigit():
            break
        kept.append(word)
    if not kept or not kept[0][0].isupper() or kept[0].lower() in _NOT_NAMES:
        return None
    return " ".join(kept).rstrip(".")


def _is_name(value: str) -> bool:
    words = value.split()
    return all(word[0].isupper() for word in words) and words[0].lower() not in _NOT_NAMES


@rule(ENGLISH_RULES, rf"\bmy name is {NAME}{END}")
def _my_name(match: re.Match[str]) -> Finding | None:
    # "my name is" is explicit enough to keep a name typed in lower case as it was typed.
    return Finding("profile", f"User's name is {match['v']}", "identity", attribute="name")


@rule(ENGLISH_RULES, rf"\b(?:call me|you can call me|people call me) {NAME}{END}")
def _call_me(match: re.Match[str]) -> Finding | None:
    if not _is_name(match["v"]):  # "call me tomorrow", "call me back"
        return None
    text = f"User wants to be called {match['v']}"
    return Finding("profile", text, "identity", attribute="preferred_name")


@rule(ENGLISH_RULES, rf"(?:^|\b(?:hi|hello|hey),?\s+|^\W*){I_AM}\s+{NAME}{END}")
def _i_am_name(match: re.Match[str]) -> Finding | None:
    if not _is_name(match["v"]):
        return None
    return Finding("profile", f"User's name is {match['v']}", "identity", attribute="name")


@rule(ENGLISH_RULES, rf"{I_AM}\s+(?P<v>\d{{1,3}})(?:\s+years?\s+old|\s*y/?o)?{END}")
def _age(match: re.Match[str]) -> Finding | None:
    return Finding("profile", f"User is {match['v']} years old", "profile", attribute="age")


@rule(ENGLISH_RULES, rf"\bi work as (?P<a>an?\s+)?{VALUE}{END}")
def _works_as(match: re.Match[str]) -> Finding | None:
    text = f"User works as {match['a'] or ''}{clean_value(match['v'])}"
    return Finding("profile", text, "work", attribute="occupation")


@rule(ENGLISH_RULES, rf"{I_AM}\s+(?P<a>an?)\s+{VALUE}{END}")
def _i_am_a(match: re.Match[str]) -> Finding | tuple[Finding, ...] | None:
    job, _, employer = clean_value(match["v"]).partition(" at ")
    if len(job.split()) > 4 or not _JOBS.search(job):  # "I'm a bit tired" is no job
        return None
    occupation = Finding("profile", f"User is {match['a']} {job}", "work", attribute="occupation")
    if not employer:
        return occupation
    # "a software engineer at Acme": the job, and where the user does it.
    return occupation, Finding("profile", f"User works at {employer}", "work", attribute="employer")


@rule(ENGLISH_RULES, rf"\bi (?:work|am working|'m working) (?:at|for) {VALUE}{END}")
def _works_at(match: re.Match[str]) -> Finding | None:
    text = f"User works at {clean_value(match['v'])}"
    return Finding("profile", text, "work", attribute="employer")


@rule(ENGLISH_RULES, rf"\bi (?:live|am living|'m living|currently live|now live) in {PLACE}")
def _lives_in(match: re.Match[str]) -> Finding | None:
    return _place(match, "User lives in {where}")


@rule(ENGLISH_RULES, rf"{I_AM} (?:based|located) in {PLACE}")
def _based_in(match: re.Match[str]) -> Finding | None:
    return _place(match, "User lives in {where}")


@rule(
    ENGLISH_RULES,
    r"\bi(?:'ve| have)? (?:just |recently |finally )?(?:moved|relocated)(?: back)?(?: house)?"
    rf"(?: from [^,.;!?]+?)? to {PLACE}",
)
def _moved_to(match: re.Match[str]) -> Finding | None:
    # Said as where the user lives now: "where do I live?" must find it, not only "moved".
    return _place(match, "User lives in {where}, having moved there", dated=True)


@rule(ENGLISH_RULES, rf"(?:{I_AM}|\bi come) (?:originally )?from {PLACE}")
def _from(match: re.Match[str]) -> Finding | None:
    return _place(match, "User is from {where}", attribute="hometown")


def _place(
    match: re.Match[str], text: str, *, attribute: str = "city", dated: bool = False
) -> Finding | None:
    """A place card: ``text`` with ``{where}`` replaced by the capitalized place name."""
    # Place names are capitalized: keep the capitalized words only ("Porto with my wife").
    where = capitalized_words(match["v"])
    if where is None or category_of(where) is not None:  # "I moved to Postgres"
        return None
    return Finding(
        "profile",
        text.format(where=where),
        "location",
        attribute=attribute,
        dated_by_sentence=dated,
    )


_VERBS = {
    "prefer": "prefers", "like": "likes", "love": "loves", "enjoy": "enjoys", "hate": "hates",
    "dislike": "dislikes", "adore": "adores", "can't stand": "can't stand",
    "cannot stand": "can't stand",
}  # fmt: skip
_NEGATED = {"like": "doesn't like", "love": "doesn't love", "enjoy": "doesn't enjoy",
            "prefer": "doesn't prefer"}  # fmt: skip


@rule(
    ENGLISH_RULES,
    r"\bi (?P<neg>don't |do not |no longer |never )?(?:really |absolutely |kind of |just )?"
    rf"(?P<verb>prefer|like|love|enjoy|hate|dislike|adore|can't stand|cannot stand) {VALUE}{END}",
)
def _preference(match: re.Match[str]) -> Finding | None:
    verb = match["verb"].lower()
    what = clean_value(match["v"])
    if what.lower() in _PRONOUNS or what.lower().split()[0] in ("it", "that", "this", "you"):
        return None  # "I love it" says nothing without its antecedent
    said = _NEGATED.get(verb, _VERBS[verb]) if match["neg"] else _VERBS[verb]
    # "tea over coffee": the preference is about tea.
    key = re.split(r"\s+(?:over|rather than|instead of|more than)\s+", what, maxsplit=1)[0]
    attribute = "preference:" + normalize_text(_ARTICLE.sub("", key))
    return Finding("preference", f"User {said} {what}", "preference", attribute=attribute)


@rule(ENGLISH_RULES, rf"{I_AM} (?:a (?:big |huge )?fan of|into|fond of) {VALUE}{END}")
def _fan_of(match: re.Match[str]) -> Finding | None:
    what = clean_value(match["v"])
    attribute = "preference:" + normalize_text(_ARTICLE.sub("", what))
    return Finding("preference", f"User likes {what}", "preference", attribute=attribute)


@rule(ENGLISH_RULES, rf"{I_AM} allergic to {VALUE}{END}")
def _allergy(match: re.Match[str]) -> Finding | None:
    what = clean_value(match["v"])
    attribute = "allergy:" + normalize_text(_ARTICLE.sub("", what))
    return Finding("profile", f"User is allergic to {what}", "health", attribute=attribute)


DIETS = (
    r"vegan|vegetarian|pescatarian|flexitarian|keto|paleo|gluten-free|dairy-free|lactose-free|"
    r"carnivore|omnivore"
)


@rule(
    ENGLISH_RULES,
    rf"(?:{I_AM}|\bi(?:'ve| have)? (?:gone|went|become|became|turned))"
    rf"(?: (?:now|fully|completely|strictly|mostly|also|a|back to being))* (?P<v>{DIETS})\b",
)
def _diet(match: re.Match[str]) -> Finding | None:
    return Finding("profile", f"User is {match['v'].lower()}", "health", attribute="diet")


def _tool(thing: str, purpose: str | None) -> str:
    category = category_of(thing)
    if category is not None:
        return category
    if purpose:
        return "tool:" + normalize_text(_ARTICLE.sub("", purpose))
    return "uses:" + normalize_text(thing)


@rule(
    ENGLISH_RULES,
    r"\bwe(?:'re| are)? (?:use|using|run|running|rely on|build with|are building with) "
    rf"(?P<v>[^,.;!?\n]+?)(?: for (?P<for>[^,.;!?\n]+?))?{END}",
)
def _we_use(match: re.Match[str]) -> Finding | None:
    thing, purpose = clean_value(match["v"]), match["for"] and clean_value(match["for"])
    if thing.lower() in _PRONOUNS:
        return None
    text = f"The team uses {thing}" + (f" for {purpose}" if purpose else "")
    return Finding("fact", text, "stack", subject="team", attribute=_tool(thing, purpose))


_OUR = {"db": "database", "stack": "stack", "tech stack": "stack"}


@rule(
    ENGLISH_RULES,
    r"\bour (?P<what>tech stack|stack|database|db|backend|frontend|language|cloud|ci|editor|"
    rf"framework|cache) is {VALUE}{END}",
)
def _our_x_is(match: re.Match[str]) -> Finding | None:
    what = match["what"].lower()
    text = f"The team's {what} is {clean_value(match['v'])}"
    return Finding("fact", text, "stack", subject="team", attribute=_OUR.get(what, what))


@rule(
    ENGLISH_RULES,
    rf"\bwe(?:'ve| have)? (?:switched|moved|migrated|changed) (?:over )?to {VALUE}{END}",
)
def _switched(match: re.Match[str]) -> Finding | None:
    thing = clean_value(match["v"])
    category = category_of(thing)
    if category is None:  # "we moved to Berlin" is not about the stack
        return None
    return Finding("fact", f"The team switched to {thing}", "stack", "team", category)


@rule(ENGLISH_RULES, rf"\b(?:we|i)(?:'ve| have)? decided (?P<how>to|on|that) {VALUE}{END}")
def _decided(match: re.Match[str]) -> Finding | None:
    what = clean_value(match["v"])
    return _decision(f"Decided {match['how'].lower()} {what}", what)


@rule(
    ENGLISH_RULES,
    rf"\b(?:let's|let us|we'll|we will) (?P<how>go with|use|pick|choose|stick with) {VALUE}{END}",
)
def _lets_go_with(match: re.Match[str]) -> Finding | None:
    what = clean_value(match["v"])
    return _decision(f"Decided to {match['how'].lower()} {what}", what)


def _decision(text: str, what: str) -> Finding:
    category = category_of(what)
    return Finding(
        "fact", text, "decision", subject="team" if category else None, attribute=category
    )


_NOT_TASKS = re.compile(r"^(?:know|understand|think|say|admit|ask|be honest|tell you)\b", re.I)


@rule(
    ENGLISH_RULES,
    r"(?:\bremind me to|\bi (?:need|have|'ve got|must|got) to|\b(?:don't|do not) forget to|"
    r"\bto-?do\s*:|\btodo\b:?)\s+(?P<v>[^.;!?\n]+)",
)
def _todo(match: re.Match[str]) -> Finding | None:
    what = clean_value(match["v"])
    if _NOT_TASKS.match(what):
        return None
    return Finding("task", f"To do: {what}", "task", attribute=task_attribute(what))


@rule(
    ENGLISH_RULES,
    r"\b(?:i(?:'ve| have)? (?:just |already |finally )?(?:finished|completed|wrapped up)|"
    r"(?:i'm |i am )?done with)\s+(?P<v>[^.;!?\n]+)",
)
def _done(match: re.Match[str]) -> Finding | None:
    what = clean_value(match["v"])
    return Finding("task", f"Done: {what}", "task", attribute=task_attribute(what))
