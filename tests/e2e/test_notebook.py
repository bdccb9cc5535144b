"""The quickstart notebook runs top to bottom in a real Jupyter kernel."""
import nbformat
from nbclient import NotebookClient

from conftest import ROOT


def test_quickstart_runs_in_a_real_kernel():
    path = ROOT / "examples" / "quickstart.ipynb"
    nb = nbformat.read(path, as_version=4)
    # raises CellExecutionError on the first cell that fails
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the curves, inline
    text = "".join(o.get("text", "") for o in outputs)
    assert "exit code: 0" in text and "final validation accuracy" in text
    # fit's progress bar, as in a terminal: the kernel is interactive
    assert any(o.get("name") == "stderr" and "it/s" in o.get("text", "") for o in outputs)
