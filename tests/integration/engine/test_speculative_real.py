"""On the real SmolLM2-135M (float32): greedy speculative decoding with the n-gram drafter gives the
plain greedy text. float32 batched and one-token forwards round differently, so a near-tie may flip a
token: 18 of 20 prompts must match exactly, and drafts must really have been made and accepted."""

from __future__ import annotations

import pytest
import torch

from lossless.engine.engine import Engine
from lossless.engine.model.generate import generate_text
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate.drafts import NgramDrafter
from lossless.engine.speculate.speculative import speculative_decode
from lossless.engine.speculate.stats import SpecStats

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(max_tokens=48, temperature=0.0)
TEXTS = [
    "The quick brown fox jumps over the lazy dog near the river bank every morning.",
    "Our meeting is moved to Thursday at three o'clock in the large conference room.",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
    "Please remember to water the plants and feed the cat while I am away this weekend.",
    "The train to Edinburgh leaves from platform nine at half past seven every evening.",
]
CODE = [
    "def area(w, h):\n    result = w * h\n    return result\n",
    "for item in items:\n    total = total + item.price\nprint(total)\n",
    "def greet(name):\n    message = 'Hello, ' + name\n    return message\n",
    "x = load(path)\nx = clean(x)\nsave(x, path)\n",
    "count = 0\nwhile count < 10:\n    count = count + 1\n",
]
PROMPTS = (
    [f"Repeat this sentence exactly: {t}" for t in TEXTS]
    + [f"Correct the spelling: {t.replace('e', 'ee', 2).replace('the', 'teh')}" for t in TEXTS]
    + [f"Rename the variables to longer, clearer names in this code:\n{c}" for c in CODE]
    + [f"Rewrite this in a formal tone: {t}" for t in TEXTS]
)


@pytest.fixture
def engine(smollm2_engine: Engine) -> Engine:
    return smollm2_engine


def test_ngram_greedy_equals_plain_greedy_on_the_real_model(engine: Engine) -> None:
    assert len(PROMPTS) == 20
    same, stats = 0, SpecStats(8)
    for prompt in PROMPTS:
        ids = engine.chat_prompt([{"role": "user", "content": prompt}])
        plain = [t for d in engine.generate(ids, GREEDY) for t in d.token_ids]
        source = speculative_decode(
            engine.model,
            NgramDrafter(8),
            ids,
            GREEDY,
            max_new_tokens=48,
            k_max=8,
            generator=torch.Generator(),
            stats=stats,
        )
        spec = [t for d in generate_text(source, engine.tokenizer, GREEDY, budget=48) for t in d.token_ids]
        same += spec == plain
    assert same >= 18, f"only {same} of 20 prompts gave the plain greedy text"
    assert stats.drafted > 100 and stats.accepted > stats.drafted / 4, stats.as_dict()
