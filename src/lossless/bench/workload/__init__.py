"""What bench sends: seeded, endless streams of prompts, identical for every endpoint of a run, and
when each goes out.

prompts.py       ``prompts()``: the suites (short, long, mixed, lengths, grounded, prefix:, file:)
arrivals.py      ``poisson()``, ``gamma()``: open-loop send offsets
conversation.py  ``source()``: multi-turn sessions (chat:, conversations:), each turn carrying the history
synthetic.py     ``Synthetic``, ``parse_lengths()``: prompts of exactly N tokens, outputs of asked lengths
trace.py         ``replay()``, ``load_sharegpt()``: recorded traces (Mooncake) and chats (ShareGPT)
"""
