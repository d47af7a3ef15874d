"""A Trace as a file and back: :func:`trace_npz` writes one as an NPZ (every array plus ``manifest.json``), the
download every page offers; :func:`load_trace` reads such a file back into a Trace the views draw as before.

The manifest (``"format": "attnviz trace v1"``) holds the config, text, tokens, shapes, device and notes, and what
a checkpoint's run (``model``: its layer, layer count and whole path) or a user module's run (``module_run``: its
class, file name, source, stage lines, ops, the head_dim its scale is judged by and the scales its config
declares) adds; the arrays are
``steps/<stage>``, ``embeddings/<name>``, ``output``, ``token_ids`` and a checkpoint run's ``model/top_ids`` and
``model/top_probs``.  Nothing in the file
names a directory of the machine that wrote it: a checkpoint and a module's file are named by their last path part.
The file is read with ``np.load(..., allow_pickle=False)``: it holds arrays and JSON, never Python objects.  Before
any array is read, each member's ``.npy`` header (NumPy's own reader, ``np.lib.format``) is checked against the
manifest and against the size the zip's directory gives it, so a header claiming petabytes or a few kB that inflate to
gigabytes are refused unread.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import zipfile
from pathlib import Path

import numpy as np

from attnviz.config import AttentionConfig, InputError, SavedName
from attnviz.kv_cache import format_bytes
from attnviz.trace import (
    ModelRun,
    ModuleRun,
    ScoreWidth,
    StageSource,
    Trace,
    make_trace,
    pieces,
    require_trace,
    shape_problem,
)

FORMAT = "attnviz trace v1"


def _public_config(trace: Trace) -> dict:
    """The config as a downloaded file may show it: a checkpoint by its file or folder name only (the server's
    directories and a session model's private reference never leave the server)."""
    config = dataclasses.asdict(trace.config)
    if config.get("checkpoint"):
        ref = str(config["checkpoint"])
        if ref.startswith("session:"):
            config["checkpoint"] = "session model"
        else:
            config["checkpoint"] = _last_part(ref)
    return config


def _last_part(path: str) -> str:
    """A path's last part (a file or folder name), whichever separator it was written with."""
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def manifest(trace: Trace) -> dict:
    """What the file says besides its arrays (JSON)."""
    return {
        "format": FORMAT,
        "config": _public_config(trace),
        "text": trace.text,
        "tokens": list(trace.tokens),
        "token_ids": list(trace.token_ids),
        "shapes": [[stage, list(shape)] for stage, shape in trace.shapes],
        "device": trace.device,
        "notes": list(trace.notes),
        "arrays": {name: list(array.shape) for name, array in _arrays(trace).items()},
        "model": None if trace.model is None else {
            "layer": trace.model.layer, "n_layers": trace.model.n_layers,
            "path": [[stage, list(shape)] for stage, shape in trace.model.path],
            "window": trace.model.window, "always_causal": trace.model.always_causal},
        "module_run": None if trace.module_run is None else _module_run_json(trace.module_run),
    }


def _module_run_json(run: ModuleRun) -> dict:
    fields = dataclasses.asdict(run)
    fields["filename"] = None if run.filename is None else _last_part(run.filename)
    fields["ops"] = [[name, list(shape), line, stage] for name, shape, line, stage in run.ops]
    fields["stage_sources"], fields["stage_texts"] = _stage_sources_json(run)
    return fields


def _stage_sources_json(run: ModuleRun) -> tuple[dict, list[str]]:
    """(each stage's place, its file by its last part and its source as a number: 0 for the module's class's source,
    written once as ``source``, else 1 + its index in the texts; the texts of the other classes and functions, each
    once): stages computed by one class share its text."""
    texts, places = [run.source], {}
    for stage, found in run.stage_sources.items():
        place = dataclasses.asdict(found)
        place["filename"] = _last_part(found.filename)
        if found.source not in texts:
            texts.append(found.source)
        place["source"] = texts.index(found.source)
        places[stage] = place
    return places, texts[1:]


def _stage_sources(run: dict) -> dict[str, StageSource]:
    """The ``StageSource`` of each stage a file's module run lists (:func:`_stage_sources_json`); none in a file
    written before they were kept, whose stages' lines are the class's."""
    texts = [run.get("source", ""), *(str(text) for text in run.pop("stage_texts", ()))]
    places = {}
    for stage, written in dict(run.get("stage_sources", {})).items():
        place = dict(written)
        number = place["source"]
        if type(number) is not int or not 0 <= number < len(texts):
            raise ValueError(f"stage {stage!r} names source text {number!r}")
        place["source"] = texts[number]
        places[str(stage)] = StageSource(**place)
    return places


def _arrays(trace: Trace) -> dict[str, np.ndarray]:
    arrays = {f"steps/{name}": array for name, array in trace.steps.items()}
    arrays.update({f"embeddings/{name}": array for name, array in trace.embeddings.items()})
    arrays["output"] = trace.output
    arrays["token_ids"] = np.asarray(trace.token_ids, dtype=np.int64)
    if trace.model is not None:
        arrays["model/top_ids"] = trace.model.top_ids
        arrays["model/top_probs"] = trace.model.top_probs
    return arrays


def trace_npz(trace: Trace) -> bytes:
    """Every array of the Trace plus ``manifest.json`` (config, tokens, shapes) in one NPZ file.

    Read it back with :func:`load_trace`; with NumPy alone, ``np.load(f)`` gives the arrays and
    ``json.loads(bytes(data["manifest.json"]))`` the manifest.  Anything but a Trace is an InputError naming what
    came.
    """
    require_trace(trace)
    buffer = io.BytesIO()
    payload = json.dumps(manifest(trace), ensure_ascii=False).encode("utf-8")
    np.savez_compressed(buffer, **_arrays(trace), **{"manifest.json": np.frombuffer(payload, dtype=np.uint8)})
    return buffer.getvalue()


# the most a trace file's arrays may need: above the largest trace attnviz writes — the app's largest run (1,024
# tokens, 64 heads: five maps of 256 MiB and steps of width MAX_DIM) holds about 1.3 GiB, and a user module's forward is
# recorded up to tracing.RECORDED_BYTES (2 GiB), kept as float32 (twice the bytes of a half-precision module's)
MAX_TRACE_BYTES = 4 * 2**30

_INTEGER_ARRAYS = ("token_ids", "model/top_ids")
_REQUIRED_ARRAYS = ("steps/weights", "output", "token_ids")


class _DamagedError(Exception):
    """Inside :func:`load_trace`: what is wrong with a file that claims to be a trace (becomes its InputError)."""


def load_trace(file) -> Trace:
    """The Trace an attnviz trace file holds (:func:`trace_npz`, a page's "Download this trace"): a path, the file's
    bytes, or a binary file object open for reading.

    Every array, the text, tokens, config, shapes, device and notes are the saved Trace's, and so are what a
    checkpoint's run adds (its layer, path and top-5 predictions) and a user module's (class, source, stage lines,
    ops): ``attnviz.show`` and ``figures_of`` draw it as they drew the saved one.  What the file does not hold:
    the model or module itself, and where it was.  The config names a checkpoint by its file or folder name only (a
    session-trained model as "session model"), and a module by its label, each a :class:`attnviz.config.SavedName`:
    ``attnviz.run(trace.text, trace.config)`` refuses them in words, loading no file and importing no module, until
    the user names their own (``dataclasses.replace(trace.config, checkpoint=PATH)``); a config of the book's
    classes runs again as it is.  Arrays are read-only, as a run's.

    Raises :class:`attnviz.config.InputError`, one line saying why, for anything that is not such a file: no file
    there, not an NPZ (a PyTorch file, a zip of other files), no manifest, a manifest of another format version, a
    missing or misshapen array.  Each array's header is checked before the array is read: a shape or dtype its
    manifest does not list, a member that inflates to more or less than its shape needs (a zip bomb), and arrays that
    need more than ``MAX_TRACE_BYTES`` are refused unread.  The file is read with ``allow_pickle=False``: an array of
    Python objects is refused, never unpickled.  A trace too large for the memory left is an InputError too.
    """
    source, name = _opened(file)
    try:
        _check_npz(source)
        headers = _array_headers(source)
        with np.load(source, allow_pickle=False) as data:
            _check_total([headers["manifest.json"]])
            described = _manifest(data["manifest.json"])
            arrays = _read_arrays(data, described, headers)
            return _trace(described, arrays)
    except _DamagedError as why:
        raise InputError(f"{name} is not an attnviz trace: {why}") from None
    except InputError as error:  # a setting the config cannot have
        raise InputError(f"{name} is not an attnviz trace: its config cannot run ({error})") from None
    except MemoryError:  # arrays under MAX_TRACE_BYTES, on a machine with less free
        raise InputError(f"{name} could not be read: its arrays need more memory than this machine has free. Close "
                         "other programs, or load it on a machine with more memory.") from None
    except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile, RuntimeError) as error:
        reason = _python_words(error)
        raise InputError(f"{name} is not an attnviz trace, or it is damaged: it could not be read ({reason}). If "
                         "it was cut short, download or save it again.") from None


