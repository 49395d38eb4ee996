"""The built-in trimming strategies: the sliding window and lexical relevance.

Both are deterministic and local (no network, no model): the same history and budget always
keep the same turns, which makes a trimmed conversation reproducible in tests and logs.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

from llm_guard_sdk.trimming.plan import Plan, TrimInput

_WORD = re.compile(r"\w+")


class SlidingWindow:
    """Keep the most recent turns that fit, as one unbroken stretch.

    It stops at the first turn (newest to oldest) that does not fit rather than skipping to a
    smaller, older one: a window with a hole in it reads as a conversation that never happened.
    """

    name = "sliding_window"

    def plan(self, view: TrimInput) -> Plan:
        """The newest turns whose total fits ``view.room``."""
        return Plan(frozenset(newest_that_fit(view, view.room)))


def newest_that_fit(view: TrimInput, room: int) -> list[int]:
    """Indexes of the newest turns, newest first, while their total fits ``room``."""
    kept: list[int] = []
    for index in reversed(range(len(view.turns))):
        cost = view.cost(view.turns[index])
        if cost > room:
            break
        room -= cost
        kept.append(index)
    return kept


def words(text: str) -> list[str]:
    """Lower-cased word tokens (Unicode letters and digits), the unit of similarity."""
    return _WORD.findall(text.lower())


def tfidf_similarities(query: str, documents: Iterable[str]) -> list[float]:
    """Cosine similarity of each document to ``query`` under TF-IDF weights.

    The inverse document frequency (smoothed: ``log((1 + n) / (1 + df)) + 1``) is taken over
    the documents and the query, so words every turn shares ("the", "please") count for less
    than the words that make a turn about something.
    """
    bags = [Counter(words(text)) for text in documents]
    wanted = Counter(words(query))
    frequency: Counter[str] = Counter()
    for bag in (*bags, wanted):
        frequency.update(bag.keys())
    n = len(bags) + 1

    def vector(bag: Counter[str]) -> dict[str, float]:
        return {w: c * (math.log((1 + n) / (1 + frequency[w])) + 1) for w, c in bag.items()}

    target = vector(wanted)
    target_norm = math.sqrt(sum(v * v for v in target.values()))
    scores: list[float] = []
    for bag in bags:
        weights = vector(bag)
        norm = math.sqrt(sum(v * v for v in weights.values()))
        dot = sum(v * target.get(w, 0.0) for w, v in weights.items())
        scores.append(dot / (norm * target_norm) if norm and target_norm else 0.0)
    return scores


class Relevance:
    """Keep the turns most similar to the latest user message, in their original order.

    The newest ``recent_turns`` turns are kept first (while they fit: "it" and "that" in a
    question usually point at the last exchange); the remaining room goes to the older turns by
    TF-IDF cosine similarity to the latest user message, ties to the newer turn. A turn that does
    not fit is skipped, and a smaller, less similar one may still take its place.

    Args:
        recent_turns: Newest turns kept before any relevance ranking.
    """

    name = "relevance"

    def __init__(self, recent_turns: int = 1) -> None:
        if recent_turns < 0:
            raise ValueError("recent_turns must be >= 0")
        self.recent_turns = recent_turns

    def plan(self, view: TrimInput) -> Plan:
        """The recent turns, then the most relevant older ones that fit."""
        room = view.room
        kept: list[int] = []
        for index in newest_that_fit(view, room)[:self.recent_turns]:
            room -= view.cost(view.turns[index])
            kept.append(index)
        older = [i for i in range(len(view.turns)) if i not in kept]
        texts = [" ".join(view.messages[m]["content"] for m in view.turns[i]) for i in older]
        scores = tfidf_similarities(_query(view), texts)
        for _, index in sorted(zip(scores, older, strict=True), key=lambda p: (-p[0], -p[1])):
            cost = view.cost(view.turns[index])
            if cost <= room:
                room -= cost
                kept.append(index)
        return Plan(frozenset(kept))


def _query(view: TrimInput) -> str:
    """The latest user message (the question being answered), else the last message."""
    for message in reversed(view.messages):
        if message["role"] == "user":
            return str(message["content"])
    return str(view.messages[-1]["content"]) if view.messages else ""
