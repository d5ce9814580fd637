"""What is behind an endpoint, told from its behaviour (issue #23): ``lossless inspect``.

arms.py          the speculation requests: copy, count, free (greedy) and free-t1, in rotating rounds
collect.py       sends them through bench's client, reads /metrics' speculative counters around them
speculation.py   records -> speed and burst ratios with CIs -> `evident` / `not evident` / `inconclusive`,
                 the likely drafter kind and an estimate of the mean accepted length (pure)
identity.py      the tokenizer family from ``usage.prompt_tokens`` of crafted strings, against reference
                 counts (tokenizers.json, made by benchmarks/tokenizer_fingerprints.py) and any tokenizer
                 the user names; the declared model and system_fingerprint
stage.py         InspectOptions -> a card per endpoint (precision: not measured yet), for report/inspect.py
"""
