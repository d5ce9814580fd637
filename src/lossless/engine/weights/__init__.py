"""Weights from checkpoint files, and the kernels that multiply them.

hf.py         ``load_hf()``, ``Checkpoint``: a Hugging Face folder; ``to_our_layout()``, both loaders end
gguf.py       ``load_gguf()``: a llama.cpp GGUF, its blocks dequantized (or kept in 4 bits) and its tokenizer
quant.py      ``Int4Weight``, ``Int4Linear``, ``kernel()``: a GGUF's Q4_0 / Q4_1 blocks served as they are
block_kernels.py  ``available()``: our Q4 x Q8 and Q8 x Q8 kernels (block_kernels.cpp), built once per machine
build.py      ``build_model()``: a checkpoint's weights in our Transformer, each layer on its kernel
packed.py     ``pack_output()``: the output layer packed once for oneDNN's bfloat16
dtype.py      ``resolve_dtype()``: --dtype, and what auto picks from the file and the CPU (torch-free)
"""