_SAVE = "Save one with a page's Download this trace, or attnviz.trace_file.trace_npz(trace) in Python."


def _check_npz(source) -> None:
    """An NPZ is a zip archive: say what the file is when it is not one (empty, a .npy array, anything else)."""
    if isinstance(source, Path):
        with open(source, "rb") as stream:
            start = stream.read(6)
    else:
        position = source.tell()
        start = source.read(6)
        source.seek(position)
    if not start:
        raise _DamagedError(f"it is empty (0 bytes). {_SAVE}")
    if start == b"\x93NUMPY":
        raise _DamagedError(f"it is a single NumPy array (.npy), not an NPZ archive of arrays. {_SAVE}")
    if not start.startswith(b"PK"):
        raise _DamagedError(f"it is not an NPZ file (a zip archive of arrays). {_SAVE}")


@dataclasses.dataclass(frozen=True)
class _Member:
    """What a member's ``.npy`` header declares, and the bytes the zip's directory says it inflates to (the most
    zipfile reads out of it)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    header_bytes: int
    stored_bytes: int

    @property
    def data_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def check_size(self) -> None:
        """The member holds its header and what its shape needs, no more (a bomb behind a small array), no less."""
        needed = self.header_bytes + self.data_bytes
        if self.stored_bytes != needed:
            raise _DamagedError(f"the array {self.name} {self.shape} of {self.dtype} is {needed:,} bytes with its "
                                f"header, but its entry in the zip holds {self.stored_bytes:,} bytes: attnviz did "
                                "not write it, or it is damaged.")


def _array_headers(source) -> dict[str, _Member]:
    """Each array's header by its name in the NPZ (``"output"``), none of its data read.

    Say what a zip archive is when attnviz did not write it: a trace holds NumPy arrays only (``.npy`` members,
    ``manifest.json.npy`` among them), so a PyTorch file, a zip of other files and an NPZ without the manifest are
    each named."""
    position = None if isinstance(source, Path) else source.tell()
    with zipfile.ZipFile(source) as archive:
        names = archive.namelist()
        _name_members(names)
        headers = {name.removesuffix(".npy"): _header(archive, name) for name in names}
    if position is not None:
        source.seek(position)
    return headers


def _header(archive: zipfile.ZipFile, member: str) -> _Member:
    """``member``'s ``.npy`` header, read by NumPy's own reader (``np.lib.format``; a few hundred bytes inflated);
    an array of Python objects or of a negative size is refused here."""
    name = member.removesuffix(".npy")
    info = archive.getinfo(member)
    with archive.open(info) as stream:
        try:
            version = np.lib.format.read_magic(stream)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f".npy format version {version[0]}.{version[1]}, which NumPy writes only for "
                                 "structured arrays")
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(stream)
        except ValueError as error:
            raise _DamagedError(f"its {name} is not a NumPy array it can read ({_python_words(error)}).") from None
        header_bytes = stream.tell()
    if dtype.hasobject:
        raise _DamagedError(f"the array {name} holds Python objects (a pickle), which attnviz never writes: it is "
                            "refused, not unpickled.")
    if any(size < 0 for size in shape):
        raise _DamagedError(f"the array {name} claims the shape {shape}, which no array has.")
    return _Member(name, shape, dtype, header_bytes, info.file_size)


def _check_total(members) -> None:
    """``members`` (what is about to be read) hold what their shapes need and, together, no more than
    ``MAX_TRACE_BYTES``."""
    needed = sum(member.data_bytes for member in members)
    if needed > MAX_TRACE_BYTES:
        raise _DamagedError(f"its arrays would need {format_bytes(needed)}, more than any trace attnviz writes "
                            f"({format_bytes(MAX_TRACE_BYTES)}): it is refused unread.")
    for member in members:
        member.check_size()


def _name_members(names: list[str]) -> None:
    """A zip whose members are not a trace's arrays, named for what it is."""
    if any(name.rsplit("/", 1)[-1] == "data.pkl" for name in names):
        raise _DamagedError("it is a PyTorch file (torch.save), not a trace attnviz saved: a model's .pth runs with "
                            "attnviz.AttentionConfig(checkpoint=path).")
    others = [name for name in names if not name.endswith(".npy")]
    if others:
        raise _DamagedError(f"it is a zip archive holding {others[0]!r} as a plain file, not a NumPy array: attnviz "
                            f"saves a trace as arrays only, its manifest.json too. {_SAVE}")
    if "manifest.json.npy" not in names:
        raise _DamagedError(f"it is an NPZ of arrays without the manifest.json every trace attnviz saves holds. "
                            f"{_SAVE}")


