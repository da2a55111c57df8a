"""How a sweep document is read, wherever it comes from (a sweep file, a store's sweep.yaml).

Reading follows what users of YAML 1.2 (and JSON) expect, not PyYAML's YAML 1.1: numbers
such as `1e-2`, `5e-4` and `-1e3` are floats (1.1 reads them as strings); a key given
twice in one mapping is an error (1.1 silently keeps the last one); the file must be
UTF-8 text. Other scalars (booleans, null, ints, timestamps) read as `yaml.safe_load`
reads them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 16 * 2**20  # a sweep file is a few lines; refuse to parse anything near memory-sized


class SweepError(ValueError):
    """A sweep file (or preset) is malformed; the message is one line with the fix."""


class _SweepLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` with YAML 1.2 floats: `1e-2`, `5E-4`, `-1e3`, `1.5e3`, `-.5`."""


class _FastSweepLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The same rules on libyaml's parser (ten times faster: `status STORAGE` reads a sweep.yaml per sweep);
    a document it cannot read is read again by `_SweepLoader`, whose error messages are the ones users see."""


# YAML 1.2 core floats that the 1.1 resolver misses (an exponent without a dot or without a
# sign, a signed leading dot); the 1.1 float forms still resolve as before. A dot or an
# exponent is required, so ints stay ints.
for _loader in (_SweepLoader, _FastSweepLoader):
    _loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"""^(?:[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+
                |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?)$""",
            re.X,
        ),
        list("-+0123456789."),
    )


def _duplicate_key(node: yaml.Node, path: str = "", visited: set[int] | None = None) -> tuple[str, int, int] | None:
    """The first key given twice in one mapping of the tree: (dotted key, line, first line).

    Each node is visited once, so aliases (`*grid`) cannot make the walk exponential.
    """
    visited = set() if visited is None else visited
    if id(node) in visited:
        return None
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "<complex key>"
            where = f"{path}.{key}" if path else key
            if isinstance(key_node, yaml.ScalarNode) and key != "<<":
                ident = (key_node.tag, key)
                if ident in seen:
                    return where, key_node.start_mark.line + 1, seen[ident]
                seen[ident] = key_node.start_mark.line + 1
            found = _duplicate_key(value_node, where, visited)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _duplicate_key(item, f"{path}[{i}]", visited)
            if found:
                return found
    return None


def read_yaml(path: Path) -> Any:
    """The sweep file as Python data; any problem is a one-line `SweepError`."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SweepError(f"{path}: {size:,} bytes is not a sweep file (the limit is {MAX_FILE_BYTES:,} bytes); give the YAML file")
        raw = path.read_bytes()
    except OSError as err:
        raise SweepError(f"{path}: cannot read it: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        utf16 = raw[:2] in (b"\xff\xfe", b"\xfe\xff")
        hint = "it looks like UTF-16; save it as UTF-8" if utf16 else "is it a binary file? save the sweep file as UTF-8 text"
        raise SweepError(f"{path}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); {hint}") from None
    return yaml_data(text, str(path))


def yaml_data(text: str, path: str) -> Any:
    """YAML text read by the sweep file's rules (YAML 1.2 floats, no duplicate keys); `path` names it
    in errors. Every reader of a sweep document (a file, a store's sweep.yaml) goes through here."""
    try:
        return _read_with(_FastSweepLoader, text, path)
    except (yaml.YAMLError, SweepError):
        return _read_with(_SweepLoader, text, path)  # again, for the message users see


def _read_with(kind: type, text: str, path: str) -> Any:
    """`text` read with the loader class `kind`; any problem is a one-line `SweepError`."""
    loader = None
    try:
        loader = kind(text)
        node = loader.get_single_node()
        found = _duplicate_key(node) if node is not None else None
        if found:
            key, line, first = found
            raise SweepError(
                f"{path}: {key}: duplicate key at line {line} (first at line {first}); "
                "YAML would keep only the last one, so merge them into one entry"
            )
        return loader.construct_document(node) if node is not None else None
    except RecursionError:
        raise SweepError(f"{path}: not valid YAML: nested too deeply for a sweep file") from None
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1
        raise SweepError(
            f"{path}: not valid YAML at line {line}: control character U+{err.character:04X} is not allowed "
            "(is it a binary file?); save the sweep file as UTF-8 text"
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise SweepError(f"{path}: not valid YAML{where}: {problem}") from None
    finally:
        if loader is not None:
            loader.dispose()
