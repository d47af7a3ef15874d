"""What a user's module and its config declare: its sizes under the spellings attention code uses (:data:`SPELLINGS`,
and the map from a spelling to attnviz's setting), and its sliding window.

A module says what it is built as in its constructor's arguments, its own attributes and its config object, under the
names attention code gives them; :mod:`attnviz.user_code` (building a module), :mod:`attnviz.tracing` and the rules
of :mod:`attnviz.checks` read those declarations here.
"""

from __future__ import annotations

from torch import nn

# attnviz's setting -> the names a constructor may call it
SPELLINGS = {
    "d_in": ("d_in", "embed_dim", "n_embd", "d_model", "hidden_size", "dim", "emb_dim", "in_features", "input_dim"),
    "d_out": ("d_out", "out_dim", "output_dim", "out_features"),
    "num_heads": ("num_heads", "n_head", "n_heads", "nhead", "heads", "num_attention_heads"),
    "context_length": ("context_length", "block_size", "max_seq_len", "n_positions", "max_len", "seq_len",
                       "max_position_embeddings"),
    "dropout": ("dropout", "attn_pdrop", "p_drop", "dropout_p", "attn_dropout", "attention_dropout", "drop"),
    "qkv_bias": ("qkv_bias", "bias"),
    "batch_first": ("batch_first",),
    "num_kv_groups": ("num_kv_groups", "n_kv_groups", "num_key_value_heads", "n_kv_heads", "num_kv_heads",
                      "n_kv_head"),
    "latent_dim": ("latent_dim", "kv_lora_rank", "kv_latent_dim"),
    "sliding_window_size": ("sliding_window_size", "sliding_window", "window_size", "attention_window"),
}
# the names a module or a constructor keeps its config object under (``self.config``, a ``cfg`` parameter …)
CONFIG_NAMES = ("config", "cfg", "args", "conf")
SETTING_OF = {spelling: setting for setting, spellings in SPELLINGS.items() for spelling in spellings}  # -> setting


def is_size(value) -> bool:
    """Whether ``value`` is a size: a positive whole number (an int, not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def declared(module: nn.Module, setting: str) -> tuple[str, int] | None:
    """(the name, the size) a module keeps for attnviz's ``setting`` (``d_in``, ``num_heads``, ``context_length``,
    ``num_kv_groups`` …): the first of the names its constructor may call it (:data:`SPELLINGS`: ``emb_dim``,
    ``max_position_embeddings`` …) whose attribute is a size (:func:`is_size`); None: it keeps none."""
    for name in SPELLINGS[setting]:
        value = getattr(module, name, None)
        if is_size(value):
            return name, value
    return None


def declared_size(module: nn.Module, setting: str) -> int | None:
    """The size a module keeps for attnviz's ``setting`` under any of its spellings (:func:`declared`); None: none."""
    found = declared(module, setting)
    return None if found is None else found[1]


def declared_window(module: nn.Module) -> int | None:
    """The sliding window a module says it has, in the spellings attention code uses: its own attribute (None there
    says it has none), else its config object's (:func:`_config_window`); a module that says neither reads its
    submodules — those that keep the attribute (transformers' Qwen2 and Gemma layers, whose ``sliding_window`` is None
    on a full-attention layer), else those whose config declares one (Mistral's layer reads
    ``self.config.sliding_window``) — when they all say the same.  None: none says one.  The one reader of
    mask-convention and kv-cache."""
    said = _attribute_window(module)
    if said is not _SAYS_NOTHING:
        return said
    if (window := _config_window(module)) is not None:
        return window
    subs = [sub for _, sub in module.named_modules() if sub is not module]
    kept = {window for sub in subs if (window := _attribute_window(sub)) is not _SAYS_NOTHING}
    if not kept:
        kept = {window for sub in subs if (window := _config_window(sub)) is not None}
    return kept.pop() if len(kept) == 1 else None


_SAYS_NOTHING = object()  # a module with no window attribute in any spelling


def _attribute_window(module: nn.Module):
    """The window a module keeps as an attribute (:func:`declared_size`); None when it keeps one of its spellings
    that is no size (None: no window on this layer); ``_SAYS_NOTHING`` when it keeps none."""
    window = declared_size(module, "sliding_window_size")
    spellings = SPELLINGS["sliding_window_size"]
    return window if window is not None or any(name in dir(module) for name in spellings) else _SAYS_NOTHING


def _config_window(module: nn.Module) -> int | None:
    """The window a module's config object (``self.config``, ``cfg`` …, as ``user_code`` reads one) declares for
    it, unless the config switches it off: ``use_sliding_window=False``; ``layer_types`` whose entry for the
    module's ``layer_idx`` (or, without one, any entry) is not "sliding_attention"; or, without ``layer_types``,
    ``max_window_layers`` above the module's ``layer_idx`` (Qwen2's layers below it attend to every key)."""
    for name in CONFIG_NAMES:
        config = getattr(module, name, None)
        window = next((getattr(config, spelling) for spelling in SPELLINGS["sliding_window_size"]
                       if is_size(getattr(config, spelling, None))), None)
        if window is None:
            continue
        layer, layer_types = getattr(module, "layer_idx", None), getattr(config, "layer_types", None)
        known = isinstance(layer, int) and not isinstance(layer, bool)
        if getattr(config, "use_sliding_window", True) is False:
            return None
        if isinstance(layer_types, list | tuple) and layer_types:
            kinds = {layer_types[layer]} if known and 0 <= layer < len(layer_types) else set(layer_types)
            return window if kinds == {"sliding_attention"} else None
        below = getattr(config, "max_window_layers", None)
        if isinstance(below, int) and below > 0 and (not known or layer < below):
            return None
        return window
    return None
