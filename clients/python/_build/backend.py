"""A PEP 517 build backend in the standard library alone.

The client has no dependencies, and installing it must not need a package
index either (`pip install ./clients/python` on a machine with no index
reachable): setuptools would have pip fetch setuptools and wheel into an
isolated build environment first. A pure-Python package needs no more than
a zip with the right names in it, which is what this writes.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "baton_client"
DIST = "baton-client"
VERSION = "0.1.0"
PACKAGE = "baton"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

METADATA = f"""Metadata-Version: 2.1
Name: {DIST}
Version: {VERSION}
Summary: Python client for Baton, the named-lock server where the TCP connection is the claim
Requires-Python: >=3.9
License: Apache-2.0
Description-Content-Type: text/markdown

"""


def _files():
    base = os.path.join(ROOT, PACKAGE)
    for name in sorted(os.listdir(base)):
        if name.endswith(".py") or name == "py.typed":
            yield f"{PACKAGE}/{name}", os.path.join(base, name)


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def _record_line(arc: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _dist_info(directory: str) -> str:
    di = f"{NAME}-{VERSION}.dist-info"
    os.makedirs(os.path.join(directory, di), exist_ok=True)
    with open(os.path.join(directory, di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(METADATA + _readme())
    return di


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _dist_info(metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _dist_info(metadata_directory)


def _wheel(wheel_directory: str, entries) -> str:
    di = f"{NAME}-{VERSION}.dist-info"
    filename = f"{NAME}-{VERSION}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc: str, data: bytes) -> None:
            z.writestr(zipfile.ZipInfo(arc, date_time=(2000, 1, 1, 0, 0, 0)), data)
            records.append(_record_line(arc, data))

        for arc, data in entries:
            add(arc, data)
        add(f"{di}/METADATA", (METADATA + _readme()).encode())
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
    return _wheel(wheel_directory, [(f"{NAME}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py"] + [a for a, _ in _files()]:
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = (METADATA + _readme()).encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return filename
