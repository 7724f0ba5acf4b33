"""What an install gives every interpreter of the environment: the start-up hook, at its cost,
and environment variables that are checked rather than misread.

These run fresh interpreters, as a user's scripts would, against the installed package.
"""

import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest


def run_python(*args, env=None, timeout=120, drop=()):
    environment = {**os.environ, **(env or {})}
    if "ARROW_GPU_SIMULATOR" in (env or {}) and "CUDA_VISIBLE_DEVICES" not in env:
        drop = (*drop, "CUDA_VISIBLE_DEVICES")  # the simulated devices, all of them
    for name in drop:
        environment.pop(name, None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env=environment, timeout=timeout)


def test_the_install_serves_pyarrow_cuda_with_no_other_import():
    # The first line of every pyarrow.cuda example, in a script that never names arrow_gpu.
    code = textwrap.dedent(
        """
        from pyarrow import cuda
        print(cuda.Context(0).buffer_from_data(b"served").to_pybytes().decode())
        """
    )
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "served"


def test_the_start_up_hook_imports_nothing():
    # -S: no site packages, so any module the hook pulled in would show up here.
    hook_dir = os.path.dirname(__import__("_arrow_gpu_hook").__file__)
    code = ("import sys; before = set(sys.modules); import _arrow_gpu_hook; "
            "print(sorted(set(sys.modules) - before))")
    result = run_python("-S", "-c", code, env={"PYTHONPATH": hook_dir})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['_arrow_gpu_hook']"


def hook_import_microseconds():
    """The hook's cumulative import time during a plain interpreter start, from its cached
    bytecode as an installed module's (PYTHONDONTWRITEBYTECODE would time its compilation
    at every start instead)."""
    result = run_python("-X", "importtime", "-c", "pass", drop=["PYTHONDONTWRITEBYTECODE"])
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s+_arrow_gpu_hook$", line)
        if match:
            return int(match.group(1))
    pytest.fail("arrow_gpu.pth did not import _arrow_gpu_hook at start-up:\n" + result.stderr)


def test_the_start_up_hook_costs_under_a_millisecond():
    # It runs in every interpreter of the environment; the best of three resists a busy
    # machine, after a start that may write the bytecode.
    hook_import_microseconds()
    assert min(hook_import_microseconds() for _ in range(3)) < 1000


ENVIRONMENT_ERRORS = [
    ({"ARROW_GPU_SIMULATOR": "maybe"},
     "ARROW_GPU_SIMULATOR='maybe' is not a switch: use 1, true, yes or on"),
    ({"ARROW_GPU_SIMULATOR": "1", "ARROW_GPU_SIMULATOR_MEMORY": "4Q"},
     "ARROW_GPU_SIMULATOR_MEMORY='4Q' is not a size: use a number of bytes"),
    ({"ARROW_GPU_SIMULATOR": "1", "ARROW_GPU_SIMULATOR_MEMORY": "99999999999T"},
     "ARROW_GPU_SIMULATOR_MEMORY='99999999999T' is not a size"),
    ({"ARROW_GPU_SIMULATOR": "1", "ARROW_GPU_SIMULATOR_PINNED_MEMORY": "lots"},
     "ARROW_GPU_SIMULATOR_PINNED_MEMORY='lots' is not a size"),
    ({"ARROW_GPU_SIMULATOR": "1", "ARROW_GPU_SIMULATOR_DEVICES": "-1"},
     "ARROW_GPU_SIMULATOR_DEVICES='-1' is not a count: use a whole number from 0 to 64"),
    ({"ARROW_GPU_SIMULATOR": "1", "ARROW_GPU_SIMULATOR_DEVICES": "two"},
     "ARROW_GPU_SIMULATOR_DEVICES='two' is not a count"),
]


@pytest.mark.parametrize(("env", "message"), ENVIRONMENT_ERRORS)
def test_a_bad_environment_variable_is_an_error_that_names_it(env, message):
    code = textwrap.dedent(
        """
        import pyarrow as pa, arrow_gpu
        try:
            arrow_gpu.Context(0)
        except pa.ArrowInvalid as error:
            print(error)
        """
    )
    result = run_python("-c", code, env=env)
    assert result.returncode == 0, result.stderr
    assert message in result.stdout


