"""The network and what runs it, gpt-fast style.

args.py             ``ModelArgs``: hyper-parameters, with tiny configs for tests
transformer.py      ``Transformer``: the decoder, its KV cache and RoPE
sampling.py         ``warp()``, ``sample()``: the one temperature -> top-k -> top-p, shared with the drafts
generate.py         ``prefill()``, ``decode_one_token()``, ``generate_text()``: tokens -> text deltas
constrain.py        ``Constraint``: a grammar masking the distribution (tool calls, JSON schemas)
tokenizer.py        ``Tokenizer``: byte-level BPE from tokenizer.json or GGUF, chat templates
prompt_numerics.py  ``choose_prompt_model()``: the numerics a prompt runs in (a float32 twin or its own)
"""
