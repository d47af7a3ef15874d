"""What a page says about a checkpoint it cannot load holds no path of the server's file system
(``attnviz.ui.weights``): a path left in a loader's message — attnviz's, transformers', torch's — is cut to its last
part, also when a folder on it has a space in its name, when it starts at ``~`` or is a Windows path; the words around
it stay as they are."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from helpers.checkpoints import random_gpt2
from hypothesis import given
from hypothesis import strategies as st

from attnviz.models import CheckpointError, load_checkpoint
from attnviz.ui.weights import without_paths

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def spaced(tmp_path_factory) -> Path:
    """A folder whose path has spaces in two of its parts, holding a good Hugging Face GPT-2 folder and broken ones."""
    root = tmp_path_factory.mktemp("server") / "a b" / "My Models"
    root.mkdir(parents=True)
    random_gpt2(0, n_layer=1, n_head=2, n_embd=8, n_positions=16, vocab_size=64).save_pretrained(root / "good ckpt")
    config = (root / "good ckpt" / "config.json").read_text()
    good = (root / "good ckpt" / "model.safetensors").read_bytes()
    for name, files in {"truncated ckpt": {"model.safetensors": good[: len(good) // 3]},
                        "damaged bin": {"pytorch_model.bin": b"not a pickle " * 8},
                        "code ckpt": {"pytorch_model.bin": pickle.dumps({"x": Path("x")})},
                        "bad config": {"config.json": b"{nope", "model.safetensors": good},
                        "empty dir": {}}.items():
        (root / name).mkdir()
        for file, data in {"config.json": config.encode(), **files}.items() if name != "empty dir" else ():
            (root / name / file).write_bytes(data)
    return root


def messages(root: Path) -> list[tuple[str, Path]]:
    """The messages transformers' ``from_pretrained``, ``torch.load`` and attnviz's loader give for the checkpoints
    in ``root``, each with the longest path under ``root`` it names (``root`` itself when it names none)."""
    said = []
    for name in ("missing dir", "empty dir", "truncated ckpt", "bad config", "damaged bin"):
        with pytest.raises(Exception) as caught:  # each library raises its own kind (OSError, SafetensorError, …)
            transformers.GPT2LMHeadModel.from_pretrained(str(root / name))
        said.append(str(caught.value))
    with pytest.raises(FileNotFoundError) as caught:
        torch.load(str(root / "missing.pth"), weights_only=True)
    said.append(str(caught.value))
    for name in ("missing dir", "empty dir", "truncated ckpt", "bad config", "damaged bin", "code ckpt"):
        with pytest.raises(CheckpointError) as caught:
            load_checkpoint(root / name)
        said.append(str(caught.value))
    paths = sorted([*root.rglob("*"), root / "missing dir", root / "missing.pth"], key=lambda p: len(str(p)))
    return [(message, next((p for p in reversed(paths) if str(p) in message), root)) for message in said]


def test_real_loader_messages_about_a_folder_with_spaces_keep_only_the_last_part(spaced):
    table = messages(spaced)
    assert sum(str(spaced) in message for message, _ in table) >= 8  # the libraries name the full path
    for message, path in table:
        shown = without_paths(message)
        assert "a b" not in shown and "My Models" not in shown and str(spaced.parents[1]) not in shown, message
        if str(path) in message:  # the words around the path are kept, the path becomes its last part
            assert shown == message.replace(str(path), path.name)


@pytest.mark.parametrize("message, shown", [
    ("/home/a b/ckpt/model.safetensors is truncated.", "model.safetensors is truncated."),
    ("Could not read ~/ckpt/x: Permission denied.", "Could not read x: Permission denied."),
    (r"C:\Users\A B\x is not a PyTorch checkpoint.", "x is not a PyTorch checkpoint."),
    ("No file or folder at /srv/My Models/gpt2 small. Check the path.",
     "No file or folder at gpt2 small. Check the path."),
    ("in '/srv/A B/x.bin' and /srv/y/z.bin, or a .safetensors / .pth / .pt / .bin file",
     "in 'x.bin' and z.bin, or a .safetensors / .pth / .pt / .bin file"),
    ("Saved to /tmp/out. Then run hf download openai-community/gpt2",
     "Saved to out. Then run hf download openai-community/gpt2"),  # a sentence never ends inside a folder's name
    ("see https://pytorch.org/docs/stable/generated/torch.load.html.",
     "see https://pytorch.org/docs/stable/generated/torch.load.html."),
])
def test_paths_in_messages(message, shown):
    assert without_paths(message) == shown


WORD = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", min_size=1, max_size=8)
FOLDER = st.lists(WORD, min_size=1, max_size=3).map(" ".join)  # a folder's name, maybe with spaces in it
WORDS = ["is", "not", "a", "checkpoint.", "Fetch", "it", "again", "(or", "not)", "—", "model.safetensors", "+",
         "config.json:", "=", "'x'", "/"]
SENTENCE = st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join)  # ordinary words of a message


@given(root=st.sampled_from(["/", "~/", "C:\\", "D:/"]), folders=st.lists(FOLDER, min_size=1, max_size=4),
       last=WORD, before=SENTENCE, after=SENTENCE)
def test_a_path_among_words_is_cut_to_its_last_part_and_the_words_stay(root, folders, last, before, after):
    separator = "\\" if root == "C:\\" else "/"
    path = root + separator.join([*folders, last])
    assert without_paths(f"{before} {path} {after}") == f"{before} {last} {after}"
