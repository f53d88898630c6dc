"""analysis/ids.py: every finding id a typed constant, the same set as the catalog's, and the one place in
the package where an id is spelt out."""

from __future__ import annotations

import io
import re
import tokenize

from helpers import ROOT

from ddpdoctor.analysis.catalog import CATALOG


def test_the_ids_module_is_the_catalog_and_the_one_place_an_id_is_spelt():
    """Every id is a typed constant of ddpdoctor/analysis/ids.py, the same set as the catalog's; elsewhere in
    the package an id appears only through those names (a string literal that is an id, whole, is a defect:
    a misspelt one would be a finding nobody can select)."""
    from ddpdoctor.analysis import ids

    consts = {k: v for k, v in vars(ids).items() if k.isupper()}
    assert set(consts.values()) == set(CATALOG)
    assert all(k == re.sub(r"[.-]", "_", v).upper() for k, v in consts.items())
    spelt = []
    for path in sorted((ROOT / "ddpdoctor").rglob("*.py")):
        if path.name == "ids.py" and path.parent.name == "analysis":
            continue
        for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if t.type == tokenize.STRING and t.string[:1] in "\"'" and t.string[1:2] not in "\"'":
                if t.string[1:-1] in CATALOG:
                    spelt.append(f"{path.relative_to(ROOT)}:{t.start[0]} {t.string}")
    assert spelt == []
