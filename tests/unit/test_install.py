"""Installing works as written: the command gluondist prints where MXNet is missing
(INSTALL_HINT) and the notebook's name extras pyproject.toml declares and the MXNet they pin,
and the extras cap what would make pip download release after release."""
import json
import re
from importlib.metadata import version

import pytest
from packaging.requirements import Requirement

from gluondist import INSTALL_HINT
from conftest import ROOT

try:
    import tomllib
except ImportError:  # Python < 3.11: pytest's own dependency there
    import tomli as tomllib

EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_the_hint_names_the_declared_extras_and_their_mxnet_pins():
    named = re.findall(r"'(?:\.|gluondist)\[(\w+)\]'", INSTALL_HINT)
    assert set(named) == {"cpu", "cu117", "cu112"} and set(named) <= set(EXTRAS)
    assert "pip install '.[cpu]'" in INSTALL_HINT  # from a checkout: the form that works today
    pins = re.findall(r"\bmxnet[\w-]*==[\d.]+", INSTALL_HINT)
    assert pins == [EXTRAS["cpu"][0], EXTRAS["cu117"][0]], pins
    # the index form is given only as what it will be
    assert re.search(r"'gluondist\[cpu\]' works only once gluondist is on PyPI, which it is "
                     r"not yet$", INSTALL_HINT)


def test_the_notebooks_install_line_is_a_checkouts_with_declared_extras():
    cells = json.loads((ROOT / "examples" / "quickstart.ipynb").read_text())["cells"]
    text = "".join(cells[0]["source"])
    extras = re.search(r"`pip install '\.\[([\w,]+)\]'`", text).group(1).split(",")
    assert extras == ["cpu", "examples"] and set(extras) <= set(EXTRAS)
    assert "once gluondist is on PyPI (it is not yet)" in text


# The first releases that need numpy >= 1.25 (MXNet 1.9.1 needs numpy < 1.24), and what pulls
# them in: an extra with the puller and without the caps makes pip download each such release
# before it settles (pyproject.toml says how many).
CAPS = {"scipy": "1.16", "matplotlib": "3.11", "contourpy": "1.3.3"}
PULLS = {"scikit-learn": ("scipy",), "matplotlib": ("matplotlib", "contourpy")}


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_an_extra_that_pulls_scipy_or_matplotlib_caps_them_below_numpy_1_25s(extra):
    reqs = {r.name: r for r in map(Requirement, EXTRAS[extra])}
    for capped in (c for puller, caps in PULLS.items() if puller in reqs for c in caps):
        assert capped in reqs, f"extra {extra!r} pulls {capped} in without its cap"
        spec = reqs[capped].specifier
        assert CAPS[capped] not in spec and version(capped) in spec, (extra, str(spec))
