"""A bounded reader of the GGUF v2/v3 layout, for ``pyrope.gguf``.

Every count in the file (key/value pairs, tensors, string lengths, array
entries, dimensions) is checked against the bytes that remain in the file
before anything is read or built from it, so the work and the memory a file
can ask for are bounded by its real size. ``gguf.GGUFReader`` trusts those
counts (a 49-byte file claiming a 2**62-entry array kept it looping with
memory growing ~40 MB/s) and builds a numpy object per array entry (~650
bytes and ~9 us each), which is why pyrope does not parse with it.

The layout (llama.cpp's ``gguf_init_from_file_impl`` in ``ggml/src/gguf.cpp``,
gguf-py's ``GGUFReader``): magic ``GGUF``, version (uint32: 2 or 3; a version
whose low 16 bits are 0 is the other byte order), tensor count and key/value
count (uint64); each pair a string key, a uint32 value type and the value (a
string is a uint64 length and UTF-8 bytes; an array a uint32 item type, a
uint64 count and the items; arrays of arrays are refused, as llama.cpp does);
each tensor a string name, uint32 n_dims (at most 4), that many uint64 dims,
a uint32 ggml type and a uint64 offset into the data section, which starts at
the next multiple of ``general.alignment`` (uint32, a power of two, 32 when
absent) after the tensor infos.

Values are decoded when asked for (strings and arrays on first access), so a
tokenizer's hundreds of thousands of strings are walked once for their
lengths and never decoded. Every refusal is a ``pyrope.errors.ValueError``
naming the file and the key (or tensor, or header field).
"""

from __future__ import annotations

import builtins
import mmap
import os
import struct

import numpy as np

from ..errors import ValueError

