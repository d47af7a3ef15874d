"""A Trace as a file: the NPZ every page offers holds every array and the manifest."""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
import re
import zipfile

import numpy as np
import pytest

import attnviz
from attnviz import pipeline, trace_file
from attnviz.config import AttentionConfig, InputError
from attnviz.trace import Trace

CONFIG = AttentionConfig(d_in=16, d_out=16, num_heads=4, context_length=32, seed=5)
TEXT = "the cat and the hat"


@pytest.fixture(scope="module")
def trace():
    return pipeline.run(TEXT, CONFIG)


def test_trace_npz_round_trips_every_array_and_the_manifest(trace):
    data = np.load(io.BytesIO(trace_file.trace_npz(trace)))
    manifest = json.loads(bytes(data["manifest.json"]).decode("utf-8"))
    assert manifest["config"]["num_heads"] == 4 and manifest["tokens"] == list(trace.tokens)
    assert [tuple(shape) for _, shape in manifest["shapes"]] == [shape for _, shape in trace.shapes]
    for name, array in trace.steps.items():
        assert np.array_equal(data[f"steps/{name}"], array), name
    assert np.array_equal(data["output"], trace.output)
    assert data["token_ids"].tolist() == list(trace.token_ids)


# ============================== load_trace: the file back to a Trace ==============================

BOOK = [AttentionConfig(variant=name, d_in=16, d_out=16, num_heads=4, context_length=32, seed=5)
        for name in ("simplified", "self_attention_v1", "self_attention_v2", "causal", "mha_wrapper", "mha")]
MODERN = [
    AttentionConfig(variant="gqa", d_in=32, d_out=32, num_heads=4, num_kv_groups=2, positions="rotary",
                    context_length=32),
    AttentionConfig(variant="mqa", d_in=32, d_out=32, num_heads=4, context_length=32),
    AttentionConfig(variant="mla", d_in=32, d_out=32, num_heads=4, latent_dim=8, context_length=32),
    AttentionConfig(variant="swa", d_in=32, d_out=32, num_heads=4, sliding_window_size=3, positions="rotary",
                    rope_base=500_000, context_length=32),
    AttentionConfig(variant="mha", d_in=16, d_out=16, num_heads=2, dropout=0.25, train=True, causal=False,
                    context_length=32),
]


def assert_same(loaded, trace, *, config=None, module_run=None) -> None:
    """Everything the views read is equal: every array (values and dtype), the tokens, config, notes, shapes and
    what a model's or a module's run adds."""
    assert isinstance(loaded, Trace)
    for field in ("steps", "embeddings"):
        saved, back = getattr(trace, field), getattr(loaded, field)
        assert list(back) == list(saved), field
        for name, array in saved.items():
            assert back[name].dtype == array.dtype and np.array_equal(back[name], array, equal_nan=True), name
            assert not back[name].flags.writeable, name
    assert loaded.output.dtype == trace.output.dtype and np.array_equal(loaded.output, trace.output)
    assert (loaded.text, loaded.tokens, loaded.token_ids) == (trace.text, trace.tokens, trace.token_ids)
    assert loaded.token_details == trace.token_details
    assert loaded.config == (config or trace.config)
    assert (loaded.notes, loaded.shapes, loaded.device) == (trace.notes, trace.shapes, trace.device)
    if trace.model is None:
        assert loaded.model is None
    else:
        assert (loaded.model.layer, loaded.model.n_layers, loaded.model.path) == (
            trace.model.layer, trace.model.n_layers, trace.model.path)
        assert np.array_equal(loaded.model.top_ids, trace.model.top_ids)
        assert np.array_equal(loaded.model.top_probs, trace.model.top_probs)
        assert loaded.model.top_probs.dtype == trace.model.top_probs.dtype
    assert loaded.module_run == (module_run or trace.module_run)


def assert_same_figures(loaded, trace) -> None:
    """``attnviz.show``'s figures of the loaded Trace are those of the saved one."""
    from attnviz.views.notebook import figures_of

    for stage in ("weights", "scaled"):
        if stage in trace.steps:
            before, after = figures_of(trace, stage, head=trace.num_heads - 1), figures_of(loaded, stage,
                                                                                           head=loaded.num_heads - 1)
            assert after["grid"].to_json() == before["grid"].to_json()
            assert after["head"].to_json() == before["head"].to_json()
            assert after["flow"] == before["flow"]


