"""Read a GGUF file's header without loading its weights.

`gguf.GGUFReader` parses every array (including 150k merges) into numpy objects and takes over
20 s on a Qwen2.5 file; this reader walks the header with `struct` on an mmap, skips what it does
not need, and checks that the tensor data the header promises is really in the file (a
truncated download is caught before llama.cpp is asked to load it).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from specchat.errors import ModelFileError

_MAGIC = b"GGUF"
_SCALARS: dict[int, str] = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}
_STRING, _ARRAY = 8, 9
_KEEP_ARRAYS = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"}


@dataclass
class GGUFInfo:
    """What a GGUF header says: metadata scalars, the token list, and where the data ends."""

    path: Path
    file_size: int
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)
    token_types: list[int] = field(default_factory=list)
    n_tensors: int = 0
    data_end: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.get("general.architecture", "unknown"))

    @property
    def quantization(self) -> str:
        ftype = self.get("general.file_type")
        if ftype is None:
            return "unknown"
        try:
            from gguf import LlamaFileType

            return LlamaFileType(ftype).name.removeprefix("MOSTLY_")
        except ValueError:
            return f"type {ftype}"


_U64 = struct.Struct("<Q")


class _Cursor:
    def __init__(self, buf: mmap.mmap | bytes) -> None:
        self.buf = buf
        self.pos = 0

    def unpack(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self, decode: bool = True) -> str:
        """One string, or "" stepped over where not `decode`."""
        out = self.strings(1, decode)
        return out[0] if out else ""

    def strings(self, n: int, keep: bool) -> list[str] | None:
        """`n` strings in a row: decoded if `keep`, else only stepped over (a Qwen2.5 header
        holds 150k merges; one call for all of them keeps the walk to milliseconds)."""
        buf, pos, size_at = self.buf, self.pos, _U64.unpack_from
        out: list[str] = []
        for _ in range(n):
            size = size_at(buf, pos)[0]
            pos += 8
            if keep:
                raw = buf[pos : pos + size]
                if len(raw) != size:
                    raise struct.error("string runs past the end of the file")
                out.append(raw.decode("utf-8", "replace"))
            pos += size
        if pos > len(buf):
            raise struct.error("string runs past the end of the file")
        self.pos = pos
        return out if keep else None

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.unpack("<I")
            n = self.unpack("<Q")
            if etype in _SCALARS:
                fmt = _SCALARS[etype]
                size = struct.calcsize(fmt)
                if not keep:
                    self.pos += size * n
                    return None
                values = list(struct.unpack_from(f"<{n}{fmt[1]}", self.buf, self.pos))
                self.pos += size * n
                return values
            if etype == _STRING:
                return self.strings(n, keep)
            values = [self.value(etype, keep) for _ in range(n)]
            return values if keep else None
        raise ValueError(f"unknown GGUF value type {vtype}")


def read_gguf(path: str | Path) -> GGUFInfo:
    """Parse the header of `path`; raise ModelFileError if it is missing, not a GGUF, or cut short."""
    path = Path(path)
    try:
        if not path.exists():
            raise ModelFileError(f"model file not found: {path}")
        if not path.is_file():
            raise ModelFileError(f"not a file: {path}")
        size = path.stat().st_size
        with path.open("rb") as fh:
            if fh.read(4) != _MAGIC:
                raise ModelFileError(f"not a GGUF file (no GGUF magic at the start): {path}")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(path, size, buf)
    except (struct.error, ValueError, IndexError, KeyError, TypeError, ArithmeticError,
            RecursionError) as exc:
        reason = " ".join(str(exc).split())
        raise ModelFileError(f"GGUF file is truncated or corrupt: {path} ({reason})") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None


def _parse(path: Path, size: int, buf: mmap.mmap) -> GGUFInfo:
    cur = _Cursor(buf)
    cur.pos = 4
    version = cur.unpack("<I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    n_tensors = cur.unpack("<Q")
    n_kv = cur.unpack("<Q")
    info = GGUFInfo(path=path, file_size=size, version=version, n_tensors=n_tensors)
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.unpack("<I")
        value = cur.value(vtype, keep=key in _KEEP_ARRAYS)
        if key == "tokenizer.ggml.tokens":
            info.tokens = value
        elif key == "tokenizer.ggml.token_type":
            info.token_types = value
        elif value is not None:
            info.metadata[key] = value
    alignment = int(info.metadata.get("general.alignment", 32))
    data_needed = 0
    for _ in range(n_tensors):
        cur.string(decode=False)
        n_dims = cur.unpack("<I")
        n_elems = 1
        for _ in range(n_dims):
            n_elems *= cur.unpack("<Q")
        ggml_type = cur.unpack("<I")
        offset = cur.unpack("<Q")
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        data_needed = max(data_needed, offset + n_elems // block * type_size)
    data_start = -(-cur.pos // alignment) * alignment
    info.data_end = data_start + data_needed
    if info.data_end > size:
        raise ValueError(f"header promises {info.data_end} bytes, file has {size}")
    return info


NEEDS_KEY = "specchat.needs"
"""A GGUF key naming what a file needs of specchat's own llama.cpp (`specchat models optimize`
writes it): llama.cpp's own tools and a stock llama-server cannot load such a file."""
NEEDS_HOT = "patches/llama.cpp/0003 (its output_hot tensor)"
HOT_TENSOR = "output_hot.weight"
"""A draft's hot-vocabulary output (optimize/hot_vocab.py), which only that patch loads."""


def needs_specchat_llama(path: Path) -> str:
    """What `path` needs of specchat's patched llama.cpp ("" for a file any llama.cpp loads):
    the key a file made by `specchat models optimize` carries, or for one made before the key,
    its output_hot tensor."""
    import gguf

    reader = gguf.GGUFReader(path)
    field = reader.fields.get(NEEDS_KEY)
    if field is not None:
        return str(field.contents())
    return NEEDS_HOT if any(t.name == HOT_TENSOR for t in reader.tensors) else ""


def copy_gguf(reader: Any, out: Path, tensors: Sequence[tuple[str, Any, Any]],
              values: Mapping[str, Any] | None = None) -> None:
    """Write a GGUF file with `reader`'s metadata (`values` in place of the keys they name, and
    added where the reader has no such key) and `tensors`, each (name, its data as the reader
    holds it, its GGML type)."""
    import gguf

    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    writer = gguf.GGUFWriter(out, arch=arch, endianess=reader.endianess)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        sub_type = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        value = (values or {}).get(f.name, f.contents())
        writer.add_key_value(f.name, value, f.types[0], sub_type=sub_type)
    for name, value in (values or {}).items():
        if name not in reader.fields:
            writer.add_string(name, str(value))
    for name, data, ggml_type in tensors:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, ggml_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in tensors:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()
