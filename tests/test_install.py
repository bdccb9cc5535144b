"""The install command gluondist prints where MXNet is missing (INSTALL_HINT) works as written:
every extra it names is one pyproject.toml declares, and the MXNet it pins is the extras'."""
import json
import re

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
