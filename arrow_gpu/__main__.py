"""``python -m arrow_gpu``: print the diagnostic report (see ``arrow_gpu.diagnostics``)."""

from arrow_gpu.diagnostics import report

print(report())