@pytest.mark.parametrize(("value", "expected"), [("4G", 4 << 30), ("512M", 512 << 20),
                                                 ("64kib", 64 << 10), ("1000", 1000)])
def test_simulator_memory_takes_sizes_with_units(value, expected):
    code = "import arrow_gpu; print(arrow_gpu.Context(0).memory_info()[1])"
    result = run_python("-c", code, env={"ARROW_GPU_SIMULATOR": "1",
                                         "ARROW_GPU_SIMULATOR_MEMORY": value})
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == expected


@pytest.mark.parametrize("value", ["TRUE", "on", "Yes"])
def test_simulator_switch_takes_the_usual_truthy_forms(value):
    code = "import arrow_gpu; print(arrow_gpu.using_simulator(), arrow_gpu.device_count())"
    result = run_python("-c", code, env={"ARROW_GPU_SIMULATOR": value,
                                         "ARROW_GPU_SIMULATOR_DEVICES": "3"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "3"]


@pytest.mark.parametrize(("visible", "seen"), [("2,0", "2 0"), ("1,x,0", "1"), ("3,3", "3"),
                                               ("", ""), ("9", ""), ("-1,0", "")])
def test_the_simulator_shows_the_devices_cuda_visible_devices_lists(visible, seen):
    # As the driver reads it: indices in order, the list cut at the first entry that names
    # no device (or one listed already).
    code = ("import arrow_gpu; from arrow_gpu._cuda import _describe_device; "
            "print(*[_describe_device(i)['name'].rsplit(' ', 1)[1] "
            "for i in range(arrow_gpu.device_count())])")
    result = run_python("-c", code, env={"ARROW_GPU_SIMULATOR": "1",
                                         "ARROW_GPU_SIMULATOR_DEVICES": "4",
                                         "CUDA_VISIBLE_DEVICES": visible})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == seen.split()


def test_the_suite_checks_run_without_arrow_gpu_is_truly_without_it():
    # scripts/pyarrow-suite-check's "without" run must not let the start-up hook serve
    # pyarrow.cuda (test_cffi imports it): there, pyarrow.cuda is missing, as in a plain
    # pip install of pyarrow, and the check notices if arrow_gpu got in anyway.
    import importlib.util
    from importlib.machinery import SourceFileLoader
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "pyarrow-suite-check"
    loader = SourceFileLoader("pyarrow_suite_check", str(script))
    check = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(check)
    code = ("import sys\n" + check.ABSENT + "status = 0\n"
            "try:\n    import pyarrow.cuda\nexcept ImportError:\n    print('absent')\n"
            "import pyarrow\n" + check.CHECK_ABSENT + "sys.exit(status)\n")
    result = run_python("-c", code)
    assert (result.returncode, result.stdout.strip()) == (0, "absent"), result.stderr
    leaked = run_python("-c", "import sys\nimport arrow_gpu\nstatus = 0\n" + check.CHECK_ABSENT
                        + "sys.exit(status)\n")
    assert leaked.returncode == check.LEAKED_IN


NUMBA_EXTRA_ADVICE = 'pip install "arrow_gpu[numba]"'


@pytest.mark.parametrize("blocked", [
    "numba",
    # Numba installed without numba-cuda: its own, older CUDA target has no numba.cuda.core.
    "numba.cuda.core",
])
def test_numba_interop_without_numba_cuda_says_what_to_install(blocked):
    # The package is made uninstalled by a finder that says so before any other is asked.
    code = textwrap.dedent(
        f"""
        import sys

        class NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name == {blocked!r} or name.startswith({blocked!r} + "."):
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

        sys.meta_path.insert(0, NotInstalled())
        try:
            import arrow_gpu.numba
        except ImportError as error:
            print(error)
        """
    )
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert "needs Numba's CUDA target, the numba-cuda package" in result.stdout
    assert NUMBA_EXTRA_ADVICE in result.stdout
    assert f"No module named '{blocked}'" in result.stdout


def test_numba_interop_with_a_numpy_numba_cuda_cannot_compile_with_says_what_to_install():
    # NumPy 2.5 removed np.row_stack, which numba-cuda 0.30 registers before compiling kernels.
    code = textwrap.dedent(
        """
        import numpy as np
        del np.row_stack
        try:
            import arrow_gpu.numba
        except ImportError as error:
            print(error)
        """
    )
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert "numba-cuda cannot compile kernels with NumPy" in result.stdout
    assert "row_stack" in result.stdout
    assert NUMBA_EXTRA_ADVICE in result.stdout


CHECK_THE_COMPILER = ("import sys; sys.path.insert(0, sys.argv[1]); import arrow_gpu_backend; "
                      "arrow_gpu_backend.require_cxx20_compiler(); print('C++20 compiler found')")
# What GCC 9 says: it knows C++20 only as -std=c++2a.
OLD_COMPILER = """#!/bin/sh
echo "g++: error: unrecognized command-line option '-std=c++20'" >&2
exit 1
"""


def check_the_compiler(compiler=None):
    """The build backend's check, run before the build, with CC and CXX set to ``compiler``."""
    pytest.importorskip("setuptools")
    from pathlib import Path

    tools = Path(__file__).resolve().parent.parent / "tools"
    env = {"CC": compiler, "CXX": compiler} if compiler else None
    return run_python("-c", CHECK_THE_COMPILER, str(tools), env=env)


@pytest.mark.parametrize("kind", ["missing", "too old"])
def test_the_build_reports_a_compiler_without_cxx20_up_front_with_the_fix(kind, tmp_path):
    compiler = tmp_path / "g++"
    if kind == "too old":
        compiler.write_text(OLD_COMPILER)
        compiler.chmod(0o755)
    result = check_the_compiler(str(compiler))
    assert result.returncode == 1, result.stdout
    assert f"needs a C++20 compiler (GCC 10 or newer, or Clang 10 or newer), and '{compiler}'" \
        in result.stderr
    assert "apt-get install g++" in result.stderr
    assert "CXX=g++-12 CC=gcc-12" in result.stderr


def test_the_compiler_check_passes_the_compiler_that_builds_arrow_gpu():
    result = check_the_compiler()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "C++20 compiler found"


def run_with_core_built_against(version, tmp_path, *args):
    """Run Python with arrow_gpu's record of its build saying ``version``, as after pyarrow
    was switched to another major under an installed arrow_gpu."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys, types\n"
        "sys.modules['arrow_gpu._util.build_info'] = types.SimpleNamespace("
        f"PYARROW_VERSION={version!r}, PYARROW_MAJORS=({int(version.split('.')[0])},))\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return run_python(*args, env={"PYTHONPATH": path})


def test_python_m_arrow_gpu_reports_a_pyarrow_major_mismatch_in_one_line(tmp_path):
    import pyarrow as pa
    from arrow_gpu._util import compat as _compat

    result = run_with_core_built_against("1.0.0", tmp_path, "-m", "arrow_gpu")
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert (f"arrow_gpu was built against pyarrow 1.0.0 but pyarrow {pa.__version__} is installed"
            in result.stderr)
    assert _compat.rebuild_command() in result.stderr
    assert "-m pip install 'pyarrow==1.*'" in result.stderr


def test_the_rebuild_command_brings_its_build_tools_and_builds_against_the_installed_pyarrow(
        monkeypatch, tmp_path):
    # Build isolation would build against the newest pyarrow, so the command builds without
    # it; a fresh environment has no Cython, so the command installs the build tools first.
    import importlib.metadata

    from arrow_gpu._util import compat as _compat

    pip = f"{shlex.quote(sys.executable)} -m pip"
    build_tools = f"{pip} install cython 'setuptools>=77' && "
    checkout = tmp_path / "checkout"
    (checkout / "arrow_gpu").mkdir(parents=True)
    (checkout / "setup.py").touch()
    monkeypatch.setattr(_compat, "__file__", str(checkout / "arrow_gpu" / "_util" / "compat.py"))
    assert _compat.rebuild_command() == (
        f"{build_tools}{pip} install --no-build-isolation -e {checkout}")
    # Installed from a wheel: from source, never from a wheel built against another pyarrow.
    installed = tmp_path / "site-packages" / "arrow_gpu"
    installed.mkdir(parents=True)
    monkeypatch.setattr(_compat, "__file__", str(installed / "_util" / "compat.py"))
    version = importlib.metadata.version("arrow_gpu")
    assert _compat.rebuild_command() == (
        f"{build_tools}{pip} install --no-build-isolation --no-cache-dir --force-reinstall "
        f"--no-deps --no-binary arrow_gpu arrow_gpu=={version}")
