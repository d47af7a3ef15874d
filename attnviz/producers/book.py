"""The book's classes as a producer: seeded embeddings (Chapter 2) into the seeded Chapter 3 class the config names
(or the bonus material's class: GQA, MQA, MLA, SWA).  With rotary positions the embedding adds no learned positions.

``torch.manual_seed(config.seed)`` right before building gives the book's weights, so the book's printed
tensors come out of this producer.  The embedding table and modules are built once per key (``built_once``)
and shared read-only by every session; a forward whose dropout runs holds the RNG from the seed's state.
"""

from __future__ import annotations

import contextlib
from dataclasses import fields, replace

import torch

from attnviz import attention, embedding, variants
from attnviz.config import AttentionConfig, resolve_device
from attnviz.rng import built_once, seeded
from attnviz.trace import Trace, make_trace, to_numpy


def settle(config: AttentionConfig) -> tuple[AttentionConfig, list[str]]:
    """The config the class really runs: each size the class decides holds the value it runs with — a single-head
    class's one head, the simplified class's width d_in, MQA's one K/V head, and GQA's K/V groups, MLA's latent and
    SWA's window where the caller left them open — and each setting the class does not take is set back to its
    default, with a note naming it when the caller set it to something else ("Ignored num_heads = 4: …").
    ``device`` becomes the device that runs (``auto`` picks one; one this machine lacks is the CPU, with a note).
    Settling a settled config changes nothing, so the sidebar's configs (which set only what applies) run as they
    are.  ConfigError (from ``validate``) when the config cannot run."""
    config.validate()
    spec = config.spec
    reasons = {name: spec.not_applicable(name) for name in ("d_out", "num_heads", "dropout", "train", "causal",
                                                             "num_kv_groups", "latent_dim", "sliding_window_size")}
    reasons["qkv_bias"] = _no_bias(spec)
    reasons["rope_base"] = None if config.rotary else "positions are learned: rope_base turns rotary positions only."
    reasons["layer"] = "the book's classes are one attention layer: layer picks a layer of a GPT model (checkpoint=…)."
    window = (config.sliding_window_size or config.context_length) if "sliding_window_size" in spec.settings else None
    device, device_notes = resolve_device(config.device)
    settled = replace(
        config, device=device,
        num_heads=spec.head_count(config.num_heads), d_out=spec.out_width(config.d_in, config.d_out),
        num_kv_groups=config.kv_groups if spec.grouped else None,  # MQA's 1 too: what the class runs with
        latent_dim=config.latent_width, sliding_window_size=window,
        **{name: _DEFAULTS[name] for name in ("dropout", "train", "causal", "qkv_bias", "rope_base", "layer")
           if reasons[name] is not None})
    if reasons["causal"] is not None:
        settled = replace(settled, causal=spec.book_causal)
    settled = replace(settled, qkv_bias=bool(settled.qkv_bias))  # None (the default): the book's qkv_bias=False
    notes = [f"Ignored {name} = {getattr(config, name)}: {reason[0].lower()}{reason[1:]}"
             for name, reason in reasons.items()
             if reason is not None and getattr(config, name) != getattr(settled, name)
             and getattr(config, name) != _DEFAULTS[name]]
    return settled, notes + _ungrouped(config, settled) + device_notes + _added_mask(settled)


def _added_mask(config: AttentionConfig) -> list[str]:
    """The note, in Python's words, of a settled book config whose listing has no causal mask (3.3, 3.4) run with
    ``causal=True`` (the default): ``variants.added_mask_note``, which the app words its own way."""
    note = variants.added_mask_note(config, python=True)
    return [] if note is None else [note]


def _ungrouped(config: AttentionConfig, settled: AttentionConfig) -> list[str]:
    """What runs when grouped-query attention left to group its heads itself finds no grouping (1 head, 2, 3, a prime
    count: :func:`attnviz.kv_cache.default_kv_heads` gives every head one shared K/V head)."""
    if "num_kv_groups" not in config.spec.settings or config.num_kv_groups is not None or settled.num_kv_groups != 1:
        return []
    heads = settled.num_heads
    if heads == 1:
        return ["Grouped-query attention with 1 head has no heads to group: it runs as single-head attention."]
    return [f"Grouped-query attention cannot group {heads} heads (no K/V head count lies between 1 and {heads}): the "
            f"{heads} heads share 1 K/V head, as in multi-query attention; num_kv_groups={heads} gives each its own, "
            "as in multi-head attention."]


_DEFAULTS = {f.name: f.default for f in fields(AttentionConfig)}


