"""Files in and out: the one home for reading user files and for writing output files.

Reading (:func:`read_npy`, :func:`read_npz`, :func:`read_torch`): a missing file, a directory,
a FIFO or a device, a file of the wrong kind, a truncated or corrupt one, or a header that claims
more than the file holds is one ValueError naming the file; nothing is unpickled, and nothing a
header merely claims is allocated. A zip archive (``.npz``) may inflate to at most
:data:`MAX_BYTES` (the ``max_bytes`` argument raises or lowers the cap): the members' declared
sizes are checked before anything is read, and no member is inflated past its declared size.

Writing (:func:`atomic_output`, :func:`write_atomic`): every output goes to a temporary file in
the target's folder, is flushed and synced to disk, and is then renamed over the target. A failed
write (a full disk, a file-size limit, a vanished folder) removes the temporary file, leaves the
old target exactly as it was, and raises one ValueError naming the target.
:func:`check_outputs` checks, before any work, that every output's folder exists and is writable
and that no output is an input or another output.

>>> import tempfile, os, pathlib
>>> folder = tempfile.mkdtemp()
>>> path = os.path.join(folder, "out.txt")
>>> write_atomic(path, b"hello\\n") == path, pathlib.Path(path).read_text(), os.listdir(folder)
(True, 'hello\\n', ['out.txt'])
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

__all__ = [
    "FIGURE_SUFFIXES",
    "MAX_BYTES",
    "atomic_output",
    "check_archive",
    "check_outputs",
    "figure_metadata",
    "figure_name",
    "first_bytes",
    "read_npy",
    "read_npz",
    "read_torch",
    "same_file",
    "save_figure",
    "save_npy",
    "write_atomic",
]


# ---- writing ------------------------------------------------------------------------------------
def _umask_mode() -> int:
    """The mode a new file gets here (0o666 less the umask)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _sync_folder(folder: str) -> None:
    # the rename lives in the folder: sync it too, or a crash may forget it
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _name(path: str) -> str:
    """A file name for a message: repr'd (control characters escaped), cut when absurdly long."""
    return repr(path) if len(path) <= 300 else f"{path[:200]!r}... ({len(path):,} characters)"


def _cannot_write(target: str, e: OSError) -> ValueError:
    reason = e.strerror or str(e) or type(e).__name__
    return ValueError(f"cannot write {_name(target)}: {reason} (nothing written; any old file is unchanged)")


