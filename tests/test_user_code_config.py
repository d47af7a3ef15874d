"""A class that takes a config object, as nanoGPT's ``CausalSelfAttention(config)`` does, or a config and more, as
Hugging Face's ``(config, layer_idx=None)`` do: ``--set`` names what the config object has (a typo is refused in
words), and the sizes it was built with are read off the object."""

import textwrap

import pytest
from helpers import user_modules
from helpers.check_table import ALL_PASS

from attnviz import cli, user_code

pytestmark = pytest.mark.usefixtures("no_slow_notice")  # stderr compared without the load-dependent notice

NANOGPT = textwrap.dedent('''
    import math
    from dataclasses import dataclass

    import torch
    from torch import nn
    from torch.nn import functional as F


    @dataclass
    class GPTConfig:
        block_size: int = 1024
        n_head: int = 12
        n_embd: int = 768
        dropout: float = 0.0
        bias: bool = True


    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
            self.attn_dropout = nn.Dropout(config.dropout)
            self.n_head, self.n_embd = config.n_head, config.n_embd
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, T) @ (B, nh, T, hs) -> (B, nh, T, hs)
            y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
            return self.c_proj(y)
''')


@pytest.fixture
def passed(monkeypatch) -> dict:
    """The sizes ``attnviz check`` passes to ``check_module`` (filled when it runs)."""
    from attnviz import checks

    sizes, check_module = {}, checks.check_module

    def recorded(module, x, **kwargs):
        sizes.update(kwargs.get("sizes") or {})
        return check_module(module, x, **kwargs)

    monkeypatch.setattr(checks, "check_module", recorded)
    return sizes


@pytest.fixture
def nano(tmp_path):
    path = tmp_path / "nano.py"
    path.write_text(NANOGPT)
    return path


@pytest.mark.parametrize(("name", "words"), [
    ("n_embed", "has no n_embed: --set sets one of n_embd, n_head, block_size"),
    ("nonsense", "has no nonsense"),
])
def test_a_name_the_config_object_does_not_have_is_refused_in_words(nano, name, words):
    cls = user_code.load(f"{nano}:CausalSelfAttention")
    with pytest.raises(user_code.UserCodeError, match=r"CausalSelfAttention\(config\) takes one config") as error:
        user_code.constructor_arguments(cls, {name: 64})
    assert words in str(error.value)
    assert ("did you mean n_embd?" in str(error.value)) == (name == "n_embed")


