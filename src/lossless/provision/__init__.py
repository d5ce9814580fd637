"""Where a command's requests go: the endpoints it was given, or the embedded model served for the
occasion; and the tokenizer that counts an endpoint's output when its server sends no usage.

embedded.py    ``endpoints()``: the URLs given, or the embedded model served (``Embedded``) while a block runs
given.py       ``from_urls()``, ``checked()``: URLs as endpoints (the one model served if none named), checked
counting.py    ``fill_n_out()``: N_out from a declared or found tokenizer; ``load_token_counter()`` by name
"""
