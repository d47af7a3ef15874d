"""What a user's module and its config declare: the sliding window.

A module says what it is built as in its own attributes and in its config object, under the spellings attention code
uses; the rules of :mod:`attnviz.checks` read those declarations here.
"""

from __future__ import annotations

from torch import nn

from attnviz import user_code
from attnviz.user_code import declared_size


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
    spellings = user_code.SPELLINGS["sliding_window_size"]
    return window if window is not None or any(name in dir(module) for name in spellings) else _SAYS_NOTHING


def _config_window(module: nn.Module) -> int | None:
    """The window a module's config object (``self.config``, ``cfg`` …, as ``user_code`` reads one) declares for
    it, unless the config switches it off: ``use_sliding_window=False``; ``layer_types`` whose entry for the
    module's ``layer_idx`` (or, without one, any entry) is not "sliding_attention"; or, without ``layer_types``,
    ``max_window_layers`` above the module's ``layer_idx`` (Qwen2's layers below it attend to every key)."""
    for name in user_code.CONFIG_NAMES:
        config = getattr(module, name, None)
        window = next((getattr(config, spelling) for spelling in user_code.SPELLINGS["sliding_window_size"]
                       if user_code.is_size(getattr(config, spelling, None))), None)
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
