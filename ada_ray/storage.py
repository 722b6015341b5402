"""Where files live and how they get there: a local folder or a storage URI, through pyarrow.fs.

A *location* is a string: a local path (``/shared/runs/r1``) or a URI that ``pyarrow.fs`` opens -
``s3://bucket/runs/r1``, ``gs://bucket/...``, ``hdfs://host:port/...``, ``file:///mnt/...`` (query
parameters such as ``?region=...&endpoint_override=...`` are pyarrow's). A path is written in place.
A URI is written by staging on this node's disk and copying up (``pyarrow.fs.copy_files``: ``writing``),
and read by copying down into a staging folder (``reading``). Staging folders live under the node-local
staging root (``trainer.staging_dir``; default ``<tmp>/ada_ray_staging``) and are removed after use.
Credentials are pyarrow's: the environment (``AWS_*``, ``GOOGLE_APPLICATION_CREDENTIALS``, ...) of the
process that opens the location, on its own node.

No Ray here: the driver and the learners (each on its own node) call these functions. Opening a
location that cannot be opened is one line naming the config field: :class:`ConfigError` for an
unknown scheme, :class:`StorageError` for a filesystem pyarrow cannot reach (no credentials, no
network, no HDFS client).
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import urlsplit, urlunsplit

import pyarrow.fs as pafs

from ada_ray.config import ConfigError
from ada_ray.errors import InputError

SCHEMES = "s3://, gs://, hdfs://, file:// or a local path"
RENAMING = ("local", "hdfs")  # pyarrow filesystems whose rename is atomic (type_name)


class StorageError(InputError, OSError):
    """A storage location that cannot be opened or written: no credentials, unreachable, no client."""


def is_uri(location) -> bool:
    return "://" in str(location)


def join(location, *parts: str) -> str:
    """`location`/part/...; for a URI the parts go into its path (a query string stays at the end)."""
    if not is_uri(location):
        return str(Path(location, *parts))
    u = urlsplit(str(location))
    return urlunsplit(u._replace(path="/".join([u.path.rstrip("/"), *parts])))


def why(exc: BaseException) -> str:
    """The first line of an error, for one-line messages."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


@functools.lru_cache(maxsize=256)
def _open(location: str) -> tuple[pafs.FileSystem, str]:
    if not is_uri(location):
        return pafs.LocalFileSystem(), str(Path(location).expanduser())
    return pafs.FileSystem.from_uri(location)


def open_location(location, field: str = "trainer.output_dir") -> tuple[pafs.FileSystem, str]:
    """(filesystem, path in it) for a path or URI; one clear line naming `field` when it cannot be opened."""
    try:
        return _open(str(location))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ImportError...
        if "Unrecognized filesystem type" in str(exc):
            scheme = urlsplit(str(location)).scheme
            raise ConfigError(f"{field}={location!r}: unknown storage scheme {scheme!r}; pyarrow.fs opens "
                              f"{SCHEMES}") from None
        raise StorageError(f"{field}={location!r}: cannot open this storage ({why(exc)})") from None


def is_file(location) -> bool:
    fs, path = open_location(location)
    return fs.get_file_info(path).type == pafs.FileType.File


def is_dir(location) -> bool:
    fs, path = open_location(location)
    return fs.get_file_info(path).type == pafs.FileType.Directory


def list_names(location) -> list[str]:
    """Names of the entries right under `location` (none when it does not exist)."""
    fs, path = open_location(location)
    return sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))


def read_text(location) -> str:
    fs, path = open_location(location)
    with fs.open_input_stream(path) as f:
        return f.read().decode()


def write_text(location, text: str) -> None:
    """Write a small file whole: a reader sees the old text or the new, never a torn one. On a local
    filesystem or HDFS it is written under a temporary name and renamed over the file; an object
    store (S3, GCS) publishes every object whole, so it is written directly."""
    fs, path = open_location(location)
    if fs.type_name not in RENAMING:
        with fs.open_output_stream(path) as f:
            f.write(text.encode())
        return
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    with fs.open_output_stream(tmp) as f:
        f.write(text.encode())
    fs.move(tmp, path)


def delete(location) -> None:
    """Remove a file or folder; one that is not there is fine."""
    fs, path = open_location(location)
    kind = fs.get_file_info(path).type
    if kind == pafs.FileType.Directory:
        fs.delete_dir(path)
    elif kind == pafs.FileType.File:
        fs.delete_file(path)


def move(source, destination) -> None:
    """Rename a folder or file within one filesystem (local folders; object stores cannot rename a folder)."""
    fs, src = open_location(source)
    fs.move(src, open_location(destination)[1])


def upload(local: Path, location) -> None:
    """Copy a local file or folder (recursively, merging into what is there) to `location`."""
    fs, path = open_location(location)
    fs.create_dir(path if Path(local).is_dir() else path.rsplit("/", 1)[0], recursive=True)
    pafs.copy_files(str(local), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)


def download(location, local: Path) -> None:
    """Copy the file or folder at `location` to the local path `local`."""
    fs, path = open_location(location)
    target = Path(local) if fs.get_file_info(path).type == pafs.FileType.Directory else Path(local).parent
    target.mkdir(parents=True, exist_ok=True)
    pafs.copy_files(path, str(local), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())


def staging_root(staging_dir: Optional[str] = None) -> Path:
    """This node's staging root: `trainer.staging_dir`, else <tmp>/ada_ray_staging."""
    root = Path(staging_dir).expanduser() if staging_dir else Path(tempfile.gettempdir()) / "ada_ray_staging"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def writing(location, staging_dir: Optional[str] = None) -> Iterator[Path]:
    """A local folder whose contents end up at `location`: the folder itself for a path; for a URI a
    fresh staging folder on this node, copied up when the block ends without an error, then removed."""
    if not is_uri(location):
        path = Path(location)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    local = Path(tempfile.mkdtemp(prefix="up-", dir=staging_root(staging_dir)))
    try:
        yield local
        upload(local, location)
    finally:
        shutil.rmtree(local, ignore_errors=True)


@contextlib.contextmanager
def reading(location, staging_dir: Optional[str] = None) -> Iterator[Path]:
    """A local folder holding what is at `location`: the folder itself for a path; for a URI a copy in a
    fresh staging folder on this node, removed when the block ends."""
    if not is_uri(location):
        yield Path(location)
        return
    local = Path(tempfile.mkdtemp(prefix="down-", dir=staging_root(staging_dir)))
    try:
        download(location, local)
        yield local
    finally:
        shutil.rmtree(local, ignore_errors=True)
