"""Real GPT models: the book's Chapter 4 ``GPTModel``, checkpoints loaded into it, and what it attends to.

``gpt`` (the model, with the book's KV cache), ``cached_attention`` (the bonus attentions with their caches),
``loading`` (checkpoint files -> GPTModel), ``trace`` (attention maps and the recorded path of one layer),
``generation`` (greedy generation with the cache, step by step), ``discovery`` (checkpoints on this machine, listed
by name), ``interventions`` (head ablation, value-weighted attention, rollout, logit lens).
"""

from pathlib import Path

from attnviz.models.discovery import Checkpoint, Checkpoints, checkpoint_args, discover, hf_cache_dir
from attnviz.models.generation import (
    Generation,
    Step,
    StepCheck,
    cache_holds,
    cache_settings,
    check_step,
    check_steps,
    generate,
    layer_windows,
)
from attnviz.models.gpt import (
    GELU,
    GPT_CONFIG_124M,
    CachedMultiHeadAttention,
    FeedForward,
    GPTModel,
    LayerNorm,
    PathRecorder,
    TransformerBlock,
    random_gpt,
)
from attnviz.models.interventions import (
    ablate,
    ablate_next,
    ablation_grid,
    knocked_out,
    logit_lens,
    position_loss,
    rollout,
    value_norms,
    value_weighted,
    value_weighted_module,
)
from attnviz.models.loading import CheckpointError, assign, load_checkpoint
from attnviz.models.trace import (
    LayerTrace,
    attention_maps,
    every_layer,
    iter_layer_maps,
    layer_maps,
    running,
    switch_layer,
    trace_layer,
)

# The model attnviz ships (a GPT-2 folder trained by ``attnviz train``), offered as a weights option
# when its files are present.
BUNDLED = Path(__file__).resolve().parents[1] / "assets" / "bundled"

__all__ = [
    "random_gpt",
    "cache_holds",
    "cache_settings",
    "layer_windows",
    "check_steps",
    "ablate",
    "ablate_next",
    "ablation_grid",
    "knocked_out",
    "logit_lens",
    "position_loss",
    "rollout",
    "value_norms",
    "value_weighted",
    "value_weighted_module",
    "BUNDLED",
    "Checkpoint",
    "Checkpoints",
    "checkpoint_args",
    "discover",
    "hf_cache_dir",
    "GELU",
    "CachedMultiHeadAttention",
    "Generation",
    "Step",
    "StepCheck",
    "check_step",
    "generate",
    "GPT_CONFIG_124M",
    "CheckpointError",
    "FeedForward",
    "GPTModel",
    "LayerNorm",
    "LayerTrace",
    "PathRecorder",
    "TransformerBlock",
    "assign",
    "attention_maps",
    "every_layer",
    "iter_layer_maps",
    "layer_maps",
    "load_checkpoint",
    "running",
    "switch_layer",
    "trace_layer",
]
