"""A checkpoint's weights placed in our Transformer, ready to serve: its int4 layers on the kernel asked
for, its output layer on ours (the file's Q8_0 blocks) or on oneDNN's packed bfloat16, its KV cache, and
where it pays a float32 twin of the weights to process prompts with (`prompt_numerics`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lossless.engine.weights.packed import pack_output
from lossless.engine.weights.quant import kernel, use_q8_output

if TYPE_CHECKING:
    from torch import Tensor

    from lossless.engine.model.args import ModelArgs
    from lossless.engine.model.transformer import Transformer
    from lossless.engine.weights.hf import Checkpoint


def build_model(
    checkpoint: Checkpoint,
    max_context: int | None = None,
    float32_prompts: bool | None = None,
    int4_kernel: str | None = None,
) -> tuple[Transformer, str | None]:
    """Our Transformer holding the checkpoint's weights, with its KV cache for ``max_context`` positions,
    and a line saying what processes its prompts (None for float32 weights).
    A bfloat16 or int4 model may get a float32 twin of its weights (the int4 layers' as the kernel
    computes them) to process prompts with: ``float32_prompts`` says so, or None leaves it to
    `prompts.choose_prompt_model`. A bfloat16 output layer runs on oneDNN's packed weight where
    `packed.can_pack`."""
    import torch

    from lossless.engine.model.prompt_numerics import choose_prompt_model

    weights = dict(checkpoint.weights)
    model = _holding(checkpoint.args, weights)
    if checkpoint.int4:
        from lossless.engine.weights.quant import use_int4

        use_int4(model, checkpoint.int4, int4_kernel)
    model.setup_cache(max_context)
    if not use_q8_output(model, checkpoint.output_q8, int4_kernel):  # the file's Q8_0 blocks on our kernel
        pack_output(model)  # else a bfloat16 output layer on a CPU that computes bfloat16: packed once
    if model.output.weight.dtype != torch.bfloat16:
        return model.eval(), None

    def twin() -> Transformer:
        chosen = kernel(int4_kernel)[0]
        exact = {f"{name}.weight": w.dense(torch.float32, chosen) for name, w in checkpoint.int4.items()}
        wide = {name: exact[name] if name in exact else w.float() for name, w in weights.items()}
        return _holding(checkpoint.args, wide).eval()

    name = "int4" if checkpoint.int4 else "bfloat16"
    return model.eval(), choose_prompt_model(model, twin, float32_prompts, name)


def _holding(args: ModelArgs, weights: dict[str, Tensor]) -> Transformer:
    import torch

    from lossless.engine.model.transformer import Transformer

    with torch.device("meta"):
        model = Transformer(args)  # no memory, no random init: the weights come next
    if args.tie_embeddings:
        weights = weights | {"output.weight": weights["tok_embeddings.weight"]}
    model.load_state_dict(weights, strict=True, assign=True)
    if args.tie_embeddings:
        model.output.weight = model.tok_embeddings.weight  # assign=True made two parameters: tie again
    return model
