"""Building a user's class for today's variants: the K/V groups, the latent size and the window reach it under
their usual spellings, only when given or required, and ``overrides`` set any constructor argument by name."""

import pytest
from helpers import user_modules as um
from torch import nn

from attnviz import declarations, user_code


class Spelled(nn.Module):
    def __init__(self, embed_dim, n_head, num_key_value_heads, kv_lora_rank=None, sliding_window=None, theta=1.0):
        super().__init__()
        self.kv_heads, self.rank, self.window, self.theta = num_key_value_heads, kv_lora_rank, sliding_window, theta


class TakesKwargs(nn.Module):
    def __init__(self, d_in, **options):
        super().__init__()
        self.options = options


@pytest.mark.parametrize(("name", "setting"), [("num_kv_groups", "num_kv_groups"), ("n_kv_groups", "num_kv_groups"),
                                               ("num_key_value_heads", "num_kv_groups"), ("kv_lora_rank", "latent_dim"),
                                               ("latent_dim", "latent_dim"), ("sliding_window", "sliding_window_size"),
                                               ("window_size", "sliding_window_size"),
                                               ("sliding_window_size", "sliding_window_size")])
def test_each_spelling_maps_to_its_setting(name, setting):
    assert name in declarations.SPELLINGS[setting]


def test_given_sizes_reach_the_class_under_its_own_names():
    module = user_code.build(Spelled, d_in=32, num_heads=4, num_kv_groups=1, latent_dim=8, sliding_window_size=3)
    assert (module.kv_heads, module.rank, module.window) == (1, 8, 3)


def test_a_required_size_nobody_gave_gets_a_default_and_optional_ones_keep_the_classs():
    module = user_code.build(Spelled, d_in=32, num_heads=6)
    assert (module.kv_heads, module.rank, module.window) == (3, None, None)


def test_the_learner_classes_build_from_the_cli_settings():
    gqa = user_code.build(um.LearnerGQA, d_in=16, d_out=32, num_heads=4, num_kv_groups=1)
    assert gqa.W_key.out_features == 8  # one K/V head of head_dim 8: multi-query
    assert user_code.build(um.LearnerMLA, d_in=16, num_heads=4, latent_dim=6).W_DKV.out_features == 6
    assert user_code.build(um.LearnerSWA, d_in=16, num_heads=4, sliding_window_size=5).sliding_window_size == 5


def test_overrides_set_any_argument_by_name_and_win_over_the_settings():
    module = user_code.build(Spelled, {"theta": 500000.0, "sliding_window": 7}, d_in=32, num_heads=4,
                             sliding_window_size=3)
    assert (module.theta, module.window) == (500000.0, 7)
    assert user_code.build(TakesKwargs, {"rope": True}, d_in=8).options == {"rope": True}


def test_an_override_the_constructor_does_not_take_is_named():
    with pytest.raises(user_code.UserCodeError, match=r"Spelled\(\) takes no argument vocab \(it takes embed_dim"):
        user_code.build(Spelled, {"vocab": 3}, d_in=32)