def _opened(file):
    """(what ``np.load`` reads, the name messages give it) for a path, bytes or a binary file object."""
    if isinstance(file, bytes | bytearray | memoryview):
        return io.BytesIO(bytes(file)), "The data"
    if isinstance(file, str | os.PathLike):
        path = Path(os.path.expanduser(file))  # "~/attnviz-trace.npz", as in a shell
        if not path.exists():
            raise InputError(f"There is no file at {path}: check the path of the saved trace (.npz).")
        if path.is_dir():
            raise InputError(f"{path} is a folder: give the saved trace's .npz file in it.")
        return path, path.name
    if hasattr(file, "read") and hasattr(file, "seek"):
        name = getattr(file, "name", None)
        if isinstance(file, io.TextIOBase) or isinstance(file.read(0), str):
            raise InputError(f"{_last_part(name) if isinstance(name, str) else 'This file'} is open as text: an "
                             "attnviz trace is binary, open it with open(path, 'rb') or give load_trace the path.")
        return file, (_last_part(name) if isinstance(name, str) else "This file")
    raise InputError(f"load_trace takes a path, bytes or a binary file open for reading, got {type(file).__name__}.")


def _manifest(stored: np.ndarray) -> dict:
    if stored.dtype != np.uint8 or stored.ndim != 1:
        raise _DamagedError("its manifest.json is not the JSON text attnviz writes.")
    try:
        described = json.loads(stored.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _DamagedError(f"its manifest.json is not JSON ({error}).") from None
    if not isinstance(described, dict):
        raise _DamagedError("its manifest.json is not a JSON object.")
    version = described.get("format")
    if version is None:
        raise _DamagedError("its manifest names no format (attnviz writes \"format\": \"attnviz trace v1\").")
    if version != FORMAT:
        raise _DamagedError(f"its manifest says format {version!r}; this attnviz reads {FORMAT!r} (a file of another "
                       "format version needs the attnviz release that wrote it).")
    return described


def _read_arrays(data, described: dict, headers: dict[str, _Member]) -> dict[str, np.ndarray]:
    """Every array the manifest lists, read-only; before any is read, each header's shape and dtype (``headers``:
    :func:`_array_headers`) is checked against the listed shape and the kind of number it holds, and every member's
    size against its shape and the cap (:func:`_check_total`)."""
    listed = described.get("arrays")
    if not isinstance(listed, dict):
        raise _DamagedError("its manifest lists no arrays.")
    for required in (*_REQUIRED_ARRAYS, *(("model/top_ids", "model/top_probs") if described.get("model") else ())):
        if required not in listed:
            raise _DamagedError(f"the array {required} is missing.")
    for name, shape in listed.items():
        if name not in headers:
            raise _DamagedError(f"the array {name} is missing.")
        member = headers[name]
        if list(member.shape) != shape:
            raise _DamagedError(f"the array {name} is {member.shape}, its manifest says {shape}.")
        kind = "i" if name in _INTEGER_ARRAYS else "f"
        if member.dtype.kind != kind and member.data_bytes:
            wanted = "whole numbers" if kind == "i" else "floats"
            raise _DamagedError(f"the array {name} holds {member.dtype}, not {wanted}.")
    _check_total([headers[name] for name in listed])
    arrays = {}
    for name in listed:
        array = data[name]
        array.setflags(write=False)
        arrays[name] = array
    return arrays


# the manifest's fields: (the JSON type each must have, what to call it in a message)
_FIELDS = {"config": (dict, "an object of settings"), "text": (str, "a string"), "tokens": (list, "a list of strings"),
           "shapes": (list, "a list of [stage, shape] pairs"), "device": (str, "a string"),
           "notes": (list, "a list of strings"), "model": ((dict, type(None)), "an object or null"),
           "module_run": ((dict, type(None)), "an object or null")}


def _check_fields(described: dict) -> None:
    """Every manifest field :func:`manifest` writes, of the type it writes."""
    for key, (kind, said) in _FIELDS.items():
        if key not in described:
            raise _DamagedError(f"its manifest has no {key!r}.")
        if not isinstance(described[key], kind):
            raise _DamagedError(f"its manifest's {key!r} is {type(described[key]).__name__}, not {said}.")
    for key in ("tokens", "notes"):
        if not all(isinstance(item, str) for item in described[key]):
            raise _DamagedError(f"its manifest's {key!r} is not {_FIELDS[key][1]}.")


def _trace(described: dict, arrays: dict[str, np.ndarray]) -> Trace:
    """The Trace of a read manifest and its arrays."""
    _check_fields(described)
    settings = dict(described["config"])
    unknown = sorted(set(settings) - {field.name for field in dataclasses.fields(AttentionConfig)})
    if unknown:
        raise _DamagedError(f"its config has settings this attnviz does not know: {', '.join(map(str, unknown))}.")
    for key in ("checkpoint", "module"):  # names of what ran where the file was made: a run here refuses them
        if isinstance(settings.get(key), str):
            settings[key] = SavedName(settings[key])
    config = AttentionConfig(**settings).validate()
    token_ids = [int(i) for i in arrays["token_ids"]]
    tokens = tuple(described["tokens"])
    n = len(token_ids)
    weights = arrays["steps/weights"]
    if len(tokens) != n or weights.ndim != 4 or weights.shape[-2:] != (n, n):
        raise _DamagedError(f"its {len(tokens)} tokens, {n} token ids and weights {tuple(weights.shape)} do not match.")
    tokenized = all(0 <= i < 50257 for i in token_ids) and tuple(t.piece for t in pieces(tuple(token_ids))) == tokens
    if not tokenized and tokens != tuple(f"x[{i}]" for i in token_ids):
        raise _DamagedError("its tokens are not the pieces of its token ids.")
    if not np.all(np.isfinite(weights)):
        raise _DamagedError("its attention weights are not all finite numbers (NaN or infinite): no run of attnviz "
                            "writes those.")
    try:
        model, module_run = _runs(described, arrays)
        shapes = _shapes(described["shapes"])
    except (KeyError, TypeError, ValueError) as error:
        raise _DamagedError(f"its manifest's model, module_run or shapes are not what attnviz writes "
                            f"({_python_words(error)}).") from None
    trace = make_trace(
        config, described["text"], token_ids,
        {name.removeprefix("embeddings/"): array for name, array in arrays.items() if name.startswith("embeddings/")},
        steps={name.removeprefix("steps/"): array for name, array in arrays.items() if name.startswith("steps/")},
        output=arrays["output"], shapes=shapes, device=described["device"],
        notes=list(described["notes"]), model=model, module_run=module_run, tokenized=tokenized)
    problem = shape_problem(trace)
    if problem:
        raise _DamagedError(problem)
    return trace


def _python_words(error: Exception) -> str:
    """What Python said, as a reader can follow it: a missing key is named as one."""
    if isinstance(error, KeyError):
        return f"the field {error.args[0]!r} is missing" if error.args else "a field is missing"
    return str(error).strip().splitlines()[0][:120] if str(error).strip() else type(error).__name__


def _runs(described: dict, arrays: dict[str, np.ndarray]) -> tuple[ModelRun | None, ModuleRun | None]:
    """What a checkpoint's run (``model``) and a user module's run (``module_run``) add, from the manifest."""
    model = None
    if described.get("model"):
        run = described["model"]
        model = ModelRun(layer=int(run["layer"]), n_layers=int(run["n_layers"]), path=_shapes(run["path"]),
                         top_ids=arrays["model/top_ids"], top_probs=arrays["model/top_probs"],
                         window=None if run.get("window") is None else int(run["window"]),
                         always_causal=bool(run.get("always_causal", False)))
    module_run = None
    if described.get("module_run"):
        run = dict(described["module_run"])
        run["ops"] = tuple((str(name), tuple(int(size) for size in shape), line, stage)
                           for name, shape, line, stage in run["ops"])
        if run.get("score_width") is not None:  # written as an object; a file without it: the width of q·k
            width = dict(run["score_width"])
            width["summed_widths"] = tuple(int(size) for size in width.get("summed_widths", ()))
            run["score_width"] = ScoreWidth(**width)
        run["declared_scales"] = tuple((float(scale), str(setting))  # a file without them: none declared
                                       for scale, setting in run.get("declared_scales", ()))
        run["attention_places"] = tuple(str(place) for place in run.get("attention_places", ("",)))  # else: one
        run["stage_sources"] = _stage_sources(run)
        module_run = ModuleRun(**run)
    return model, module_run


def _shapes(listed) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((str(stage), tuple(int(size) for size in shape)) for stage, shape in listed)
