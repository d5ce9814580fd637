"""What is behind an endpoint, told from its behaviour (issue #23).

identity.py      the tokenizer family from ``usage.prompt_tokens`` of crafted strings, against reference
                 counts (tokenizers.json, made by benchmarks/tokenizer_fingerprints.py) and any tokenizer
                 the user names; the declared model and system_fingerprint
"""
