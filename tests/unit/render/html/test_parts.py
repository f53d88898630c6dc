"""The HTML report's small parts (render/html/parts.py): escaping, rank labels and groups, source
excerpts with the marked line (or a note when the file is missing), tables, byte sizes, evidence."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.render.html.parts import Sources, e, evidence_html, fmt_bytes, group_ranks, ranks_label, short, table


def test_escaping_covers_text_and_quoted_attributes() -> None:
    assert e('<b a="1">&') == "&lt;b a=&quot;1&quot;&gt;&amp;"
    assert e(3) == "3"


def test_rank_labels() -> None:
    assert ranks_label([]) == "no rank"
    assert ranks_label([2, 2]) == "rank 2"
    assert ranks_label([3, 0, 1, 2, 7]) == "5 ranks [0-3,7]"
    assert short("/a/b/train.py") == "train.py" and short("") == "?"


def test_groups_put_the_culprits_first_then_the_smallest_groups() -> None:
    by_rank = {0: "barrier", 1: "barrier", 2: "barrier", 3: "all_reduce", 4: "send", 5: "send"}
    assert group_ranks(by_rank) == [("all_reduce", [3]), ("send", [4, 5]), ("barrier", [0, 1, 2])]
    # a culprit never shares a row with ranks that only wait where it does
    assert group_ranks(by_rank, first=[1]) == [
        ("barrier", [1]),
        ("all_reduce", [3]),
        ("barrier", [0, 2]),
        ("send", [4, 5]),
    ]


def test_an_excerpt_marks_its_line_with_context_and_escapes_the_code(tmp_path: Path) -> None:
    p = tmp_path / "train.py"
    p.write_text("\n".join(f"line{i} = '<{i}>'" for i in range(1, 11)))
    html = Sources().excerpt(str(p), 5)
    assert html.count("<tr") == 7 and 'data-line="5"' in html
    assert '<tr class="mark"><td class="ln">5</td><td class="ar">&#9654;</td>' in html
    assert "line5 = &#x27;&lt;5&gt;&#x27;" in html
    assert Sources().excerpt(str(p), 1).count("<tr") == 4  # the top of the file: no lines before


def test_a_missing_file_or_line_is_a_note_not_an_error(tmp_path: Path) -> None:
    src = Sources()
    assert src.excerpt(str(tmp_path / "gone.py"), 3) == (
        f'<p class="nosrc">source not available (file not readable here): {tmp_path / "gone.py"}:3</p>'
    )
    p = tmp_path / "short.py"
    p.write_text("a = 1\nb = 2\n")
    assert "the file has 2 lines" in src.excerpt(str(p), 9)
    assert src.line(str(p), 2) == "b = 2" and src.line(str(p), 0) is None


def test_table_fmt_bytes_and_evidence() -> None:
    assert table(["a", "<b>"], [["1", "2"]]) == (
        '<table class="grid"><thead><tr><th>a</th><th>&lt;b&gt;</th></tr></thead>'
        "<tbody><tr><td>1</td><td>2</td></tr></tbody></table>"
    )
    assert [fmt_bytes(n) for n in (12, 2048, 3 * 2**20, 5 * 2**30)] == ["12 B", "2.0 KiB", "3.0 MiB", "5.0 GiB"]
    assert evidence_html({}) == ""
    ev = evidence_html({"path": "/ck.pt", "seeds": {"0": 1}, "long": "x" * 700})
    assert "<th>path</th><td><code>/ck.pt</code>" in ev and "{&quot;0&quot;: 1}" in ev
    assert "x" * 600 + " ..." in ev and "x" * 601 not in ev
