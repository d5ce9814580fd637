"""The requests that tell speculative decoding from plain decoding: four arms, sent in interleaved rounds.

Plain decoding costs the same per token whatever the text; a speculative decoder emits several tokens
per target forward where its drafts are right, so its speed depends on how predictable the text is:
    copy     greedy copy of a passage the prompt holds: what a prompt-lookup (n-gram) drafter drafts
    count    greedy counting: predictable text that is *not* in the prompt (a draft model's, not n-gram's)
    free     an open-ended story, greedy: a draft model agrees with a greedy target more often ...
    free-t1  ... than with the same prompt sampled at temperature 1: the unpredictable reference
Each round sends one request of each arm, one at a time, in an order that rotates from round to round,
so that a change of load (another process, a thermal limit) falls on every arm alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from lossless.client.prompt import Prompt


@dataclass(frozen=True)
class Arm:
    name: str
    temperature: float
    words: str  # for people: what the arm's text is


REFERENCE = "free-t1"
ARMS = (
    Arm("copy", 0.0, "copying a passage from the prompt, greedy"),
    Arm("count", 0.0, "counting, greedy"),
    Arm("free", 0.0, "a story, greedy"),
    Arm(REFERENCE, 1.0, "the same story prompt at temperature 1"),
)
ARM = {a.name: a for a in ARMS}

# Passages of ordinary prose, long enough (~110 tokens each) that a copy never runs out before max_tokens.
_PASSAGES = (
    "The old harbour town wakes before the sun. Fishing boats come in with the tide, and the market opens "
    "on the quay as soon as the first crates are landed. Traders shout their prices, gulls circle over the "
    "nets, and children run between the stalls on their way to school. By nine o'clock the boats are "
    "washed, the nets are mended and hung to dry, and the square is quiet again until the evening ferry "
    "brings the visitors from the mainland.",
    "A good loaf of bread needs only flour, water, salt and time. The baker mixes the dough in the evening "
    "and leaves it to rise slowly overnight in a cool room. In the morning she folds it, shapes it into "
    "rounds and lets it rest once more while the oven heats. The loaves bake for forty minutes until the "
    "crust is dark and crisp, and they must cool on a rack for an hour before anyone is allowed to cut them.",
    "The library on the hill was built from grey stone more than two hundred years ago. Its reading room "
    "has tall windows on three sides, long oak tables and green lamps that are lit even on summer "
    "afternoons. Students come to read in silence, and the old librarian knows where every book is kept, "
    "although the catalogue was lost in a flood long before she was born. Once a year the doors open for "
    "a night of music, and the whole town climbs the hill to listen.",
)
_TOPICS = (
    "a lighthouse keeper who finds a message in a bottle",
    "a robot that learns to paint",
    "two friends lost in a forest at night",
    "a cat that runs a small bakery",
    "a girl who can talk to the wind",
    "an old train that refuses to stop",
)


def prompt(arm: Arm, round_: int) -> Prompt:
    """Round ``round_``'s prompt of ``arm``; free and free-t1 of one round share their prompt."""
    if arm.name == "copy":
        text = f"Repeat the following text exactly, word for word:\n\n{_PASSAGES[round_ % len(_PASSAGES)]}"
    elif arm.name == "count":
        # always from 1: a model asked to start at 201 answered "201 to 300." and stopped
        text = "Count from 1 to 100, with the numbers separated by commas."
    else:
        text = f"Write a short story about {_TOPICS[round_ % len(_TOPICS)]}."
    return Prompt(f"{arm.name}-{round_}", arm.name, (("user", text),))


def order(round_: int) -> tuple[Arm, ...]:
    """The arms in round ``round_``'s order: rotated by one each round (a Latin square over 4 rounds)."""
    k = round_ % len(ARMS)
    return ARMS[k:] + ARMS[:k]
