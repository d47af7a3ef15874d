"""A config the module keeps as a dict (``self.cfg = {...}``, as the book's notebooks' models do) is read as one kept
as an object is (tests/helpers/config_dicts.py): its sliding window and its rotary base, under every name a config
goes by (``declarations.CONFIG_NAMES``)."""

import types

import pytest
import torch
from helpers import config_dicts as cd

from attnviz import checks, declarations

WINDOW_CFG = {"emb_dim": 32, "n_heads": 4, "sliding_window": 3}
ROPE_CFG = {"emb_dim": 32, "n_heads": 4, "context_length": 64, "rope_theta": 50_000.0}


def verdicts(module) -> dict[str, checks.Check]:
    return {check.rule: check for check in checks.check_module(module)}


def built(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(*args, **kwargs).eval()


@pytest.mark.parametrize("name", declarations.CONFIG_NAMES)
@pytest.mark.parametrize("kind", [dict, types.SimpleNamespace], ids=["dict", "object"])
def test_config_setting_reads_a_dicts_key_or_an_objects_attribute_under_every_config_name(name, kind):
    module = torch.nn.Module()
    setattr(module, name, {"rope_theta": 50_000.0} if kind is dict else kind(rope_theta=50_000.0))
    assert declarations.config_setting(module, "rope_theta") == 50_000.0
    assert declarations.config_setting(module, "sliding_window") is None
    assert declarations.config_setting(torch.nn.Module(), "rope_theta") is None


@pytest.mark.parametrize("kind", [dict, types.SimpleNamespace], ids=["dict", "object"])
def test_a_window_in_a_config_dict_is_the_modules_window_and_a_forgotten_one_fails(kind):
    module = built(cd.CfgWindowAttention, dict(WINDOW_CFG), forget_window=True)
    module.cfg = kind(**WINDOW_CFG)  # the same config, as a dict or as an object
    check = verdicts(module)["mask-convention"]
    assert check.status == "fail", check.evidence
    assert "the module's window is 3" in check.evidence and "query 7 sees keys 0 … 4" in check.evidence
    applied = verdicts(built(cd.CfgWindowAttention, dict(WINDOW_CFG)))
    assert applied["mask-convention"].status == "pass" and "W = 3" in applied["mask-convention"].evidence
    assert [rule for rule, check in applied.items() if check.status == "fail"] == []


def test_rope_theta_in_a_config_dict_is_the_base_the_rotary_rule_reads():
    """50,000 is none of rotary's usual bases: only the dict's rope_theta tells the check which table to look for."""
    results = verdicts(built(cd.CfgRotaryAttention, dict(ROPE_CFG), tables="exponent"))
    assert {rule for rule, check in results.items() if check.status == "fail"} == {"rotary-placement"}, results
    assert results["rotary-placement"].evidence.startswith(
        "q and k are turned by the frequencies of width 32 (d_model), not of head_dim = 8: on one token repeated at "
        "8 positions the queries turn by θ_i = 50000^(−2i/32) (")
    results = verdicts(built(cd.CfgRotaryAttention, dict(ROPE_CFG)))
    assert [rule for rule, check in results.items() if check.status == "fail"] == []
