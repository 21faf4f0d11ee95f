"""Reading a rendered page's tables: each row's attributes and visible text."""
from __future__ import annotations

import re
from html.parser import HTMLParser


class _Rows(HTMLParser):
    """Each <tr> of one table (found by an attribute) as (its attributes, its visible text)."""

    def __init__(self, table_attr: str) -> None:
        super().__init__()
        self.table_attr = table_attr
        self.depth = 0  # >0 while inside the wanted table
        self.rows: list[tuple[dict[str, str], str]] = []
        self._row: tuple[dict[str, str], list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        if tag == "table" and (self.depth or self.table_attr in attributes):
            self.depth += 1
        elif tag == "tr" and self.depth:
            self._row = (attributes, [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self.depth:
            self.depth -= 1
        elif tag == "tr" and self._row is not None:
            text = " ".join(" ".join(self._row[1]).split())
            self.rows.append((self._row[0], text.replace(" ,", ",").replace(" ;", ";")))
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row is not None:
            self._row[1].append(data)


def table_rows(html: str, table_attr: str) -> list[tuple[dict[str, str], str]]:
    """Rows (header row included) of the first table carrying `table_attr` (an id or data- attribute)."""
    parser = _Rows(table_attr)
    parser.feed(html)
    return parser.rows


def row_texts(html: str, table_id: str) -> list[str]:
    """Visible text of each row of the table with id `table_id`."""
    match = re.search(rf'<table[^>]*id="{table_id}".*?</table>', html, re.S)
    assert match, f"no table #{table_id}"
    return [text for _, text in table_rows(match.group(0), "id")]