@contextlib.contextmanager
def atomic_output(target: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path beside ``target`` for a writer that wants a file name; when the block
    ends, the file is synced to disk and renamed over ``target``.

    The temporary name keeps ``target``'s suffix (a plot's format or a history's kind follow the
    suffix). On an error the temporary file is removed and ``target`` is left as it was; an
    OSError becomes one ValueError naming ``target``.

    >>> import tempfile, os, pathlib
    >>> folder = tempfile.mkdtemp()
    >>> with atomic_output(os.path.join(folder, "a.json")) as tmp:
    ...     _ = pathlib.Path(tmp).write_text("{}")
    >>> os.listdir(folder)
    ['a.json']
    """
    path = os.fspath(target)
    folder = os.path.dirname(os.path.abspath(path))
    stem, ext = os.path.splitext(os.path.basename(path))
    if os.path.exists(path) and not os.path.isfile(path):
        # a rename over a device, a FIFO or a folder would replace it: refuse
        raise ValueError(f"cannot write {_name(path)}: it exists and is not a regular file")
    try:
        mode = os.stat(path).st_mode & 0o7777 if os.path.isfile(path) else _umask_mode()
        fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=f".tmp{ext}", dir=folder)
        os.close(fd)
    except OSError as e:
        raise _cannot_write(path, e) from None
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _cannot_write(path, e) from None
        raise
    _sync_folder(folder)


def write_atomic(target: str | os.PathLike[str], data: bytes | str | Callable[[IO[bytes]], Any]) -> str:
    """Write ``data`` (bytes, text as UTF-8, or a function that writes to a binary file object)
    to ``target`` atomically (see :func:`atomic_output`); return the path.

    Every byte goes through Python's file object, whose write and flush report a full disk
    (numpy's ``tofile`` does not).

    >>> import tempfile, os, pathlib
    >>> path = os.path.join(tempfile.mkdtemp(), "t.txt")
    >>> _ = write_atomic(path, "first"); _ = write_atomic(path, lambda fh: fh.write(b"second"))
    >>> pathlib.Path(path).read_text()
    'second'
    """
    path = os.fspath(target)
    with atomic_output(path) as tmp, open(tmp, "wb") as fh:
        if isinstance(data, str):
            fh.write(data.encode("utf-8"))
        elif isinstance(data, (bytes, bytearray, memoryview)):
            fh.write(data)
        else:
            data(fh)
        fh.flush()
    return path


class _Stream:
    """A file object that numpy does not recognise as a real file, so that ``np.save`` writes
    through ``write`` (which reports errors) instead of ``tofile`` (which drops flush errors)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh

    def write(self, data: bytes) -> int:
        return self._fh.write(data)


def save_npy(target: str | os.PathLike[str], array: Any) -> str:
    """Write ``array`` as a ``.npy`` file at ``target`` (the name as given: no ".npy" is added),
    atomically; return the path.

    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
    >>> _ = save_npy(path, np.arange(3.0)); read_npy(path).tolist()
    [0.0, 1.0, 2.0]
    """
    import numpy as np

    return write_atomic(target, lambda fh: np.save(_Stream(fh), array, allow_pickle=False))


#: the figure formats the plots take, by suffix
FIGURE_SUFFIXES = (".png", ".svg", ".svgz", ".pdf", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")


def figure_name(path: str) -> str:
    """The file a figure named ``path`` goes to: ``path`` itself, or ``path + ".png"`` when it has
    no suffix (as matplotlib does).

    >>> figure_name("curves"), figure_name("curves.svg")
    ('curves.png', 'curves.svg')
    """
    return path if os.path.splitext(path)[1] else path + ".png"


# the metadata keys that carry the time of writing, per figure format: without them two identical
# runs write identical bytes
_DATED = {
    "pdf": ("CreationDate", "ModDate"),
    "svg": ("Date",),
    "svgz": ("Date",),
    "ps": ("CreationDate",),
    "eps": ("CreationDate",),
}


def figure_metadata(path: str, fmt: str | None = None) -> dict[str, None] | None:
    """The ``metadata`` for matplotlib's ``savefig`` of a figure written to ``path`` (or in format
    ``fmt``): the dates dropped from PDF, SVG and PostScript files, so that identical runs give
    identical bytes; None for the formats that carry no date (PNG).

    >>> figure_metadata("curves.pdf"), figure_metadata("curves.png")
    ({'CreationDate': None, 'ModDate': None}, None)
    """
    kind = (fmt or os.path.splitext(path)[1][1:] or "png").lower()
    keys = _DATED.get(kind)
    return dict.fromkeys(keys) if keys else None


def save_figure(fig: Any, path: str | os.PathLike[str], *, dpi: int, fmt: str | None = None) -> None:
    """``fig.savefig(path)`` with nothing in the file that changes from run to run: no dates
    (:func:`figure_metadata`) and, in SVG, clip-path names drawn from a fixed salt instead of
    random ones. The write itself is not atomic: give a path from :func:`atomic_output`.

    >>> from matplotlib.figure import Figure
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> fig = Figure(); _ = fig.add_subplot().plot([0, 1])
    >>> for name in ("a.svg", "b.svg"): save_figure(fig, folder / name, dpi=72)
    >>> (folder / "a.svg").read_bytes() == (folder / "b.svg").read_bytes()
    True
    """
    import matplotlib

    name = os.fspath(path)
    with matplotlib.rc_context({"svg.hashsalt": "floatlab"}):
        fig.savefig(name, dpi=dpi, format=fmt, metadata=figure_metadata(name, fmt))


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def same_file(a: str, b: str) -> bool:
    """Whether the paths ``a`` and ``b`` name one file (both existing: the same inode; else the
    same real path).

    >>> same_file("x/../a.npy", "a.npy"), same_file("a.npy", "b.npy")
    (True, False)
    """
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return _real(a) == _real(b)


def check_outputs(
    outputs: Sequence[tuple[str, str | None]],
    inputs: Sequence[tuple[str, str | None]] = (),
    *,
    suffixes: dict[str, tuple[str, ...]] | None = None,
) -> None:
    """Before any work: every output (option, path) can be written, is no input and no other
    output; ValueError naming the option otherwise. Outputs and inputs given as None are skipped;
    ``suffixes`` maps an option to the suffixes it accepts.

    >>> check_outputs([("--history", "h.json")], [("--resume", "ck.npz")])
    >>> check_outputs([("--history", "ck.npz")], [("--resume", "ck.npz")])
    Traceback (most recent call last):
    ...
    ValueError: --history 'ck.npz' is the file given to --resume: expected another name
    >>> check_outputs([("--plot", "/nonexistent/x.png")])
    Traceback (most recent call last):
    ...
    ValueError: --plot '/nonexistent/x.png': the folder '/nonexistent' does not exist
    """
    given = [(opt, p) for opt, p in outputs if p is not None]
    sources = [(opt, p) for opt, p in inputs if p is not None]
    for i, (opt, path) in enumerate(given):
        name = _name(path)
        if not isinstance(path, str) or not path:
            raise ValueError(f"{opt} {name}: expected a file name")
        if os.path.isdir(path):
            raise ValueError(f"{opt} {name} is a directory: expected a file name")
        allowed = (suffixes or {}).get(opt)
        if allowed and os.path.splitext(path)[1].lower() not in allowed:
            raise ValueError(f"{opt} {name}: expected a name ending in {', '.join(allowed)}")
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.exists(path) and not os.path.isfile(path):
            kind = _kind_of(path)
            raise ValueError(f"{opt} {name} is not a regular file ({kind}): expected a file to write")
        if not os.path.isdir(folder):
            what = "is not a folder" if os.path.exists(folder) else "does not exist"
            raise ValueError(f"{opt} {name}: the folder {_name(folder)} {what}")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ValueError(f"{opt} {name}: the folder {_name(folder)} is not writable")
        for other, src in sources:
            if same_file(path, src):
                raise ValueError(f"{opt} {name} is the file given to {other}: expected another name")
        for other, earlier in given[:i]:
            if same_file(path, earlier):
                raise ValueError(f"{opt} {name} is also the file of {other}: expected another name")


# ---- reading ------------------------------------------------------------------------------------
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a .npz archive, or a torch file (also a zip)


def _kind_of(path: str) -> str:
    mode = os.stat(path).st_mode
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def first_bytes(path: str, what: str) -> bytes:
    """The first bytes of the file at ``path``, or a ValueError saying why it cannot be read
    (missing, a directory, a FIFO or a device: anything but a regular file).

    >>> first_bytes("/nonexistent/x.npy", "a .npy array file")
    Traceback (most recent call last):
    ...
    ValueError: no such file: '/nonexistent/x.npy' (expected a .npy array file)
    """
    if not isinstance(path, str) or not path:
        raise ValueError(f"file name {path!r}: expected the path of {what}")
    if not os.path.exists(path):
        raise ValueError(f"no such file: {path!r} (expected {what})")
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a directory: expected {what}")
    if not os.path.isfile(path):  # a FIFO would block the read, a device never end it
        raise ValueError(f"{path!r} is not a regular file ({_kind_of(path)}): expected {what}")
    try:
        with open(path, "rb") as fh:
            return fh.read(8)
    except OSError as e:
        raise ValueError(f"cannot read {path!r}: {e.strerror or e} (expected {what})") from None


_KINDS: dict[str, tuple[str, tuple[bytes, ...], tuple[bytes, ...], str, str]] = {
    # kind: (what is expected, its magic, the other kind's magic, what the other kind is, what it is not)
    "npy": (
        "a .npy array file",
        (_NPY_MAGIC,),
        _ZIP_MAGIC,
        "is a zip archive (a .npz or torch file)",
        "it lacks the .npy magic bytes",
    ),
    "npz": (
        "a .npz archive of arrays",
        _ZIP_MAGIC,
        (_NPY_MAGIC,),
        "is a single .npy array, not a .npz archive",
        "it is not a zip archive",
    ),
}


def _check_kind(path: str, kind: str) -> str:
    """Check by its first bytes that the file at ``path`` is a .npy or .npz (``kind``) file; return
    what it is expected to be, for messages."""
    what, magic, other, other_text, not_text = _KINDS[kind]
    head = first_bytes(path, what)
    if head.startswith(other):
        raise ValueError(f"{path!r} {other_text}: expected {what}")
    if not head.startswith(magic):
        raise ValueError(f"{path!r} is not a .{kind} file ({not_text}): expected {what}")
    return what


def read_npy(path: str, *, mmap: bool = False) -> Any:
    """The array in the ``.npy`` file at ``path`` (memory-mapped with ``mmap``, else in memory).

    Anything else is one ValueError naming the file: a missing file, a directory, a ``.npz``
    or torch archive, a file that is not a ``.npy`` at all, a truncated header, a header whose
    shape needs more bytes than the file holds (checked before anything is allocated), or an
    array of Python objects (never unpickled).

    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.arange(3.0)); read_npy(path).tolist()
    [0.0, 1.0, 2.0]
    >>> with open(path, "r+b") as fh: _ = fh.truncate(os.path.getsize(path) - 1)
    >>> read_npy(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: cannot read '...x.npy' as a .npy array: mmap length is greater than file size
    """
    import numpy as np

    _check_kind(path, "npy")
    try:
        # memory-mapping first checks the header's shape against the file's size, so that a
        # corrupt header cannot make us allocate what the file does not hold
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        if not mmap:
            arr = np.array(arr)
    except Exception as e:  # numpy raises several kinds for a damaged file; all mean the same here
        raise ValueError(f"cannot read {path!r} as a .npy array: {e}") from None
    return arr


#: the most bytes a zip archive (.npz, a checkpoint) may inflate to unless the caller says more:
#: a 2 MB file of zeros can claim 2 GiB
MAX_BYTES = 1 << 30


def _size_text(n: int) -> str:
    """A byte count as people read it.

    >>> _size_text(1 << 30), _size_text(3 << 20), _size_text(1500)
    ('1 GiB', '3 MiB', '1,500 bytes')
    """
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift:,} {unit}"
    return f"{n:,} bytes"


def _over_cap(path: str, size: int, max_bytes: int, what: str) -> ValueError:
    return ValueError(
        f"{_name(path)} would inflate to {size:,} bytes ({what}), over the cap of "
        f"{_size_text(max_bytes)}: refused (raise the cap with --max-bytes if the file is trusted)"
    )


def check_archive(path: str, max_bytes: int = MAX_BYTES) -> None:
    """Check, from the zip's directory and before anything is inflated, that the archive at
    ``path`` (a .npz or checkpoint file) is a regular file whose members declare at most
    ``max_bytes`` in all; ValueError naming the file otherwise.

    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npz")
    >>> np.savez_compressed(path, a=np.zeros(1 << 20))
    >>> check_archive(path)
    >>> check_archive(path, max_bytes=1 << 20)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: '...x.npz' would inflate to 8,388,736 bytes (its members' declared sizes), over ...
    """
    import zipfile

    what = _check_kind(path, "npz")
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except Exception as e:  # zipfile raises several kinds for a damaged directory
        raise ValueError(f"cannot read {_name(path)} as {what}: {e}") from None
    declared = sum(info.file_size for info in infos)
    if declared > max_bytes:
        raise _over_cap(path, declared, max_bytes, "its members' declared sizes")
    try:
        with zipfile.ZipFile(path) as zf:
            for info in infos:  # each array header against its member (a few hundred bytes inflated)
                with zf.open(info) as member:
                    if member.read(6) == _NPY_MAGIC:
                        _npy_header(member, info.file_size, info.filename)
    except Exception as e:  # zipfile, zlib and numpy raise several kinds for a damaged archive
        raise ValueError(f"cannot read {_name(path)} as {what}: {e}") from None


def read_npz(path: str, *, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """Every array of the ``.npz`` archive at ``path``, by name; one ValueError naming the file
    for anything else (as :func:`read_npy`; a damaged zip, an entry that is not a .npy array, an
    entry whose header asks for more bytes than it holds, object arrays, an archive whose members
    would inflate past ``max_bytes`` in all: checked on the declared sizes before reading, and
    while inflating, which never goes past a member's declared size or the array its header
    describes).

    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npz")
    >>> np.savez(path, a=np.ones(2)); {k: v.tolist() for k, v in read_npz(path).items()}
    {'a': [1.0, 1.0]}
    """
    import zipfile

    check_archive(path, max_bytes)
    what = _check_kind(path, "npz")
    out: dict[str, Any] = {}
    budget = max_bytes
    try:  # (the declared sizes were checked; the budget guards a header that lies about them)
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with zf.open(info) as member:
                    arr = _read_npy_entry(member, info.file_size, info.filename, budget)
                budget -= arr.nbytes
                out[name] = arr
    except Exception as e:  # zipfile, zlib and numpy raise several kinds; all mean a damaged file
        raise ValueError(f"cannot read {_name(path)} as {what}: {e}") from None
    return out


_READ_CHUNK = 1 << 22  # bytes inflated at a time


def _npy_header(fh: Any, size: int, name: str) -> tuple[tuple[int, ...], bool, Any, int]:
    """The .npy header of an archive entry, read after its magic: (shape, fortran order, dtype,
    bytes of data); refused when the data would need more bytes than the entry declares."""
    from numpy.lib import format as npy_format

    major, _minor = fh.read(2)
    read_header = npy_format.read_array_header_1_0 if major == 1 else npy_format.read_array_header_2_0
    shape, fortran, dtype = read_header(fh)
    need = math.prod(shape) * dtype.itemsize
    if need > size and not dtype.hasobject:
        raise ValueError(
            f"entry {name!r} claims shape {shape} of {dtype} ({need:,} bytes) but holds {size:,}"
        )
    return shape, fortran, dtype, need


def _read_npy_entry(fh: Any, size: int, name: str, budget: int) -> Any:
    """The array of one archive entry, read from its .npy header: refused when the header asks
    for more bytes than the entry declares or than ``budget`` allows, before anything is
    allocated; then exactly that many bytes are inflated, in chunks."""
    import numpy as np

    if fh.read(6) != _NPY_MAGIC:
        raise ValueError(f"entry {name!r} is not a .npy array")
    shape, fortran, dtype, need = _npy_header(fh, size, name)
    if dtype.hasobject:
        raise ValueError(f"entry {name!r} holds Python objects ({dtype}): never unpickled")
    if need > budget:
        raise ValueError(
            f"entry {name!r} of {need:,} bytes is over what the cap leaves ({budget:,} bytes): refused "
            "(raise the cap with --max-bytes if the file is trusted)"
        )
    arr = np.empty(shape[::-1] if fortran else shape, dtype)
    raw = arr.reshape(-1).view(np.uint8)  # (a view: the bytes land in the array)
    done = 0
    while done < need:
        chunk = fh.read(min(_READ_CHUNK, need - done))
        if not chunk:
            raise ValueError(f"entry {name!r} is truncated: {done:,} of {need:,} bytes")
        raw[done : done + len(chunk)] = np.frombuffer(chunk, np.uint8)
        done += len(chunk)
    while fh.read(_READ_CHUNK):  # on to the member's end, where zipfile checks its CRC (the size is capped)
        pass
    return arr.T if fortran else arr


#: the deepest nesting of dicts, lists and tuples a torch file's tensors are collected from (an
#: optimizer's state dict nests four deep; a crafted file nests a million deep)
MAX_TORCH_DEPTH = 100


def _tensors(obj: Any, path: str) -> list[tuple[str, Any]]:
    """The floating-point tensors of a (nested) state dict, list or tensor, by dotted name, in
    order; walked with a stack of its own, at most :data:`MAX_TORCH_DEPTH` containers deep."""
    found: list[tuple[str, Any]] = []
    stack: list[tuple[str, Any, int]] = [("", obj, 0)]
    while stack:
        prefix, item, depth = stack.pop()
        if hasattr(item, "is_floating_point") and hasattr(item, "detach"):
            if item.is_floating_point():
                found.append((prefix or "tensor", item))
            continue
        if isinstance(item, dict):
            children = [(str(k), v) for k, v in item.items()]
        elif isinstance(item, (list, tuple)):
            children = [(str(i), v) for i, v in enumerate(item)]
        else:
            continue
        if depth >= MAX_TORCH_DEPTH and children:
            raise ValueError(
                f"{_name(path)} nests containers more than {MAX_TORCH_DEPTH} deep (at {prefix[:80]!r}): "
                "expected a tensor, or a state dict or list of them"
            )
        for key, child in reversed(children):  # (reversed: the stack pops them in order)
            stack.append((f"{prefix}.{key}" if prefix else key, child, depth + 1))
    return found


def _extent(sizes: Sequence[int], strides: Sequence[int]) -> int | None:
    """How many elements a view spans from its first (the largest offset + 1), or None when its
    elements may share memory (an expanded view: a stride of 0, or a stride within the span of
    the dimensions below it)."""
    span = 0  # the largest offset reached by the dimensions taken so far
    for size, stride in sorted(
        ((n, abs(st)) for n, st in zip(sizes, strides, strict=True) if n > 1), key=lambda d: d[1]
    ):
        if stride <= span:
            return None
        span += (size - 1) * stride
    return span + 1


def _distinct_views(path: str, found: list[tuple[str, Any]]) -> dict[str, Any]:
    """The tensors of ``found`` with each stored value counted once: one tensor given under
    several names is kept once (under its first name, with how many more it has); views whose
    values share memory otherwise (an expanded view, two overlapping slices) are refused."""
    first: dict[tuple[Any, ...], int] = {}
    names: list[list[str]] = []
    views: list[Any] = []
    spans: dict[int, list[tuple[int, int, str]]] = {}
    for name, t in found:
        if str(getattr(t, "layout", "torch.strided")) != "torch.strided":
            raise ValueError(
                f"{_name(path)}: tensor {name[:80]!r} is {str(t.layout).removeprefix('torch.')}, not "
                "dense: expected dense tensors (save t.to_dense())"
            )
        if t.numel() == 0:
            key: tuple[Any, ...] = ("empty", len(views))
        else:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            key = (ptr, t.dtype, t.storage_offset(), tuple(t.shape), tuple(t.stride()))
        if key in first:
            names[first[key]].append(name)
            continue
        first[key] = len(views)
        names.append([name])
        views.append(t)
        if t.numel() == 0:
            continue
        extent = _extent(tuple(t.shape), tuple(t.stride()))
        if extent is None:
            raise ValueError(
                f"{_name(path)}: tensor {name[:80]!r} ({t.numel():,} values) refers to some stored "
                "values more than once (an expanded or overlapping view): expected tensors whose "
                "values are each stored once (save t.contiguous() instead)"
            )
        size = t.element_size()
        start = t.storage_offset() * size
        spans.setdefault(ptr, []).append((start, start + extent * size, name))
    for ranges in spans.values():
        ranges.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(ranges):
            if start < end:
                raise ValueError(
                    f"{_name(path)}: tensors {a[:80]!r} and {b[:80]!r} share stored values (views "
                    "of one storage that overlap): expected tensors whose values are each stored once"
                )
    out: dict[str, Any] = {}
    for group, t in zip(names, views, strict=True):
        more = len(group) - 1
        label = group[0] if not more else f"{group[0]} (and {more:,} more name{'s' * (more > 1)})"
        out[label] = t
    return out


def _check_torch_archive(path: str, max_bytes: int) -> None:
    """A zip-format torch file's members may declare at most ``max_bytes`` in all (torch inflates
    a compressed member): checked from the zip's directory before anything is loaded."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            declared = sum(info.file_size for info in zf.infolist())
    except Exception as e:  # zipfile raises several kinds for a damaged directory
        raise ValueError(f"cannot read {_name(path)} as a torch file: {e}") from None
    if declared > max_bytes:
        raise _over_cap(path, declared, max_bytes, "its members' declared sizes")


def read_torch(path: str, *, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """The floating-point tensors of the torch file at ``path`` (a tensor, or a nested state dict
    or list of them), by dotted name. It is read with ``weights_only=True``: nothing is
    unpickled but tensors and plain containers. One ValueError naming the file otherwise (torch
    missing, a damaged or foreign file, no floating-point tensors, containers nested more than
    :data:`MAX_TORCH_DEPTH` deep).

    Every stored value is given once: a tensor under several names (tied weights, a list of one
    tensor a million times) is one entry, named ``"first (and N more names)"``; views that share
    stored values otherwise (an expanded tensor, overlapping slices) are refused. The file's
    members may declare at most ``max_bytes``, and the tensors' values may fill at most
    ``max_bytes``: both checked before the tensors are handed on.

    >>> read_torch("/nonexistent/grads.pt")
    Traceback (most recent call last):
    ...
    ValueError: no such file: '/nonexistent/grads.pt' (expected a torch .pt file)
    """
    head = first_bytes(path, "a torch .pt file")
    try:
        import torch
    except ImportError:
        raise ValueError(
            f"reading {path!r} needs torch: pip install torch (or save the gradients as .npz)"
        ) from None
    if head.startswith(_ZIP_MAGIC):
        _check_torch_archive(path, max_bytes)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds for a file that is not a state file
        raise ValueError(f"cannot read {path!r} as a torch file: {e}") from None
    found = _distinct_views(path, _tensors(obj, path))
    if not found:
        raise ValueError(
            f"{path!r} holds no floating-point tensors: expected a tensor or a state dict of them"
        )
    total = sum(t.numel() * t.element_size() for t in found.values())
    if total > max_bytes:
        raise _over_cap(path, total, max_bytes, "the values of its tensors")
    return found
