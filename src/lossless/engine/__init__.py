"""The reference inference engine: a Llama-family model on the CPU, served with lossless speculative
decoding. Parts, each importing only those below it (tests/unit/test_architecture.py):

engine.py   ``Engine``: load a checkpoint, build its drafter, turn requests into streams of text deltas
compile_cache.py  compiled graphs on disk, one folder per configuration; ``compile_aside`` while serving
batch/      continuous batching: sequences join and leave every step, each speculating as alone
speculate/  draft -> verify -> accept with exact rejection sampling; n-gram, draft-model and DSpark drafters
weights/    checkpoints read (GGUF, Hugging Face), int4 blocks and their kernels, the packed output layer
model/      the network, sampling, generation, constrained decoding, the tokenizer
cpu.py      ``flags()``, ``native_bfloat16()``: what this CPU computes, read once (torch-free)
torch_thread.py  ``in_fresh_thread``: torch work on a thread that ends with it (one OpenMP team at a time)

Importing the package imports nothing: ``engine.cpu`` and ``speculate.spec`` are torch-free, for the CLI.
"""
