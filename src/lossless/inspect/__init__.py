"""What is behind an endpoint, told from its behaviour: ``lossless inspect``.

options.py      ``InspectOptions``: what inspect was asked, every default
run.py          ``run()``: a ``Card`` per endpoint -> ``InspectResult`` (report/inspect.py renders it)
arms.py         the speculation requests: copy, count, free (greedy) and free-t1, in rotating rounds
collect.py      ``collect()``: sends them through bench's client, reads /metrics' counters around them
speculation.py  records -> speed and burst ratios -> evident / not evident / inconclusive (pure)
identity.py     ``identify()``: the tokenizer family from ``usage.prompt_tokens`` of crafted strings
precision.py    ``judge()``: which variant of the weights serves, against references (verify's scoring)
context.py      ``measure()``: the longest prompt an endpoint answers, whatever /v1/models declares

collect.py has verify's collect.py's role: what the command asks endpoints.
"""
