"""Lossless speculative decoding: draft -> one target forward -> accept or resample -> roll back.

spec.py          ``DrafterSpec``, ``parse_drafter_spec()``: --speculative, per-kind defaults (torch-free)
speculative.py   ``speculative_decode()``: the exact acceptance rule, chains and trees (``judge_chain()``,
                 ``judge_tree()``: the rule once the target has scored a draft, also a batch's)
stats.py         ``SpecStats``: a request's acceptance figures
drafts.py        ``NgramDrafter``, ``ModelDrafter``: prompt lookup, and a small draft checkpoint
head.py          ``DSparkHead``: the trained draft head (a block of drafts from the target's hidden states)
head_drafter.py  ``HeadDrafter``: serving with the head, prompt lookup beside it

The head shipped for the embedded model (weights, recipe, training log) lies in heads/smollm2-135m.
"""