__all__ = ["GGUFFile"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp refuses more

# value type code -> (name, struct code, size in bytes); 8 STRING and 9 ARRAY are not fixed-size
_SCALARS = {0: ("UINT8", "B", 1), 1: ("INT8", "b", 1), 2: ("UINT16", "H", 2), 3: ("INT16", "h", 2),
            4: ("UINT32", "I", 4), 5: ("INT32", "i", 4), 6: ("FLOAT32", "f", 4), 7: ("BOOL", "B", 1),
            10: ("UINT64", "Q", 8), 11: ("INT64", "q", 8), 12: ("FLOAT64", "d", 8)}
STRING, ARRAY, BOOL, UINT32 = 8, 9, 7, 4
_HEADER = 24                        # magic, version, two uint64 counts
_MIN_KV = 8 + 4 + 1                 # empty key, type, a one-byte value
_MIN_TENSOR = 8 + 4 + 4 + 8         # empty name, n_dims 0, type, offset
_MIN_ITEM = {STRING: 8}             # an array item's smallest size: an empty string is its length


class _Field:
    """Where a value lies: its type, and for arrays the item type and count."""
    __slots__ = ("type", "offset", "item_type", "count")

    def __init__(self, type_, offset, item_type=None, count=None):
        self.type, self.offset, self.item_type, self.count = type_, offset, item_type, count


class _Tensor:
    __slots__ = ("name", "dims", "ggml_type", "type_name", "start", "n_elements", "n_bytes")


class GGUFFile:
    """The metadata and tensor infos of one GGUF file, read within its size.

    ``fields``: key -> where its value lies (decode with :meth:`value`);
    ``tensors``: name -> dims, type and byte range; :meth:`floats` reads a
    float tensor. ``constants`` is the ``gguf`` package (the ggml type names
    and block sizes). Use as a context manager, or :meth:`close`.
    """

    def __init__(self, path, constants):
        self.path = path
        self._gguf = constants
        try:
            with open(path, "rb") as f:
                self.size = os.fstat(f.fileno()).st_size
                if self.size < _HEADER:
                    raise self._bad("the header", f"needs {_HEADER} bytes, the file has {self.size}")
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise ValueError(f"gguf: cannot read {path!r}: {exc}") from None
        try:
            self._scan()
        except BaseException:
            self.close()
            raise

    def close(self):
        mm, self._mm = getattr(self, "_mm", None), None
        if mm is not None:
            mm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- refusals

    def _bad(self, where, why):
        return ValueError(f"gguf: {self.path!r} is not a readable GGUF file: {where}: {why}")

    def _need(self, offset, n, where, what):
        """Refuse unless ``n`` bytes (``what``) start at ``offset`` within the file."""
        if n > self.size - offset:
            raise self._bad(where, f"{what} needs {n} bytes at byte {offset}, but the file has "
                                   f"{max(0, self.size - offset)} left (of {self.size})")

    # ---- primitives, each bounded by the file

    def _unpack(self, offset, code, size, where, what):
        self._need(offset, size, where, what)
        return struct.unpack_from(self._order + code, self._mm, offset)[0]

    def _string_bytes(self, offset, where, what):
        """``(bytes, next offset)`` of the string at ``offset``."""
        n = self._unpack(offset, "Q", 8, where, f"the length of {what}")
        self._need(offset + 8, n, where, f"{what} ({n} bytes)")
        return self._mm[offset + 8:offset + 8 + n], offset + 8 + n

    def _text(self, raw, where, what):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._bad(where, f"{what} is not UTF-8 ({exc.reason} at byte {exc.start} of {len(raw)}: "
                                   f"{raw[max(0, exc.start - 8):exc.start + 8]!r})") from None

    # ---- the layout

    def _scan(self):
        mm = self._mm
        if mm[:4] != MAGIC:
            raise self._bad("the header", f"the magic is {mm[:4]!r}, not {MAGIC!r}")
        self._order = "<"
        version = struct.unpack_from("<I", mm, 4)[0]
        if version & 0xFFFF == 0:   # written on a machine of the other byte order (GGUFReader's rule)
            self._order = ">"
            version = struct.unpack_from(">I", mm, 4)[0]
        if version not in VERSIONS:
            raise self._bad("the header", f"version {version}; GGUF versions {VERSIONS} are read "
                                          "(version 1 had 32-bit counts and is no longer written)")
        self.version = version
        n_tensors, n_kv = struct.unpack_from(self._order + "QQ", mm, 8)
        offset = _HEADER
        # counts checked against the smallest records they could describe
        if n_kv > (self.size - offset) // _MIN_KV:
            raise self._bad("the header", f"the key/value count {n_kv} needs at least {_MIN_KV} bytes each, "
                                          f"but the file has {self.size - offset} bytes left")
        if n_tensors > (self.size - offset - n_kv * _MIN_KV) // _MIN_TENSOR:
            raise self._bad("the header", f"the tensor count {n_tensors} needs at least {_MIN_TENSOR} bytes "
                                          f"each, but the file has {self.size - offset} bytes left")
        self.fields = {}
        for i in range(n_kv):
            offset = self._scan_field(i, offset)
        alignment = DEFAULT_ALIGNMENT
        field = self.fields.get("general.alignment")
        if field is not None:
            if field.type != UINT32:
                raise self._bad("key 'general.alignment'", f"must be a UINT32, got {self._type_name(field)}")
            alignment = self.value("general.alignment")
            if alignment == 0 or alignment & (alignment - 1):
                raise self._bad("key 'general.alignment'", f"must be a power of two, got {alignment}")
        infos, self._names = [], set()
        for i in range(n_tensors):
            info, offset = self._scan_tensor_info(i, offset)
            infos.append(info)
        data = offset + (-offset % alignment)
        self.tensors = {}
        for t, tensor_offset in infos:
            where = f"tensor {t.name!r}"
            t.start = data + tensor_offset
            self._need(t.start, t.n_bytes, where, f"its data ({t.n_elements} x {t.type_name})")
            self.tensors[t.name] = t

    def _type_name(self, field):
        name = _SCALARS[field.type][0] if field.type in _SCALARS else "STRING" if field.type == STRING else "ARRAY"
        if field.type == ARRAY:
            item = field.item_type
            name += " of " + (_SCALARS[item][0] if item in _SCALARS else "STRING")
        return name

    def _scan_field(self, i, offset):
        where = f"key/value pair {i}"
        raw, offset = self._string_bytes(offset, where, "the key")
        key = self._text(raw, where, f"the key {raw[:40]!r}")
        where = f"key {key!r}"
        if key in self.fields:
            raise self._bad(where, "given twice")
        type_ = self._unpack(offset, "I", 4, where, "the value type")
        offset += 4
        if type_ in _SCALARS:
            size = _SCALARS[type_][2]
            self._need(offset, size, where, f"its {_SCALARS[type_][0]} value")
            self.fields[key] = _Field(type_, offset)
            return offset + size
        if type_ == STRING:
            n = self._unpack(offset, "Q", 8, where, "the string's length")
            self._need(offset + 8, n, where, f"the string ({n} bytes)")
            self.fields[key] = _Field(type_, offset)
            return offset + 8 + n
        if type_ != ARRAY:
            raise self._bad(where, f"unknown value type {type_}")
        item = self._unpack(offset, "I", 4, where, "the array's item type")
        count = self._unpack(offset + 4, "Q", 8, where, "the array's count")
        offset += 12
        if item == ARRAY:
            raise self._bad(where, "an array of arrays (llama.cpp does not read nested arrays)")
        if item not in _SCALARS and item != STRING:
            raise self._bad(where, f"an array of unknown value type {item}")
        least = _SCALARS[item][2] if item in _SCALARS else _MIN_ITEM[STRING]
        if count > (self.size - offset) // least:
            raise self._bad(where, f"the array claims {count} entries of at least {least} byte"
                                   f"{'s' if least > 1 else ''}, but the file has {self.size - offset} bytes left")
        self.fields[key] = _Field(type_, offset, item, count)
        if item in _SCALARS:
            return offset + count * least
        for j in range(count):   # strings: each length within the file (bounded by the check above)
            n = self._unpack(offset, "Q", 8, where, f"the length of string {j}")
            self._need(offset + 8, n, where, f"string {j} ({n} bytes)")
            offset += 8 + n
        return offset

    def _scan_tensor_info(self, i, offset):
        where = f"tensor info {i}"
        raw, offset = self._string_bytes(offset, where, "the tensor name")
        name = self._text(raw, where, f"the tensor name {raw[:40]!r}")
        where = f"tensor {name!r}"
        if name in self._names:
            raise self._bad(where, "given twice")
        self._names.add(name)
        n_dims = self._unpack(offset, "I", 4, where, "the number of dimensions")
        offset += 4
        if n_dims > MAX_DIMS:
            raise self._bad(where, f"{n_dims} dimensions; ggml tensors have at most {MAX_DIMS}")
        self._need(offset, 8 * n_dims, where, f"{n_dims} dimensions")
        dims = struct.unpack_from(f"{self._order}{n_dims}Q", self._mm, offset)
        offset += 8 * n_dims
        n_elements = 1
        for d in dims:
            n_elements *= d
        if any(d > 2**63 - 1 for d in dims) or n_elements > 2**63 - 1:   # ggml counts in int64
            raise self._bad(where, f"dimensions {list(dims)} give {n_elements} elements, beyond int64")
        code = self._unpack(offset, "I", 4, where, "the ggml type")
        offset_data = self._unpack(offset + 4, "Q", 8, where, "the data offset")
        offset += 12
        gguf = self._gguf
        try:
            ggml_type = gguf.GGMLQuantizationType(code)
            block, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
        except (KeyError, builtins.ValueError):   # not a type this gguf package knows
            raise self._bad(where, f"unknown ggml type {code}") from None
        row = dims[0] if dims else 1
        if row % block:
            raise self._bad(where, f"{row} elements per row of {ggml_type.name}, not a multiple of its "
                                   f"block size {block}")
        t = _Tensor()
        t.name, t.dims, t.ggml_type, t.type_name = name, dims, ggml_type, ggml_type.name
        t.n_elements, t.n_bytes = n_elements, n_elements // block * type_size
        return (t, offset_data), offset

    # ---- values

    def value(self, key):
        """The decoded value of ``key``: int, float, bool, str, or a list of them."""
        field = self.fields[key]
        where = f"key {key!r}"
        if field.type in _SCALARS:
            name, code, size = _SCALARS[field.type]
            value = struct.unpack_from(self._order + code, self._mm, field.offset)[0]
            return self._bool(value, where) if field.type == BOOL else value
        if field.type == STRING:
            raw, _ = self._string_bytes(field.offset, where, "the string")
            return self._text(raw, where, "the string")
        if field.item_type == STRING:
            out, offset = [], field.offset
            for j in range(field.count):
                raw, offset = self._string_bytes(offset, where, f"string {j}")
                out.append(self._text(raw, where, f"string {j}"))
            return out
        name, code, size = _SCALARS[field.item_type]
        dtype = np.dtype(self._order + code)
        # from a bytes copy: a numpy view would pin the map (close() would fail while it lives)
        values = np.frombuffer(self._mm[field.offset:field.offset + field.count * size], dtype)
        if field.item_type == BOOL:
            if field.count and values.max() > 1:
                j = int(np.argmax(values > 1))
                raise self._bad(where, f"entry {j} of the BOOL array is the byte {int(values[j])}, not 0 or 1")
            return values.astype(bool).tolist()
        return values.tolist()

    def _bool(self, byte, where):
        if byte > 1:
            raise self._bad(where, f"a BOOL is the byte {byte}, not 0 or 1")
        return bool(byte)

    def is_array(self, key):
        return self.fields[key].type == ARRAY

    def floats(self, name):
        """Tensor ``name`` (F32, F16 or F64) as a flat float64 array (a copy)."""
        t = self.tensors[name]
        code = {"F32": "f4", "F16": "f2", "F64": "f8"}[t.type_name]
        data = np.frombuffer(self._mm[t.start:t.start + t.n_bytes], np.dtype(self._order + code))
        with np.errstate(invalid="ignore"):   # a signalling NaN: the caller refuses it, naming the tensor
            return data.astype(np.float64)