def test_the_cli_refuses_a_mistyped_set_with_exit_2_and_sets_a_name_the_config_has(nano, capsys):
    assert cli.main(["check", f"{nano}:CausalSelfAttention", "--set", "n_embed=64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnviz check: CausalSelfAttention(config) takes one config object, and attnviz's has no "
                          "n_embed: --set sets one of n_embd,") and "did you mean n_embd?" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert cli.main(["check", f"{nano}:CausalSelfAttention", "--set", "n_embd=32", "--set", "n_head=2",
                     "--tokens", "4"]) == 0
    assert ALL_PASS in capsys.readouterr().out


def test_a_name_the_config_has_sets_every_name_of_its_size(nano):
    cls = user_code.load(f"{nano}:CausalSelfAttention")
    config = user_code.constructor_arguments(cls, {"n_embd": 32, "bias": False}, num_heads=2)["config"]
    assert (config.n_embd, config.d_in, config.emb_dim, config.d_out) == (32, 32, 32, 32)
    assert (config.n_head, config.bias, config.qkv_bias) == (2, False, False)
    module = user_code.build(cls, {"n_embd": 32, "bias": False}, num_heads=2)
    assert module.c_attn.in_features == 32 and module.c_attn.bias is None


def test_the_sizes_a_config_object_carries_are_the_sizes_taken(nano):
    cls = user_code.load(f"{nano}:CausalSelfAttention")
    arguments = user_code.constructor_arguments(cls, d_in=48, num_heads=6, context_length=16)
    assert user_code.sizes_taken(arguments) == {"d_in": 48, "d_out": 48, "num_heads": 6, "context_length": 16}
    arguments = user_code.constructor_arguments(cls, {"n_embd": 32, "n_head": 2}, num_heads=8)
    assert user_code.sizes_taken(arguments) == {"d_in": 32, "d_out": 32, "num_heads": 2, "context_length": 64}


def test_the_cli_passes_a_config_objects_sizes_to_check_module(nano, passed, capsys):
    assert cli.main(["check", f"{nano}:CausalSelfAttention", "--d-in", "32", "--num-heads", "2",
                     "--context-length", "16", "--tokens", "4"]) == 0
    assert passed == {"d_in": 32, "d_out": 32, "num_heads": 2, "context_length": 16}
    capsys.readouterr()


def test_a_size_flag_a_set_replaces_on_the_config_object_is_named(nano, capsys):
    assert cli.main(["check", f"{nano}:CausalSelfAttention", "--num-heads", "8", "--set", "n_head=2",
                     "--tokens", "4"]) == 0
    assert capsys.readouterr().err == ("attnviz check: --num-heads 8 not used: --set n_head=2 gives "
                                       "CausalSelfAttention()'s n_head\n")


NANOCHAT = textwrap.dedent('''
    import torch
    from torch import nn
    from torch.nn import functional as F


    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.n_head = config.n_head
            self.n_kv_head = config.n_kv_head
            self.n_embd = config.n_embd
            self.head_dim = self.n_embd // self.n_head
            assert self.n_embd % self.n_head == 0
            assert self.n_kv_head <= self.n_head and self.n_head % self.n_kv_head == 0
            self.c_q = nn.Linear(self.n_embd, self.n_head * self.head_dim, bias=False)
            self.c_k = nn.Linear(self.n_embd, self.n_kv_head * self.head_dim, bias=False)
            self.c_v = nn.Linear(self.n_embd, self.n_kv_head * self.head_dim, bias=False)
            self.c_proj = nn.Linear(self.n_embd, self.n_embd, bias=False)

        def forward(self, x):
            B, T, C = x.size()
            q = self.c_q(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
            k = self.c_k(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, nkv, T, hs)
            v = self.c_v(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, nkv, T, hs)
            k = k.repeat_interleave(self.n_head // self.n_kv_head, dim=1)  # (B, nh, T, hs)
            v = v.repeat_interleave(self.n_head // self.n_kv_head, dim=1)  # (B, nh, T, hs)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
            y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
            return self.c_proj(y)
''')


@pytest.mark.parametrize("spelling", ["n_kv_head", "n_kv_heads", "num_key_value_heads"])
def test_the_kv_heads_reach_a_config_object_under_the_names_gqa_classes_read(tmp_path, spelling):
    """nanochat's ``CausalSelfAttention(config)`` reads ``config.n_kv_head`` (Llama-style code ``n_kv_heads``,
    Hugging Face's ``num_key_value_heads``): the config object carries every spelling of a variant's size given
    (--num-kv-groups, the latent width, the window), only when given, and --set under any of them sets them all."""
    path = tmp_path / "nanochat.py"
    path.write_text(NANOCHAT.replace("config.n_kv_head", f"config.{spelling}"))
    cls = user_code.load(f"{path}:CausalSelfAttention")
    assert user_code.build(cls, d_in=32, num_heads=4, num_kv_groups=2).c_k.out_features == 16  # 2 K/V heads of 8
    config = user_code.constructor_arguments(cls, {spelling: 1}, d_in=32, num_heads=4)["config"]
    assert (config.n_kv_head, config.n_kv_heads, config.num_key_value_heads, config.num_kv_groups) == (1, 1, 1, 1)
    assert user_code.build(cls, {spelling: 1}, d_in=32, num_heads=4).c_k.out_features == 8
    arguments = user_code.constructor_arguments(cls, d_in=32, num_heads=4, num_kv_groups=2)
    assert user_code.sizes_taken(arguments)["num_kv_groups"] == 2
    config = user_code.constructor_arguments(cls, d_in=32, latent_dim=8, sliding_window_size=3)["config"]
    assert (config.kv_lora_rank, config.latent_dim, config.sliding_window, config.window_size) == (8, 8, 3, 3)
    assert not hasattr(user_code.constructor_arguments(cls, d_in=32)["config"], "n_kv_head")  # only when given


def test_the_cli_checks_nanochats_class_with_its_kv_heads(tmp_path, passed, capsys):
    path = tmp_path / "nanochat.py"
    path.write_text(NANOCHAT)
    assert cli.main(["check", f"{path}:CausalSelfAttention", "--d-in", "32", "--num-heads", "4",
                     "--num-kv-groups", "2", "--tokens", "4"]) == 0
    out, err = capsys.readouterr()
    assert ALL_PASS in out and err == ""  # no "--num-kv-groups 2 not used"
    assert passed["num_kv_groups"] == 2
    assert cli.main(["check", f"{path}:CausalSelfAttention", "--set", "n_kv_head=1", "--tokens", "4"]) == 0
    capsys.readouterr()
    assert cli.main(["check", f"{path}:CausalSelfAttention", "--tokens", "4"]) == 2
    assert capsys.readouterr().err == (
        "attnviz check: CausalSelfAttention(config=<config>) raised AttributeError: 'AttnvizConfig' object "
        "has no attribute 'n_kv_head' — attnviz's config object has it when you give it: --num-kv-groups N\n")
    help_text = " ".join(cli.parser().parse_args(["check", "x.py:X"]).command_parser.format_help().split())
    assert "a variant size's spellings, n_kv_head, n_kv_heads, kv_lora_rank, sliding_window …" in help_text


HF_MODULES = user_modules.__file__  # HFStyleConfigAttention(config): a Llama port reading Hugging Face's names


def test_a_config_object_answers_hugging_faces_names_from_the_flags():
    """``HFStyleConfigAttention(config)`` reads ``config.hidden_size`` …: beside nanoGPT's and the book's names, the
    object has every spelling of a size (hidden_size ← --d-in, num_attention_heads ← --num-heads,
    max_position_embeddings ← --context-length, attention_dropout ← --dropout, num_key_value_heads ← --num-kv-groups)
    and Hugging Face's head_dim, the width over the heads, and the constructor builds from it."""
    cls = user_code.load(f"{HF_MODULES}:HFStyleConfigAttention")
    arguments = user_code.constructor_arguments(cls, d_in=64, num_heads=8, num_kv_groups=2, context_length=32,
                                                dropout=0.1)
    config = arguments["config"]
    assert (config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim,
            config.max_position_embeddings, config.attention_dropout) == (64, 8, 2, 8, 32, 0.1)
    module = user_code.build(cls, d_in=64, num_heads=8, num_kv_groups=2)
    assert (module.q_proj.in_features, module.num_heads, module.k_proj.out_features) == (64, 8, 16)  # 2 K/V heads of 8
    assert user_code.sizes_taken(arguments) == {"d_in": 64, "d_out": 64, "num_heads": 8, "context_length": 32,
                                                "num_kv_groups": 2}


def test_set_takes_hugging_faces_names_and_sets_every_name_of_their_size():
    """--set takes Hugging Face's names (hidden_size, num_attention_heads) and sets every name of their size (n_embd,
    d_in, d_out; n_head, and head_dim from them); a typo (hiden_size) is refused suggesting hidden_size."""
    cls = user_code.load(f"{HF_MODULES}:HFStyleConfigAttention")
    config = user_code.constructor_arguments(cls, {"hidden_size": 32, "num_attention_heads": 2}, num_heads=8)["config"]
    assert (config.hidden_size, config.n_embd, config.d_in, config.d_out) == (32, 32, 32, 32)
    assert (config.num_attention_heads, config.n_head, config.head_dim) == (2, 2, 16)
    with pytest.raises(user_code.UserCodeError, match="has no hiden_size: .*; did you mean hidden_size\\?"):
        user_code.constructor_arguments(cls, {"hiden_size": 32})


def test_the_cli_checks_a_hugging_face_style_config_class(passed, capsys):
    assert cli.main(["check", f"{HF_MODULES}:HFStyleConfigAttention", "--d-in", "64", "--num-heads", "8",
                     "--num-kv-groups", "2", "--tokens", "4"]) == 0
    out, err = capsys.readouterr()
    assert ALL_PASS in out and err == ""
    assert passed == {"d_in": 64, "d_out": 64, "num_heads": 8, "context_length": 64, "num_kv_groups": 2}
    assert cli.main(["check", f"{HF_MODULES}:HFStyleConfigAttention", "--num-kv-groups", "1", "--set",
                     "hidden_size=32", "--tokens", "4"]) == 0
    assert passed["d_in"] == 32
    capsys.readouterr()


@pytest.mark.parametrize(("read", "flags", "remedy"), [
    ("num_key_value_heads", [], "attnviz's config object has it when you give it: --num-kv-groups N"),
    ("head_dim", ["--d-in", "30", "--num-heads", "4"],
     "attnviz's config object has it when the heads divide the width (--num-heads, --d-out): give sizes that divide, "
     "or --set head_dim=N"),
    ("rope_theta", [], "attnviz's config object has no rope_theta: give it with --set rope_theta=VALUE"),
])
def test_a_name_the_config_object_lacks_says_what_to_pass(tmp_path, capsys, read, flags, remedy):
    path = tmp_path / "reads.py"
    path.write_text(textwrap.dedent(f'''
        from torch import nn


        class Reads(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.value = config.{read}
                self.proj = nn.Linear(config.hidden_size, config.hidden_size)

            def forward(self, x):
                return self.proj(x)
    '''))
    assert cli.main(["check", f"{path}:Reads", *flags]) == 2
    assert capsys.readouterr().err == (f"attnviz check: Reads(config=<config>) raised AttributeError: "
                                       f"'AttnvizConfig' object has no attribute '{read}' — {remedy}\n")


def test_set_gives_a_config_object_a_name_its_constructor_reads():
    """HFStyleRotaryAttention reads ``config.rope_theta`` (in its own constructor, after its base's): --set gives it,
    and a name no constructor reads is still refused."""
    cls = user_code.load(f"{HF_MODULES}:HFStyleRotaryAttention")
    assert {"hidden_size", "num_key_value_heads", "head_dim", "rope_theta"} <= user_code.config_reads(cls)
    module = user_code.build(cls, {"rope_theta": 500_000}, d_in=32, num_heads=4, num_kv_groups=2)
    assert module.cos.shape == (64, 8)
    with pytest.raises(user_code.UserCodeError, match="has no rope_base: "):
        user_code.constructor_arguments(cls, {"rope_base": 500_000})


def test_a_config_read_as_a_dict_is_built_from_the_flags_and_checked(passed, capsys):
    """The book's blocks read ``cfg["emb_dim"]``: attnviz's config object answers keys, ``get`` and ``in`` as well
    as attributes."""
    module = user_code.build(user_modules.DictConfigAttention, d_in=32, num_heads=4)
    assert (module.num_heads, module.head_dim, module.W_query.in_features) == (4, 8, 32)
    config = user_code.constructor_arguments(user_modules.DictConfigAttention, d_in=32)["cfg"]
    assert config["emb_dim"] == config.emb_dim == 32 and config.get("rope_base", 1.5) == 1.5
    assert "n_heads" in config and "rope_base" not in config and dict(config.items())["drop_rate"] == 0.0
    assert cli.main(["check", f"{HF_MODULES}:DictConfigAttention", "--d-in", "32", "--tokens", "4"]) == 0
    out, err = capsys.readouterr()
    assert ALL_PASS in out and err == ""
    assert passed["d_in"] == 32


def test_a_config_parameter_that_defaults_to_none_keeps_the_classs_own_config_unless_a_size_is_given(capsys):
    """OwnConfigAttention(cfg=None) builds its own dict, with a key attnviz's object lacks (rope_base): built with
    nothing given, it keeps it; given a size, attnviz's object, whose missing key is named with what gives it."""
    module = user_code.build(user_modules.OwnConfigAttention)
    assert module.cfg["rope_base"] == 10_000.0 and module.W_query.in_features == 32
    with pytest.raises(user_code.UserCodeError) as raised:
        user_code.build(user_modules.OwnConfigAttention, d_in=64)
    assert str(raised.value) == ("OwnConfigAttention(cfg=<config>) raised KeyError: 'rope_base' — attnviz's config "
                                 "object has no rope_base: give it with --set rope_base=VALUE")
    module = user_code.build(user_modules.OwnConfigAttention, {"rope_base": 500_000.0}, d_in=64)
    assert module.rope_base == 500_000.0 and module.W_query.in_features == 64
    assert cli.main(["check", f"{HF_MODULES}:OwnConfigAttention", "--tokens", "4"]) == 0
    assert ALL_PASS in capsys.readouterr().out


def test_a_hugging_face_layer_built_with_its_layer_idx_gets_a_config_object():
    """``HFStyleLayerAttention(config, layer_idx=None)``, as Hugging Face's layers and GPT-2's ``(config,
    is_cross_attention=False, layer_idx=None)`` are built, is built with or without --set layer_idx=0.  The config
    comes first: it gets attnviz's object, the other arguments keep their defaults or take --set, and a --set naming
    no argument sets the object's attribute."""
    cls = user_code.load(f"{HF_MODULES}:HFStyleLayerAttention")
    arguments = user_code.constructor_arguments(cls, dropout=0.1)
    assert list(arguments) == ["config"] and arguments["config"].attention_dropout == 0.1
    assert user_code.settings_not_taken(cls, {"d_in": 64, "dropout": 0.1}) == {}  # --dropout 0.1 is used
    arguments = user_code.constructor_arguments(cls, {"layer_idx": 0, "attn_bug": "dropout-before-mask"})
    assert arguments["layer_idx"] == 0 and arguments["config"].attn_bug == "dropout-before-mask"
    assert "layer_idx" not in vars(arguments["config"])
    module = user_code.build(cls, {"layer_idx": 3, "hidden_size": 32}, num_heads=2)
    assert (module.layer_idx, module.q_proj.in_features, module.num_heads) == (3, 32, 2)


def test_gpt2s_constructor_shape_is_built_and_a_required_extra_argument_is_sent_to_set(tmp_path):
    path = tmp_path / "layers.py"
    path.write_text(textwrap.dedent('''
        from torch import nn


        class GPT2Attention(nn.Module):
            def __init__(self, config, is_cross_attention=False, layer_idx=None):
                super().__init__()
                self.c_attn = nn.Linear(config.hidden_size, 3 * config.hidden_size)
                self.is_cross_attention, self.layer_idx = is_cross_attention, layer_idx


        class Needs(nn.Module):
            def __init__(self, config, layer_idx):
                super().__init__()
                self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
                self.layer_idx = layer_idx
    '''))
    module = user_code.build(user_code.load(f"{path}:GPT2Attention"), d_in=32)
    assert (module.c_attn.in_features, module.is_cross_attention, module.layer_idx) == (32, False, None)
    needs = user_code.load(f"{path}:Needs")
    with pytest.raises(user_code.UserCodeError, match=r"^Needs\(\) needs layer_idx, which attnviz cannot fill") as no:
        user_code.build(needs)
    assert "--set NAME=VALUE" in str(no.value) and "config" not in str(no.value)
    assert user_code.build(needs, {"layer_idx": 0}).layer_idx == 0


@pytest.mark.slow  # two checks, 5 s
def test_the_cli_checks_a_hugging_face_layer_and_its_buggy_twin(capsys):
    spec = f"{HF_MODULES}:HFStyleLayerAttention"
    assert cli.main(["check", spec, "--tokens", "4"]) == 0
    assert ALL_PASS in capsys.readouterr().out
    assert cli.main(["check", spec, "--set", "layer_idx=0", "--set", "attn_bug=dropout-before-mask", "--dropout",
                     "0.1", "--tokens", "4"]) == 1
    out, err = capsys.readouterr()
    assert "dropout-placement   FAIL" in out and err == ""
