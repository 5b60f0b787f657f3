"""A PEP 517 build backend in the standard library alone.

The client has no dependencies, and installing it must not need a package
index either (`pip install ./clients/python` on a machine with no index
reachable): setuptools would have pip fetch setuptools and wheel into an
isolated build environment first. A pure-Python package needs no more than
a zip with the right names in it, which is what this writes.

Every field of the metadata comes from pyproject.toml's [project] table,
read with tomllib (Python 3.11 and later; before that, the backend asks the
installer for tomli), so the version and the metadata have one source.
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
from typing import Any, Dict, Iterator, List, Tuple

PACKAGE = "baton"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _requires() -> List[str]:
    return [] if sys.version_info >= (3, 11) else ["tomli>=1.1"]


def project() -> Dict[str, Any]:
    """pyproject.toml's [project] table."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


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


def get_requires_for_build_wheel(config_settings=None):
    return _requires()


def get_requires_for_build_sdist(config_settings=None):
    return _requires()


def get_requires_for_build_editable(config_settings=None):
    return _requires()


def _dist_info(directory: str) -> str:
    p = project()
    di = f"{_dist_name(p)}-{p['version']}.dist-info"
    os.makedirs(os.path.join(directory, di), exist_ok=True)
    with open(os.path.join(directory, di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(metadata(p))
    return di


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _dist_info(metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _dist_info(metadata_directory)


def _wheel(wheel_directory: str, entries) -> str:
    p = project()
    base = f"{_dist_name(p)}-{p['version']}"
    di = f"{base}.dist-info"
    filename = f"{base}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc: str, data: bytes) -> None:
            z.writestr(zipfile.ZipInfo(arc, date_time=(2000, 1, 1, 0, 0, 0)), data)
            records.append(_record_line(arc, data))

        for arc, data in entries:
            add(arc, data)
        add(f"{di}/METADATA", metadata(p).encode())
        add(f"{di}/WHEEL", b"Wheel-Version: 1.0\nGenerator: baton-build\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        records.append(f"{di}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{di}/RECORD", date_time=(2000, 1, 1, 0, 0, 0)), "\n".join(records) + "\n")
    return filename


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for arc, path in _files():
        with open(path, "rb") as f:
            entries.append((arc, f.read()))
    return _wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(f"{_dist_name(project())}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = project()
    base = f"{_dist_name(p)}-{p['version']}"
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as t:
        for rel in ["pyproject.toml", p.get("readme", "README.md"), "_build/backend.py"] + [a for a, _ in _files()]:
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = metadata(p).encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return filename