@pytest.mark.parametrize("config", BOOK + MODERN, ids=lambda c: f"{c.variant}-{c.positions}-{c.train}")
def test_a_saved_trace_of_the_books_classes_and_the_modern_variants_loads_back_equal(config, tmp_path):
    trace = pipeline.run("Your journey starts with one step", config)
    path = tmp_path / "attnviz-trace.npz"
    path.write_bytes(trace_file.trace_npz(trace))
    loaded = attnviz.load_trace(path)
    assert_same(loaded, trace)
    assert_same_figures(loaded, trace)


def test_a_trace_loads_from_a_path_string_bytes_or_an_open_binary_file(trace, tmp_path):
    data = trace_file.trace_npz(trace)
    path = tmp_path / "t.npz"
    path.write_bytes(data)
    with open(path, "rb") as stream:
        from_stream = attnviz.load_trace(stream)
    for loaded in (attnviz.load_trace(str(path)), attnviz.load_trace(data), attnviz.load_trace(io.BytesIO(data)),
                   from_stream):
        assert_same(loaded, trace)


def test_a_checkpoint_layers_trace_loads_back_with_its_predictions_and_path():
    from attnviz import models

    config = AttentionConfig(checkpoint=str(models.BUNDLED), layer=1)
    trace = pipeline.run("The cat sat on the mat. The cat sat", config)
    loaded = attnviz.load_trace(trace_file.trace_npz(trace))
    # the file names the checkpoint by its folder's name only: the server's directories never leave it
    assert_same(loaded, trace, config=dataclasses.replace(trace.config, checkpoint="bundled"))
    assert_same_figures(loaded, trace)
    from attnviz.views import checkpoint_view

    assert checkpoint_view.predictions(loaded).equals(checkpoint_view.predictions(trace))
    assert checkpoint_view.model_path_rows(loaded) == checkpoint_view.model_path_rows(trace)


def as_saved(run):
    """``run`` as a file keeps it: its files by their names only, as the source panel shows them — the server's
    folders never leave it."""
    return dataclasses.replace(run, filename=pathlib.Path(run.filename).name, stage_sources={
        stage: dataclasses.replace(found, filename=pathlib.Path(found.filename).name)
        for stage, found in run.stage_sources.items()})


@pytest.fixture(scope="module")
def module_trace():
    import torch
    from helpers.user_modules import MyMultiHeadAttention

    from attnviz import tracing

    torch.manual_seed(0)
    return tracing.trace_module(MyMultiHeadAttention(d_in=16, d_out=16, num_heads=4), "the cat and the hat")


def test_a_user_modules_trace_loads_back_with_its_class_lines_and_ops(module_trace):
    from attnviz.views import diagram, source

    trace = module_trace
    assert trace.module_run is not None and trace.module_run.filename and trace.module_run.stage_sources
    data = trace_file.trace_npz(trace)
    loaded = attnviz.load_trace(data)
    assert_same(loaded, trace, module_run=as_saved(trace.module_run))
    assert_same_figures(loaded, trace)
    assert diagram.op_rows(loaded) == diagram.op_rows(trace)
    # the Steps page's code line and marked source read the loaded run as the traced one
    for stage in ("scores", "weights", "context"):
        assert source.module_stage_code(loaded.module_run, stage) == source.module_stage_code(trace.module_run, stage)
        assert source.module_marked_source(loaded.module_run, stage) == source.module_marked_source(
            trace.module_run, stage)
    assert "softmax(" in source.module_stage_code(loaded.module_run, "weights")
    # no server folder in the file, and the class's source once
    text = bytes(np.load(io.BytesIO(data))["manifest.json"]).decode("utf-8")
    assert str(pathlib.Path(trace.module_run.filename).parent) not in text
    assert text.count(json.dumps(trace.module_run.source)[1:80]) == 1


def test_a_user_modules_trace_saved_before_stage_sources_shows_its_stages_lines(module_trace):
    """A file written before the places of stages were kept: its stages' lines, in the class's source."""
    from attnviz.views import source

    def old(manifest):
        del manifest["module_run"]["stage_sources"], manifest["module_run"]["stage_texts"]

    loaded = attnviz.load_trace(with_manifest(trace_file.trace_npz(module_trace), old))
    run = loaded.module_run
    assert run.stage_sources == {} and run.stage_lines == module_trace.module_run.stage_lines
    assert source.module_stage_code(run, "weights") == source.module_stage_code(module_trace.module_run, "weights")
    code, line, shown = source.module_marked_source(run, "weights")
    assert line == run.stage_lines["weights"] and shown == run.class_name
    assert "softmax(" in code.splitlines()[line - run.first_line] and code.count(source.MARK) == 1


