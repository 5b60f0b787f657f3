"""A PEP 517 build backend in the standard library alone.

The client has no dependencies, and installing it must not need a package
index either (`pip install ./clients/python` on a machine with no index
reachable): setuptools would have pip fetch setuptools and wheel into an
isolated build environment first. A pure-Python package needs no more than
a zip with the right names in it, which is what this writes.

Every field of the metadata comes from pyproject.toml's [project] table,
so the version and the metadata have one source. Python 3.11 and later
read it with tomllib; before that (3.9, 3.10) the backend reads it with
read_toml below, which knows the part of TOML that the file uses (tables,
strings, arrays and inline tables of them), so no Python version needs
anything from a package index to install the client. A test checks that
both readers give the same [project].
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import sys
import tarfile
import zipfile
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

if sys.version_info >= (3, 11):
    import tomllib

PACKAGE = "baton"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# What PEP 517's hooks take: the front end's settings, never read here.
ConfigSettings = Optional[Dict[str, Any]]


def _requires() -> List[str]:
    return []


def project() -> Dict[str, Any]:
    """pyproject.toml's [project] table."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = f.read()
    if sys.version_info >= (3, 11):
        return tomllib.loads(data.decode("utf-8"))["project"]
    return read_toml(data.decode("utf-8"))["project"]


_KEY = re.compile(r'\s*([A-Za-z0-9_-]+|"[^"]*")\s*=\s*')
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def read_toml(text: str) -> Dict[str, Any]:
    """The part of TOML that pyproject.toml uses: [table] and [a.b]
    headers, key = value lines, basic strings, arrays and inline tables of
    them (over several lines), comments. Anything else is refused."""
    root: Dict[str, Any] = {}
    table = root
    pos = 0
    while pos < len(text):
        line_end = text.find("\n", pos)
        line = text[pos:] if line_end < 0 else text[pos:line_end]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            pos = len(text) if line_end < 0 else line_end + 1
            continue
        if stripped.startswith("["):
            table = root
            for part in stripped.strip("[]").split("."):
                table = table.setdefault(part.strip().strip('"'), {})
            pos = len(text) if line_end < 0 else line_end + 1
            continue
        m = _KEY.match(text, pos)
        if m is None:
            raise ValueError(f"pyproject.toml: cannot read {stripped!r}")
        value, pos = _value(text, m.end())
        table[m.group(1).strip('"')] = value
        rest_end = text.find("\n", pos)
        rest = (text[pos:] if rest_end < 0 else text[pos:rest_end]).strip()
        if rest and not rest.startswith("#"):
            raise ValueError(f"pyproject.toml: unexpected {rest!r} after {m.group(1)}")
        pos = len(text) if rest_end < 0 else rest_end + 1
    return root


def _skip(text: str, pos: int) -> int:
    """Skips blanks, newlines and comments."""
    while pos < len(text):
        if text[pos] in " \t\r\n":
            pos += 1
        elif text[pos] == "#":
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end
        else:
            break
    return pos


def _value(text: str, pos: int) -> Tuple[Any, int]:
    pos = _skip(text, pos)
    if text.startswith('"', pos):
        m = _STRING.match(text, pos)
        if m is None:
            raise ValueError("pyproject.toml: unterminated string")
        return m.group(1).encode("latin-1", "backslashreplace").decode("unicode_escape"), m.end()
    if text.startswith("[", pos):
        items: List[Any] = []
        pos = _skip(text, pos + 1)
        while not text.startswith("]", pos):
            item, pos = _value(text, pos)
            items.append(item)
            pos = _skip(text, pos)
            if text.startswith(",", pos):
                pos = _skip(text, pos + 1)
        return items, pos + 1
    if text.startswith("{", pos):
        inline: Dict[str, Any] = {}
        pos = _skip(text, pos + 1)
        while not text.startswith("}", pos):
            m = _KEY.match(text, pos)
            if m is None:
                raise ValueError("pyproject.toml: bad inline table")
            inline[m.group(1).strip('"')], pos = _value(text, m.end())
            pos = _skip(text, pos)
            if text.startswith(",", pos):
                pos = _skip(text, pos + 1)
        return inline, pos + 1
    for word, v in (("true", True), ("false", False)):
        if text.startswith(word, pos):
            return v, pos + len(word)
    raise ValueError(f"pyproject.toml: unsupported value at {text[pos:pos + 20]!r}")


