"""Continuous batching: many requests' sequences stepped together on one model, each as it would be alone.

forward.py   ``forward_packed()``, ``SlotCache``, ``Span``: several sequences' new tokens in one pass
decode.py    ``TokenBatch``, ``DecodeBatch``: sequences join and leave each step, speculating inside the batch
sequence.py  ``BatchSequence``: one sequence's slot, prompt, drafter and what it runs next
"""