@pytest.mark.parametrize("number", [99, "0", None])
def test_a_stage_source_naming_no_text_of_the_file_is_refused_in_words(module_trace, number):
    def lie(manifest):
        manifest["module_run"]["stage_sources"]["weights"]["source"] = number

    with pytest.raises(InputError) as raised:
        attnviz.load_trace(with_manifest(trace_file.trace_npz(module_trace), lie))
    message = str(raised.value)
    assert "\n" not in message and "not an attnviz trace" in message and "IndexError" not in message, message


def test_a_modules_trace_of_vectors_keeps_its_x_labels_and_its_batch():
    import torch
    from helpers.user_modules import MyMultiHeadAttention

    from attnviz import tracing

    torch.manual_seed(0)
    trace = tracing.trace_module(MyMultiHeadAttention(d_in=16, d_out=16, num_heads=4), torch.randn(2, 5, 16))
    loaded = attnviz.load_trace(trace_file.trace_npz(trace))
    assert loaded.tokens[:2] == ("x[0]", "x[1]") and loaded.steps["weights"].shape[0] == 2
    assert_same(loaded, trace, module_run=as_saved(trace.module_run))


@pytest.mark.parametrize("rope", [False, True])
def test_a_modules_trace_loads_back_with_the_width_its_scale_is_judged_by(rope):
    """Absorbed MLA scales by √qk_head_dim while q·k runs over its latent: the loaded Trace keeps that width, and its
    weights are explained as the run's were (÷ √d_head of the module's own width, not of q's length)."""
    import torch
    from helpers.user_modules import AbsorbedMLA

    from attnviz import tracing
    from attnviz.explain import explain_weight

    torch.manual_seed(0)
    trace = tracing.trace_module(AbsorbedMLA(rope=rope), torch.randn(1, 5, 64))
    loaded = attnviz.load_trace(trace_file.trace_npz(trace))
    assert loaded.module_run.score_width == trace.module_run.score_width
    assert loaded.module_run.score_width.head_dim == (24 if rope else 16)
    assert explain_weight(loaded, 1, 4, 2).scaling == explain_weight(trace, 1, 4, 2).scaling


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def with_manifest(data: bytes, change=None, drop: str | None = None) -> bytes:
    """``data``'s arrays with its manifest changed by ``change`` (a function of the dict) and array ``drop`` left
    out."""
    with np.load(io.BytesIO(data)) as stored:
        arrays = {name: stored[name] for name in stored.files if name != drop}
    manifest = json.loads(bytes(arrays["manifest.json"]))
    if change:
        change(manifest)
    arrays["manifest.json"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    return npz(**arrays)


def not_a_trace(trace) -> dict[str, bytes]:
    data = trace_file.trace_npz(trace)
    return {
        "random bytes": np.random.default_rng(0).bytes(2000),
        "empty": b"",
        "an npz without the manifest": npz(weights=np.zeros((1, 2, 3, 3), np.float32)),
        "a .npy array": npy(np.zeros(3)),
        "a manifest that is not JSON": npz(**{"manifest.json": np.frombuffer(b"{not json", dtype=np.uint8)}),
        "another format version": with_manifest(data, lambda m: m.update(format="attnviz trace v2")),
        "no format": with_manifest(data, lambda m: m.pop("format")),
        "missing weights": with_manifest(data, drop="steps/weights"),
        "missing output": with_manifest(data, drop="output"),
        "an array of another shape": with_manifest(
            data, lambda m: m["arrays"].update({"output": [9, 9]})),
        "an unknown setting": with_manifest(data, lambda m: m["config"].update(colour="red")),
        "a setting of the wrong type": with_manifest(data, lambda m: m["config"].update(num_heads="four")),
        "tokens that do not match the ids": with_manifest(data, lambda m: m.update(tokens=["a"])),
        "a pickled object array": npz(**{"manifest.json": np.array([{"format": "attnviz trace v1"}], dtype=object)}),
        "a truncated file": data[: len(data) // 2],
    }


@pytest.mark.parametrize("case", [
    "random bytes", "empty", "an npz without the manifest", "a .npy array", "a manifest that is not JSON",
    "another format version", "no format", "missing weights", "missing output", "an array of another shape",
    "an unknown setting", "a setting of the wrong type", "tokens that do not match the ids",
    "a pickled object array", "a truncated file"])
def test_a_file_that_is_not_a_trace_is_one_line_input_error(case, trace):
    with pytest.raises(InputError) as raised:
        attnviz.load_trace(not_a_trace(trace)[case])
    message = str(raised.value)
    assert "\n" not in message and "Traceback" not in message and len(message) < 400, message


def test_the_message_names_the_file_and_what_is_wrong(trace, tmp_path):
    path = tmp_path / "notes.npz"
    path.write_bytes(b"hello")
    with pytest.raises(InputError, match=r"notes\.npz is not an attnviz trace"):
        attnviz.load_trace(path)
    with pytest.raises(InputError, match="no file"):
        attnviz.load_trace(tmp_path / "missing.npz")
    with pytest.raises(InputError, match="v2"):
        attnviz.load_trace(not_a_trace(trace)["another format version"])
    with pytest.raises(InputError, match="steps/weights"):
        attnviz.load_trace(not_a_trace(trace)["missing weights"])
    with pytest.raises(InputError, match="a path, bytes or a binary file"):
        attnviz.load_trace(42)


def test_a_loaded_trace_shows_in_a_notebook(trace):
    """``attnviz.show(attnviz.load_trace(…))`` draws in Jupyter (here: a stand-in kernel)."""
    import sys
    import types

    from attnviz.views import notebook

    shown = []
    fake = types.SimpleNamespace(get_ipython=lambda: types.SimpleNamespace(kernel=object()))
    display = types.SimpleNamespace(HTML=lambda html: html, display=shown.append)
    saved = {name: sys.modules.get(name) for name in ("IPython", "IPython.display")}
    sys.modules["IPython"], sys.modules["IPython.display"] = fake, display
    try:
        loaded = attnviz.load_trace(trace_file.trace_npz(trace))
        assert notebook.show(loaded) is loaded
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    assert len(shown) == 4


# ============================== arrays that agree with the manifest but not with a Trace ==============================


def with_arrays(data: bytes, change=None, **arrays) -> bytes:
    """``data`` with ``arrays`` put in (or replaced) and listed in its manifest with their shapes, so the file agrees
    with itself; ``change`` alters the manifest further."""
    with np.load(io.BytesIO(data)) as stored:
        kept = {name: stored[name] for name in stored.files}
    kept.update({name.replace("__", "/"): array for name, array in arrays.items()})
    manifest = json.loads(bytes(kept["manifest.json"]))
    manifest["arrays"].update({name.replace("__", "/"): list(array.shape) for name, array in arrays.items()})
    if change:
        change(manifest)
    kept["manifest.json"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    return npz(**kept)


def lying(trace) -> dict[str, bytes]:
    data, n = trace_file.trace_npz(trace), trace.n  # 4 heads, n tokens
    uniform = np.full((1, 8, n, n), 1.0 / n, np.float32)
    return {
        "weights of 8 heads beside 4-head maps": with_arrays(data, steps__weights=uniform),
        "keys of 3 tokens": with_arrays(data, steps__keys=np.zeros((1, 3, 16), np.float32)),
        "an output of 2 tokens": with_arrays(data, output=np.zeros((1, 2, 2), np.float32)),
        "embeddings of 2 tokens": with_arrays(data, embeddings__token=np.zeros((2, 2), np.float32)),
        "a batch of 2 weights": with_arrays(data, steps__weights=np.repeat(trace.steps["weights"], 2, axis=0)),
        "a config of 8 heads": with_manifest(data, lambda m: m["config"].update(num_heads=8, d_in=16, d_out=16)),
        "an int text": with_manifest(data, lambda m: m.update(text=5)),
        "all-NaN weights": with_arrays(data, steps__weights=np.full((1, 4, n, n), np.nan, np.float32)),
        "int shapes": with_manifest(data, lambda m: m.update(shapes=5)),
        "a module run without ops": with_manifest(data, lambda m: m.update(module_run={"class_name": "X"})),
    }


@pytest.mark.parametrize("case", [
    "weights of 8 heads beside 4-head maps", "keys of 3 tokens", "an output of 2 tokens", "embeddings of 2 tokens",
    "a batch of 2 weights", "a config of 8 heads", "an int text", "all-NaN weights", "int shapes",
    "a module run without ops"])
def test_a_file_whose_shapes_or_fields_lie_is_refused_in_words_when_loaded(case, trace):
    """A file whose arrays' shapes disagree with each other or its manifest, or whose fields have the wrong type, or
    whose weights are all NaN, is refused when loaded, in one line saying it is not an attnviz trace — never Python's
    own words (IndexError, "object is not iterable") later."""
    with pytest.raises(InputError) as raised:
        attnviz.load_trace(lying(trace)[case])
    message = str(raised.value)
    assert "\n" not in message and "not an attnviz trace" in message, message
    for python in ("object is not iterable", "('ops')", "startswith", "IndexError"):
        assert python not in message, message


def zipped(**files: str) -> bytes:
    """A zip archive of plain files (name -> text), as zipfile writes one."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name.replace("__", "/"), text)
    return buffer.getvalue()


def torch_saved() -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save({"W_query.weight": torch.zeros(2, 2)}, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(("make", "said"), [
    (lambda: zipped(**{"manifest.json": '{"format": "other"}'}),
     "it is a zip archive holding 'manifest.json' as a plain file, not a NumPy array"),
    (lambda: zipped(**{"manifest.json": '{"format": "attnviz trace v1"}', "steps__weights.npy": "x"}),
     "it is a zip archive holding 'manifest.json' as a plain file"),
    (lambda: zipped(notes__readme="hello"), "it is a zip archive holding 'notes/readme' as a plain file"),
    (torch_saved, "it is a PyTorch file (torch.save), not a trace attnviz saved"),
    (lambda: npz(weights=np.zeros((1, 2, 3, 3), np.float32)),
     "it is an NPZ of arrays without the manifest.json every trace attnviz saves holds"),
], ids=["a plain manifest.json", "a plain manifest beside an array", "a zip of other files", "a torch.save file",
        "an npz without the manifest"])
def test_a_zip_attnviz_did_not_write_is_named_for_what_it_is(make, said, tmp_path):
    """A zip whose manifest.json is a plain file, a zip of other files, a torch.save file and an NPZ without
    manifest.json are each refused with an InputError that says what the file is, from bytes, a stream or a path —
    never an AttributeError from inside, and a torch.save file is not called an NPZ."""
    with pytest.raises(InputError) as raised:
        attnviz.load_trace(make())
    message = str(raised.value)
    assert message.startswith("The data is not an attnviz trace: ") and said in message, message
    path = tmp_path / "saved.npz"
    path.write_bytes(make())
    with open(path, "rb") as stream, pytest.raises(InputError, match="saved.npz is not an attnviz trace"):
        attnviz.load_trace(stream)
    with pytest.raises(InputError, match=re.escape(said)):
        attnviz.load_trace(path)


def test_a_text_mode_file_is_told_to_open_it_in_binary(trace, tmp_path):
    path = tmp_path / "saved.npz"
    path.write_bytes(trace_file.trace_npz(trace))
    with open(path, encoding="latin-1") as text, pytest.raises(InputError, match=r"open\(path, 'rb'\)"):
        attnviz.load_trace(text)


# ============================== members whose headers claim more than the file holds ==============================


def npy_header(shape, descr: str = "<f4") -> bytes:
    """A .npy file's magic and header (NumPy's own writer) declaring ``shape`` of ``descr``, without the data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    return buffer.getvalue()


def with_member(data: bytes, name: str, write, change=None) -> bytes:
    """``data`` with its zip member ``name`` (``"output.npy"``) written by ``write(stream)`` instead, deflated, and
    its manifest changed by ``change``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for member in source.namelist():
            if member == name:
                with archive.open(member, "w", force_zip64=True) as stream:
                    write(stream)
            elif member == "manifest.json.npy" and change is not None:
                manifest = json.loads(bytes(np.load(io.BytesIO(source.read(member)))))
                change(manifest)
                archive.writestr(member, npy(np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)))
            else:
                archive.writestr(member, source.read(member))
    return buffer.getvalue()


def zeros_after(header: bytes, megabytes: int):
    """A member's writer: ``header``, then ``megabytes`` MB of zeros (a few kB once deflated)."""
    def write(stream) -> None:
        stream.write(header)
        for _ in range(megabytes):
            stream.write(bytes(1_000_000))
    return write


@pytest.fixture()
def inflated(monkeypatch) -> list[int]:
    """The bytes read out of zip members from here on (what was inflated), one number per read."""
    reads, read = [], zipfile.ZipExtFile.read

    def counting(self, n=-1):
        data = read(self, n)
        reads.append(len(data))
        return data

    monkeypatch.setattr(zipfile.ZipExtFile, "read", counting)
    return reads


def refused(data: bytes) -> str:
    with pytest.raises(InputError) as raised:
        attnviz.load_trace(data)
    message = str(raised.value)
    assert "\n" not in message and message.startswith("The data is not an attnviz trace"), message
    return message


def test_a_header_claiming_a_huge_shape_is_refused_before_anything_is_allocated(trace):
    """A member whose header claims (100000, 100000, 100000) is refused in words naming the member, the shape it
    claims and the shape the manifest gives, before any array is allocated."""
    huge = npy_header((100_000, 100_000, 100_000)) + bytes(64)
    data = trace_file.trace_npz(trace)
    message = refused(with_member(data, "output.npy", lambda stream: stream.write(huge)))
    assert "output" in message and "(100000, 100000, 100000)" in message and str(list(trace.output.shape)) in message
    # the manifest agreeing with the header does not make it readable: no trace attnviz writes is that large
    agreeing = with_member(data, "output.npy", lambda stream: stream.write(huge),
                           change=lambda m: m["arrays"].update(output=[100_000, 100_000, 100_000]))
    assert "more than any trace attnviz writes" in refused(agreeing)


def test_a_zip_bomb_is_refused_unread(trace, inflated):
    """A member whose header honestly declares 64 MB of deflated zeros is refused in words naming the member and its
    shape, with less than 1 MB inflated."""
    header = npy_header((1, 4, 4_000_000))  # 64 MB of float32
    data = with_member(trace_file.trace_npz(trace), "output.npy", zeros_after(header, 64))
    assert len(data) < 1_000_000
    message = refused(data)
    assert "output" in message and "(1, 4, 4000000)" in message
    assert sum(inflated) < 1_000_000, f"{sum(inflated):,} bytes inflated"


def test_a_member_holding_more_or_less_than_its_shape_needs_is_refused_unread(trace, inflated):
    """The zip's own directory says how much a member inflates to: bytes beyond what its header's shape needs (a
    bomb behind a small array) or fewer are refused before the array is read."""
    output = trace.output
    header = npy_header(output.shape)
    data = trace_file.trace_npz(trace)
    message = refused(with_member(data, "output.npy", zeros_after(header + output.tobytes(), 32)))
    assert "output" in message and f"{output.nbytes + len(header):,} bytes" in message, message
    assert sum(inflated) < 1_000_000, f"{sum(inflated):,} bytes inflated"
    short = with_member(data, "output.npy", lambda stream: stream.write(header + output.tobytes()[:-4]))
    assert "output" in refused(short)


@pytest.mark.parametrize(("descr", "said"), [("|O", "Python objects"), ("<i8", "int64, not floats"),
                                             ("<U4", "<U4, not floats")])
def test_a_members_dtype_is_checked_from_its_header(trace, descr, said):
    dtype = np.dtype(descr)
    member = npy_header(trace.output.shape, descr) + bytes(0 if dtype.hasobject else trace.output.size * dtype.itemsize)
    data = with_member(trace_file.trace_npz(trace), "output.npy", lambda stream: stream.write(member))
    message = refused(data)
    assert "output" in message and said in message, message


def test_the_cap_holds_every_trace_attnviz_writes():
    """The largest trace the app runs (1,024 tokens, 64 heads: five maps of (1, 64, 1024, 1024) float32, besides
    steps, embeddings and an output of width MAX_DIM) and the float32 copy of the most one recorded forward of a user's
    module holds (half-precision tensors: twice their bytes) fit under the cap."""
    from attnviz import config, tracing

    maps = 5 * config.MAX_HEADS * config.MAX_CONTEXT_LENGTH ** 2 * 4
    widths = 16 * config.MAX_CONTEXT_LENGTH * config.MAX_DIM * 4  # queries, keys, values, context, embeddings …
    assert maps + widths < trace_file.MAX_TRACE_BYTES
    assert 2 * tracing.RECORDED_BYTES <= trace_file.MAX_TRACE_BYTES


def test_a_trace_out_of_memory_is_one_line_input_error(trace, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 3.55 PiB for an array")

    monkeypatch.setattr(np.lib.format, "read_array", no_memory)
    with pytest.raises(InputError) as raised:
        attnviz.load_trace(trace_file.trace_npz(trace))
    message = str(raised.value)
    assert message.startswith("The data could not be read: its arrays need more memory than this machine has free")
    assert "\n" not in message and "Unable to allocate" not in message, message
