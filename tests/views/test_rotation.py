"""The Steps page's rotary stage: the angle each position turns each pair is p·θ_d with θ_d = base^(−2d/hd), the
pair's 2-D figure draws the run's own vectors before and after (the arc from one to the other), and its table puts
the pair's two numbers, x[d] and x[d + hd/2], side by side, before and after the rotation."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.runs import small

from attnviz.pipeline import run
from attnviz.views import rotation, steps

TEXT = "Your journey starts with one step, then another, then one more"
RUNS = {
    "gqa": small("gqa", d_out=32, num_heads=4, num_kv_groups=2, positions="rotary", rope_base=500_000),
    "mqa": small("mqa", d_out=32, num_heads=4, positions="rotary"),
    "swa": small("swa", d_out=32, num_heads=4, sliding_window_size=3, positions="rotary"),
}


@pytest.fixture(scope="module", params=list(RUNS))
def trace(request):
    return run(TEXT, RUNS[request.param])


def expected_angles(n: int, head_dim: int, base: float) -> np.ndarray:
    """(n, hd/2): position p times θ_d = base^(−2d/hd), written out here rather than read from attnviz.rope."""
    return np.array([[p * base ** (-2 * d / head_dim) for d in range(head_dim // 2)] for p in range(n)])


def test_the_angle_heatmap_shows_p_times_theta_d_for_every_position_and_pair(trace):
    head = trace.num_heads - 1
    turned = rotation.rotation_of(trace, head)
    fig = rotation.angle_heatmap(turned, pair=1)
    expected = expected_angles(trace.n, turned.head_dim, trace.config.rope_base)  # rad
    heat = fig.data[0]
    custom = np.asarray(heat.customdata)  # (n, hd/2, 3): rad, degrees, θ_d
    assert custom.shape[:2] == (trace.n, turned.head_dim // 2)
    assert np.allclose(custom[..., 0], expected, rtol=1e-5, atol=1e-6)  # the hover's angle
    assert np.allclose(custom[..., 1], np.degrees(expected), rtol=1e-5, atol=1e-4)
    assert np.allclose(custom[..., 2], expected[1], rtol=1e-5)  # θ_d: position 1's angle
    colours = np.asarray(heat.z)
    wrapped = np.mod(np.degrees(expected), 360.0)
    # the colour is the direction: the angle mod 360° (a hair under 360° may round to 0°: one colour, cyclic scale)
    assert np.allclose(np.minimum(abs(colours - wrapped), 360 - abs(colours - wrapped)), 0, atol=1e-3)
    assert (np.diff(custom[-1, :, 0]) < 0).all()  # low pairs turn fast, high pairs slowly
    outline = fig.layout.shapes[0]
    assert (outline.x0, outline.x1) == (0.5, 1.5)  # the chosen pair is outlined


def test_the_pair_figure_draws_the_runs_vectors_turned_along_their_arc():
    trace = run(TEXT, RUNS["gqa"])
    head = trace.num_heads - 1
    before, after = trace.head_vectors(head, rotated=False), trace.head_vectors(head)
    turned = rotation.rotation_of(trace, head)
    pair, half = 2, turned.head_dim // 2
    for side, unrotated, rotated in (("q", before.queries, after.queries), ("k", before.keys, after.keys)):
        fig = rotation.pair_figure(turned, pair, side)
        drawn = [fig.data[i:i + 3] for i in range(0, len(fig.data), 3)]  # per token: before, arc, after
        assert len(drawn) == min(trace.n, rotation.PAIR_FIGURE_TOKENS)
        for p, (was, arc, now) in enumerate(drawn):
            assert np.allclose((was.x[-1], was.y[-1]), unrotated[p, [pair, pair + half]], atol=1e-6)
            assert np.allclose((now.x[-1], now.y[-1]), rotated[p, [pair, pair + half]], atol=1e-6)
            # the arc starts at the vector before and ends at the one the run recorded after: the angle turned is
            # p·θ_d, the length kept
            assert np.allclose((arc.x[0], arc.y[0]), unrotated[p, [pair, pair + half]], atol=1e-5)
            assert np.allclose((arc.x[-1], arc.y[-1]), rotated[p, [pair, pair + half]], atol=1e-4)
        assert fig.layout.yaxis.scaleanchor == "x"  # a turn looks like a turn: one unit is as long on both axes


def test_the_pair_table_puts_each_pairs_two_numbers_side_by_side_before_and_after(trace):
    head = trace.num_heads - 1
    before, after = trace.head_vectors(head, rotated=False), trace.head_vectors(head)
    turned = rotation.rotation_of(trace, head)
    half = turned.head_dim // 2
    for pair in (0, half - 1):
        for side, unrotated, rotated in (("q", before.queries, after.queries), ("k", before.keys, after.keys)):
            table = rotation.pair_table(turned, pair, side)
            assert list(table.columns) == ["token", "p·θ_d", f"{side}[{pair}]", f"{side}[{pair + half}]",
                                           f"{side}′[{pair}]", f"{side}′[{pair + half}]"]
            assert list(table.index) == list(range(trace.n)) and list(table["token"]) == list(trace.tokens)
            numbers = table.iloc[:, 2:].to_numpy()  # (n, 4)
            assert np.array_equal(numbers[:, :2], unrotated[:, [pair, pair + half]])
            assert np.array_equal(numbers[:, 2:], rotated[:, [pair, pair + half]])
            angles = expected_angles(trace.n, turned.head_dim, trace.config.rope_base)[:, pair]
            assert np.allclose(table["p·θ_d"], np.degrees(angles), rtol=1e-5, atol=1e-4)
            assert set(rotation.pair_table_help(turned, pair, side)) == set(table.columns[1:])


def test_only_the_latent_stage_has_no_head_to_focus():
    for config in (small("mla"), RUNS["gqa"], small("gqa", d_out=32, num_heads=4, num_kv_groups=2)):
        trace = run(TEXT, config)
        headless = [stage for stage in steps.stage_labels(trace) if steps.headless_note(trace, stage) is not None]
        assert headless == (["latent"] if config.variant == "mla" else []), headless
    note = steps.headless_note(run(TEXT, small("mla")), "latent")
    assert "has no head dimension" in note and "(1, 13, " in note
