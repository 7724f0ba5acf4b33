"""The build backend: setuptools', plus the start-up hook in every wheel it builds.

``arrow_gpu.pth`` (one line, ``import _arrow_gpu_hook``) makes ``import pyarrow.cuda`` work
in any interpreter of the environment without importing arrow_gpu first. setuptools cannot
place a file at the root of site-packages, and its editable wheels carry only its own path
finder, so the file is added here to regular and editable wheels alike.
"""

import base64
import hashlib
import os
import zipfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every other hook as setuptools has it

HOOK_FILE = "arrow_gpu.pth"
HOOK_LINE = b"import _arrow_gpu_hook\n"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    add_start_up_hook(os.path.join(wheel_directory, name))
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_start_up_hook(os.path.join(wheel_directory, name))
    return name


def add_start_up_hook(wheel_path: str) -> None:
    """Rewrite the wheel with ``arrow_gpu.pth`` at its root, listed in its RECORD."""
    with zipfile.ZipFile(wheel_path) as wheel:
        entries = [(info, wheel.read(info)) for info in wheel.infolist()]
    digest = base64.urlsafe_b64encode(hashlib.sha256(HOOK_LINE).digest()).rstrip(b"=").decode()
    record_line = f"{HOOK_FILE},sha256={digest},{len(HOOK_LINE)}\n".encode()
    with zipfile.ZipFile(wheel_path, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr(HOOK_FILE, HOOK_LINE)
        for info, data in entries:
            if info.filename.endswith(".dist-info/RECORD"):
                data = record_line + data
            wheel.writestr(info, data)
