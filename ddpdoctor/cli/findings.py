"""``ddpdoctor findings``: the finding catalog, like a linter's rule list (no torch)."""

from __future__ import annotations

import json
import sys

import click


@click.command()
@click.option("--json", "as_json", is_flag=True, help="The catalog as JSON (schema ddpdoctor.findings, version 1).")
@click.option(
    "--family",
    type=click.Choice(["hang", "check", "memleak", "profile", "probe", "doctor"]),
    default=None,
    help="Only this family's findings.",
)
def findings(as_json: bool, family: str | None) -> None:
    """Every finding id ddpdoctor can report: family, severity, verdict and exit code, and its docs page.

    \b
    ddpdoctor findings
    ddpdoctor findings --family memleak
    ddpdoctor findings --json | jq '.findings[].id'
    """
    from ddpdoctor.analysis.catalog import CATALOG

    entries = [e for e in CATALOG.values() if family is None or e.family == family]
    if as_json:
        doc = {
            "schema": "ddpdoctor.findings",
            "version": 1,
            "findings": [
                {
                    "id": e.id,
                    "family": e.family,
                    "severity": e.severity,
                    "severities": list(e.severities),
                    "verdict": e.verdict if "error" in e.severities else "ok",
                    "exit_code": e.exit_code if "error" in e.severities else 0,
                    "title": e.title,
                    "page": e.page,
                }
                for e in entries
            ],
        }
        click.echo(json.dumps(doc, indent=1))
        sys.exit(0)
    width = max(len(e.id) for e in entries)
    for e in entries:
        sev = "/".join(e.severities)
        code = f"exit {e.exit_code}" if "error" in e.severities else "exit 0"
        click.echo(f"{e.id:{width}s}  {e.family:8s} {sev:14s} {code:7s} {e.title}")
    click.echo(
        f"\n{len(entries)} findings; each has a page: docs/findings/<id>.md (warnings and notes exit 0 "
        "unless --fail-on asks)"
    )
    sys.exit(0)