def _no_bias(spec) -> str | None:
    """Why the class ``spec`` names takes no ``qkv_bias`` (only the nn.Linear classes have one), or None."""
    if spec.weights is None:
        return "this variant has no weights, so no bias."
    if spec.weights != "linear":
        return "its weights are nn.Parameter matrices, which have no bias (qkv_bias is the nn.Linear classes')."
    return None


def build_module(config: AttentionConfig) -> torch.nn.Module:
    """The book class for ``config`` (call right after ``torch.manual_seed`` to get the book's weights)."""
    return config.spec.build(config)


@built_once(maxsize=1)  # 50257 × d_in floats: 154 MB at 768, 322 MB at 1600
def _embedding_layer(d_in: int, context_length: int, seed: int) -> embedding.InputEmbedding:
    with seeded(seed):
        return embedding.InputEmbedding(d_in, context_length)


def _module_config(config: AttentionConfig) -> AttentionConfig:
    """What the module depends on: a training-mode module (dropout runs) and an eval-mode one are cached apart."""
    return replace(config, train=config.dropout_runs, device="auto", embedding="seeded")


def prepare(config: AttentionConfig) -> None:
    """Build the seeded embedding table and module of ``config``'s run (its settled config's: :func:`settle`) before
    that run."""
    config = settle(config)[0]
    device, _ = resolve_device(config.device)
    _embedding_layer(config.d_in, config.context_length, config.seed)
    _seeded_module(_module_config(config), device)


@built_once(maxsize=4)
def _seeded_module(module_config: AttentionConfig, device: str) -> tuple[torch.nn.Module, torch.Tensor]:
    """(module on ``device``, RNG state right after its creation, so dropout replays the book's draws).

    Its mode is set here, once, from ``module_config.train`` (true only when dropout runs): a module shared by
    sessions is never switched between train and eval, so an eval-mode forward needs no lock."""
    with seeded(module_config.seed):
        module = build_module(module_config)  # created on the CPU: the same weights on every device
        rng_state = torch.get_rng_state()
    return module.to(device).train(module_config.train), rng_state


def trace(text: str, token_ids: list[int], notes: list[str], config: AttentionConfig) -> Trace:
    """The Trace of the book's class for ``config`` on these tokens.

    Seeded embeddings, the seeded module, every stage.
    """
    device, device_notes = resolve_device(config.device)  # a settled config's device is one this machine has
    notes += device_notes

    input_embeddings, embeddings = _embed(token_ids, config, notes)
    try:
        recorder, output = _forward(input_embeddings, config, device)
    except torch.cuda.OutOfMemoryError:
        notes.append(f"{device.upper()} ran out of memory; ran on the CPU instead.")
        device = "cpu"
        recorder, output = _forward(input_embeddings, config, device)
    config = replace(config, device=device)  # the device that ran

    return make_trace(config, text, token_ids, embeddings,
                  steps={name: to_numpy(value) for name, value in recorder.steps.items()},
                  output=to_numpy(output),
                  shapes=(("input", tuple(input_embeddings.shape)), *recorder.shapes),
                  device=device, notes=notes)


def _embed(token_ids: list[int], config: AttentionConfig, notes: list[str]):
    if config.embedding == "book":
        if tuple(token_ids) == embedding.JOURNEY_TOKEN_IDS:
            inputs = embedding.journey_inputs()  # (6, 3)
            zeros = torch.zeros_like(inputs)  # (6, 3)
            arrays = {"token": to_numpy(inputs), "position": to_numpy(zeros), "input": to_numpy(inputs)}
            return inputs.unsqueeze(0), arrays
        notes.append(
            f"The book's hand-set 3-d vectors exist only for {embedding.JOURNEY_TEXT!r}; "
            "this text uses seeded embeddings."
        )
    layer = _embedding_layer(config.d_in, config.context_length, config.seed)
    with torch.no_grad():
        parts = layer(torch.tensor([token_ids]), learned_positions=not config.rotary)  # (1, n) -> (1, n, d_in) each
    arrays = {"token": to_numpy(parts["token"][0]), "position": to_numpy(parts["position"]),
              "input": to_numpy(parts["input"][0])}
    return parts["input"], arrays


def _forward(input_embeddings: torch.Tensor, config: AttentionConfig, device: str):
    module, rng_state = _seeded_module(_module_config(config), device)
    recorder = attention.Recorder()
    # only a forward whose dropout runs draws random numbers: only that one holds the RNG (from the seed's state)
    rng = seeded(rng_state=rng_state) if config.dropout_runs else contextlib.nullcontext()
    with rng, torch.inference_mode():
        if config.dropout_runs and device == "cuda":
            torch.cuda.manual_seed_all(config.seed)
        output = module(input_embeddings.to(device), recorder)  # (1, n, d_in) -> (1, n, d_out)
    return recorder, output
