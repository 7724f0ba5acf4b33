"""The user guide's table of pyarrow's hazards on device data states what pyarrow does.

Every operation of tests/_pyarrow_hazards.py runs on device data in a child process (on the
simulator in CI, on the GPU in scripts/gpu-test); the outcome must be the one the guide's
table (docs/guide/hazards.md) gives for it, so the table cannot drift from pyarrow as pyarrow changes.
"""

import re
from pathlib import Path

import pyarrow as pa
import pytest

import _pyarrow_hazards

TABLE = Path(__file__).resolve().parent.parent / "docs" / "guide" / "hazards.md"
MARKER = "<!-- hazard table: checked by tests/test_pyarrow_hazards.py -->"
ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \|")
# An outcome, and where older pyarrow majors differ, "(pyarrow 23: crashes)" or
# "(pyarrow 23-24: crashes)" after it.
OUTCOME = re.compile(r"(?P<newest>[^(]+?)(?: \(pyarrow (?P<first>\d+)(?:-(?P<last>\d+))?: "
                     r"(?P<older>[^)]+)\))?")


def outcome_for_this_pyarrow(cell: str) -> str:
    stated = OUTCOME.fullmatch(cell)
    assert stated, f"not an outcome: {cell!r}"
    major = int(pa.__version__.split(".")[0])
    first = stated["first"] and int(stated["first"])
    if first and first <= major <= int(stated["last"] or first):
        return stated["older"]
    return stated["newest"]


def stated_outcomes() -> dict:
    """{operation: outcome with this pyarrow} as the guide's table states them."""
    text = TABLE.read_text()
    assert MARKER in text, f"{TABLE.name} lost its hazard table's marker"
    table = text[text.index(MARKER):].split("\n\n")[0]
    return {match.group(1): outcome_for_this_pyarrow(match.group(2))
            for match in map(ROW.match, table.splitlines()) if match}


@pytest.fixture(scope="module")
def observed():
    return _pyarrow_hazards.observe()


def test_the_table_lists_every_probed_operation():
    assert list(stated_outcomes()) == list(_pyarrow_hazards.OPERATIONS)


@pytest.mark.parametrize("operation", list(_pyarrow_hazards.OPERATIONS))
def test_pyarrow_does_what_the_guide_says(operation, observed):
    assert observed[operation] == stated_outcomes()[operation], (
        f"pyarrow's outcome of `{operation}` on device data changed: update "
        "docs/guide/hazards.md's table (python tests/_pyarrow_hazards.py prints it)")
