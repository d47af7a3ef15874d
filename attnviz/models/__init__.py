"""Real GPT models: the book's Chapter 4 ``GPTModel``, checkpoints loaded into it, and what it attends to.

``gpt``: the model (checkpoint loading, attention maps, layer traces and discovery follow).
"""

from attnviz.models.gpt import GELU, GPT_CONFIG_124M, FeedForward, GPTModel, LayerNorm, PathRecorder, TransformerBlock

__all__ = ["GELU", "GPT_CONFIG_124M", "FeedForward", "GPTModel", "LayerNorm", "PathRecorder", "TransformerBlock"]
