"""``ddpdoctor findings``: the finding catalog, like a linter's rule list, and one finding's page, like
``ruff rule`` (no torch)."""

from __future__ import annotations

import json
import sys

import click

from ddpdoctor.analysis.catalog import FAMILIES


def write_json(doc: dict, path: str) -> None:
    """``doc`` as indented JSON into ``path`` ('-': standard output); a file that cannot be written is one line."""
    text = json.dumps(doc, indent=1) + "\n"
    if path == "-":
        click.echo(text, nl=False)
        return
    from ddpdoctor.errors import DdpdoctorError

    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise DdpdoctorError(f"cannot write {path}: {e.strerror}") from None


def _row(e) -> dict:  # type: ignore[no-untyped-def]
    return {
        "id": e.id,
        "family": e.family,
        "group": e.group,
        "severity": e.severity,
        "severities": list(e.severities),
        "verdict": e.verdict if "error" in e.severities else "ok",
        "exit_code": e.exit_code if "error" in e.severities else 0,
        "title": e.title,
        "page": e.page,
        "url": e.url,
    }


@click.command(short_help="The finding ids, or one finding's page (like `ruff rule`).")
@click.argument("finding_id", required=False, metavar="[ID]")
@click.option(
    "--family",
    type=click.Choice(list(FAMILIES)),
    metavar="FAMILY",  # 17 prefixes: a wrong one's error lists them
    default=None,
    help="Only the ids of this prefix, e.g. crash or memleak.",
)
@click.option(
    "--json",
    "json_path",
    metavar="FILE",
    is_flag=False,
    flag_value="-",
    default=None,
    help="Write it as JSON to FILE ('-' or no FILE: stdout).",
)
def findings(finding_id: str | None, family: str | None, json_path: str | None) -> None:
    """Every finding id ddpdoctor can report (severity, exit code, title), or one finding's page: what it
    means, why it happens, the fix and an example.

    \b
    ddpdoctor findings                        # the catalog
    ddpdoctor findings crash.exception        # one finding's page
    ddpdoctor findings --family memleak
    ddpdoctor findings --json - | jq '.findings[].id'
    """
    from ddpdoctor.analysis.catalog import CATALOG, check_names, page_text
    from ddpdoctor.errors import DdpdoctorError

    if json_path in CATALOG or json_path in FAMILIES:  # `--json crash.exception` would write a file by that name
        raise DdpdoctorError(
            f"--json {json_path}: that is a finding id, not a file: ddpdoctor findings {json_path} --json -"
        )
    if finding_id is not None:
        if finding_id in FAMILIES and finding_id not in CATALOG:
            family, finding_id = finding_id, None  # `findings crash`: the family's list
        else:
            check_names((finding_id,), "findings")
    if finding_id is not None:
        e = CATALOG[finding_id]
        text = page_text(e.id)
        if json_path:
            write_json({"schema": "ddpdoctor.finding", "version": 1, **_row(e), "text": text}, json_path)
            sys.exit(0)
        if text is None:  # an install without the pages: say where they are, where anyone knows
            where = f"it is at {e.url}" if e.url else f"it is {e.page} in ddpdoctor's source"
            click.echo(f"{e.id}: {e.title}\nno page in this install; {where}")
        else:
            click.echo(text.rstrip("\n"))
            if e.url:
                click.echo(f"\n(also at {e.url})")
        sys.exit(0)
    entries = [e for e in CATALOG.values() if family is None or e.family == family]
    if json_path:
        write_json({"schema": "ddpdoctor.findings", "version": 1, "findings": [_row(e) for e in entries]}, json_path)
        sys.exit(0)
    width = max(len(e.id) for e in entries)
    for e in entries:
        sev = "/".join(e.severities)
        code = f"exit {e.exit_code}" if "error" in e.severities else "exit 0"
        click.echo(f"{e.id:{width}s}  {sev:14s} {code:7s} {e.title}")
    click.echo(
        f"\n{len(entries)} findings; `ddpdoctor findings ID` prints one's page (warnings and notes exit 0 "
        "unless --fail-on asks; --select/--ignore ID on every command)"
    )
    sys.exit(0)