def _dist_name(p: Dict[str, Any]) -> str:
    """The name as file names spell it (PEP 427, PEP 503)."""
    return re.sub(r"[-_.]+", "_", p["name"]).lower()


def metadata(p: Dict[str, Any]) -> str:
    """The core metadata (METADATA, PKG-INFO) of [project]: headers, then
    the README as the long description."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p['description']}",
    ]
    if "keywords" in p:
        lines.append(f"Keywords: {','.join(p['keywords'])}")
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    lic = p.get("license", {})
    if "text" in lic:
        lines.append(f"License: {lic['text']}")
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    lines += [f"Project-URL: {label}, {url}" for label, url in p.get("urls", {}).items()]
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    readme = p.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown" if readme.endswith(".md") else "Description-Content-Type: text/plain")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _files() -> Iterator[Tuple[str, str]]:
    base = os.path.join(ROOT, PACKAGE)
    for name in sorted(os.listdir(base)):
        if name.endswith(".py") or name == "py.typed":
            yield f"{PACKAGE}/{name}", os.path.join(base, name)
    # The fencing kits' resource-side files, which baton.fence loads.
    scripts = os.path.join(base, "fence_scripts")
    for name in sorted(os.listdir(scripts)):
        if name.endswith((".sql", ".lua")):
            yield f"{PACKAGE}/fence_scripts/{name}", os.path.join(scripts, name)


def _record_line(arc: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> List[str]:
    return _requires()


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> List[str]:
    return _requires()


def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> List[str]:
    return _requires()


def _dist_info(directory: str) -> str:
    p = project()
    di = f"{_dist_name(p)}-{p['version']}.dist-info"
    os.makedirs(os.path.join(directory, di), exist_ok=True)
    with open(os.path.join(directory, di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(metadata(p))
    return di


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    return _dist_info(metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    return _dist_info(metadata_directory)


def _wheel(wheel_directory: str, entries: Iterable[Tuple[str, bytes]]) -> str:
    p = project()
    base = f"{_dist_name(p)}-{p['version']}"
    di = f"{base}.dist-info"
    filename = f"{base}-py3-none-any.whl"
    records: List[str] = []
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc: str, data: bytes) -> None:
            z.writestr(zipfile.ZipInfo(arc, date_time=(2000, 1, 1, 0, 0, 0)), data)
            records.append(_record_line(arc, data))

        for arc, data in entries:
            add(arc, data)
        add(f"{di}/METADATA", metadata(p).encode())
        with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
            add(f"{di}/LICENSE", f.read())
        add(f"{di}/WHEEL", b"Wheel-Version: 1.0\nGenerator: baton-build\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        records.append(f"{di}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{di}/RECORD", date_time=(2000, 1, 1, 0, 0, 0)), "\n".join(records) + "\n")
    return filename


def build_wheel(wheel_directory: str, config_settings: ConfigSettings = None, metadata_directory: Optional[str] = None) -> str:
    entries: List[Tuple[str, bytes]] = []
    for arc, path in _files():
        with open(path, "rb") as f:
            entries.append((arc, f.read()))
    return _wheel(wheel_directory, entries)


def build_editable(wheel_directory: str, config_settings: ConfigSettings = None, metadata_directory: Optional[str] = None) -> str:
    return _wheel(wheel_directory, [(f"{_dist_name(project())}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    p = project()
    base = f"{_dist_name(p)}-{p['version']}"
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as t:
        for rel in ["pyproject.toml", p.get("readme", "README.md"), "LICENSE", "_build/backend.py"] + [a for a, _ in _files()]:
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = metadata(p).encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return filename
