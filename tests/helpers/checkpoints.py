"""GPT-2 checkpoints the tests write themselves (no weights are downloaded)."""

from __future__ import annotations


def random_gpt2(seed: int = 0, *, vocab_size: int = 50257, **sizes):
    """A Hugging Face ``GPT2LMHeadModel`` (eager attention, no dropout) with EVERY LayerNorm and bias randomised:
    Hugging Face initialises them to 1 and 0, which would hide a mapping error (a swapped or untransposed
    tensor).  ``sizes``: GPT2Config's n_layer, n_head, n_embd, n_positions."""
    import torch
    import transformers

    config = transformers.GPT2Config(**sizes, vocab_size=vocab_size, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                param.uniform_(-1.5, 1.5) if name.endswith("bias") else param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.3)
    return model


def write_checkpoints(folder, name: str, model, *, broken: bool = False):
    """``model.save_pretrained(folder / name)``; with ``broken``, beside it a truncated ``truncated.safetensors``
    and ``evil.pth``, a pickle that would run code if it were unpickled.  Returns ``folder``."""
    import pickle

    model.save_pretrained(folder / name)
    if broken:
        good = (folder / name / "model.safetensors").read_bytes()
        (folder / "truncated.safetensors").write_bytes(good[: len(good) // 3])
        (folder / "evil.pth").write_bytes(pickle.dumps({"x": _RunsCode()}))
    return folder


def use_checkpoints(monkeypatch, folder) -> None:
    """The app lists the checkpoints in ``folder`` (``ATTNVIZ_CHECKPOINTS``) and nothing from a Hugging Face cache;
    the discovery the app keeps for a few seconds is forgotten, so the next run looks again."""
    from attnviz import weights

    monkeypatch.setenv("ATTNVIZ_CHECKPOINTS", str(folder))
    monkeypatch.setenv("HF_HUB_CACHE", str(folder / "no-hf-cache"))
    monkeypatch.setattr(weights, "_discovered", None)


def own_session_models(monkeypatch) -> None:
    """The models a test registers with ``weights.register_session_model`` are forgotten when the test ends."""
    import collections

    from attnviz import weights

    monkeypatch.setattr(weights, "_session_models", collections.OrderedDict())


def names(found) -> list[str]:
    """The names a discovery (``attnviz.models.Checkpoints``) lists, in order."""
    return [entry.name for entry in found]


def path_named(found, name: str) -> str | None:
    """The path a discovery lists under ``name``, or None."""
    return next((entry.path for entry in found if entry.name == name), None)


def option_named(name, session_id=None, checkpoints=None):
    """The ``weights`` option listed under ``name`` for this session, or None."""
    from attnviz import weights

    return next((option for option in weights.options(session_id, checkpoints) if option.name == name), None)


class _RunsCode:
    def __reduce__(self):
        return (print, ("this pickle ran code",))


# the sizes of the grouped-query and latent checkpoints the tests write: 4 heads of 64 (what a file without a config
# is assumed to have), GPT-2's vocabulary
MODERN_SIZES = {"context_length": 32, "emb_dim": 256, "n_heads": 4, "n_layers": 2, "qkv_bias": True}


def random_modern_gpt(attention: str, seed: int = 0, **settings):
    """attnviz's ``GPTModel`` with ``cfg["attention"]`` = ``attention`` (``grouped-query``, ``multi-query``, ``latent``
    …) at :data:`MODERN_SIZES` (``settings`` override them: ``num_kv_groups``, ``latent_dim`` …), in eval mode, with
    every LayerNorm and bias randomised (initialised to 1 and 0, they would hide a swapped tensor)."""
    import torch

    from attnviz.models.gpt import random_gpt

    model = random_gpt(attention, seed=seed, **{**MODERN_SIZES, **settings})
    torch.manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith((".scale", ".shift")):
                param.uniform_(0.5, 1.5) if name.endswith("scale") else param.uniform_(-0.5, 0.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.3)
    return model


def book_modern_cfg(model) -> dict:
    """The ``cfg`` the book's ``gpt_with_kv_gqa.py`` / ``gpt_with_kv_mla.py`` build for ``model`` (one of
    :func:`random_modern_gpt`'s): GPT_CONFIG_124M's keys at its sizes, plus 04_gqa's ``n_kv_groups`` (the number of
    K/V heads) or 05_mla's ``latent_dim``."""
    att = model.trf_blocks[0].att
    cfg = {"vocab_size": model.tok_emb.weight.shape[0], "context_length": model.pos_emb.weight.shape[0],
           "emb_dim": model.tok_emb.weight.shape[1], "n_heads": att.num_heads, "n_layers": len(model.trf_blocks),
           "drop_rate": 0.0, "qkv_bias": att.W_query.bias is not None}
    if hasattr(att, "num_kv_groups"):
        cfg["n_kv_groups"] = att.num_kv_groups
    if hasattr(att, "latent_dim"):
        cfg["latent_dim"] = att.latent_dim
    return cfg
