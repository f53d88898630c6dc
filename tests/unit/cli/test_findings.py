"""``ddpdoctor findings``: the catalog by family (the id's prefix) and one finding's page, like ``ruff rule``.
In-process through the CLI's own entry point (no torch)."""

from __future__ import annotations

import json
import re

import pytest

from ddpdoctor.analysis.catalog import CATALOG, FAMILIES
from ddpdoctor.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ex:
        main(["findings", *argv])
    out, err = capsys.readouterr()
    return int(ex.value.code or 0), out, err


def test_one_findings_page_is_printed(capsys):
    code, out, err = run(capsys, "crash.exception")
    assert code == 0, err
    assert out.startswith("# crash.exception\n") and "root cause" in out
    assert "(also at" not in out  # no web address is made up where the package names none


def test_a_family_is_the_id_prefix(capsys):
    assert set(FAMILIES) == {fid.split(".", 1)[0] for fid in CATALOG}
    code, out, _ = run(capsys, "--family", "crash")
    ids = [line.split()[0] for line in out.splitlines() if line and not line.startswith(("\n", "2 findings"))]
    assert code == 0 and ids[:2] == ["crash.exception", "crash.abnormal-exit"] and "2 findings" in out
    code, out, _ = run(capsys, "--family", "hang")
    assert "crash.exception" not in out and "run.not-started" not in out and "hang.timeout" in out
    code, out, _ = run(capsys, "postmortem")  # a family named like an id: that family's list
    assert code == 0 and "postmortem.no-dump" in out and "crash.exception" not in out


def test_an_unknown_id_is_one_line_with_the_nearest_id(capsys):
    code, out, err = run(capsys, "crash.exceptoin")
    assert code == 2 and out == ""
    assert (
        err
        == "ddpdoctor: error: findings crash.exceptoin: no such finding id or family (did you mean crash.exception?)\n"
    )


def test_json_goes_to_a_file_like_every_other_command(capsys, tmp_path):
    path = tmp_path / "catalog.json"
    code, out, _ = run(capsys, "--json", str(path))
    doc = json.loads(path.read_text())
    assert code == 0 and out == "" and [f["id"] for f in doc["findings"]] == list(CATALOG)
    code, out, _ = run(capsys, "seed.identical-streams", "--json", "-")
    one = json.loads(out)
    assert (one["id"], one["family"], one["severity"]) == ("seed.identical-streams", "seed", "note")
    assert (
        one["text"].startswith("# seed.identical-streams") and one["page"] == "docs/findings/seed.identical-streams.md"
    )
    assert one["url"] is None  # this package's metadata names no web address: none is made up


def test_a_web_address_comes_only_from_the_packages_metadata(monkeypatch):
    from importlib import metadata

    from ddpdoctor.analysis import catalog

    class Meta:
        def get_all(self, key):
            return ["Homepage, https://example.org/x", "Documentation, https://docs.example.org/ddpdoctor/"]

    monkeypatch.setattr(metadata, "metadata", lambda name: Meta())
    catalog._docs_base.cache_clear()
    try:
        assert CATALOG["crash.exception"].url == "https://docs.example.org/ddpdoctor/findings/crash.exception.md"
    finally:
        catalog._docs_base.cache_clear()


def test_json_before_an_id_is_not_taken_for_a_file_name(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "--json", "crash.exception")
    assert code == 2 and out == "" and not (tmp_path / "crash.exception").exists()
    assert err == (
        "ddpdoctor: error: --json crash.exception: that is a finding id, not a file: "
        "ddpdoctor findings crash.exception --json -\n"
    )


def test_every_page_reads_what_why_fix_example():
    # the pages are for the user; how ddpdoctor decides is in docs/how-it-works.md
    from helpers import ROOT

    from ddpdoctor.analysis.catalog import page_text

    for fid in CATALOG:
        text = page_text(fid) or ""
        assert re.findall(r"^## (.+)$", text, re.M) == ["What", "Why", "Fix", "Example"], fid
        assert "**How it is found" not in text, fid
    assert "### hang.rank-conditional-collective" in (ROOT / "docs" / "how-it-works.md").read_text()
