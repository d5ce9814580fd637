"""``lossless draft train``: self-distil the DSpark-style draft head for the embedded model. The head
and the drafter that serves it are ``engine.speculate``: this package imports the engine, never the
reverse. The head it made for the embedded model ships with the engine, in engine/speculate/heads/
(with its recipe and training log).

recipe.py  ``Recipe``: every setting of the training, with why it is so (no torch)
data.py    ``target_answers()``: the target's own answers to the bundled prompts (prompts.jsonl)
train.py   ``train_head()``: train, calibrate the confidence head, evaluate, write the head
"""
