"""What the HTML tests look for in a written page: references that leave the machine (a page must render offline)."""

from __future__ import annotations

from html.parser import HTMLParser


class OfflineParser(HTMLParser):
    """Collects every ``src``/``href`` that points off the machine as ``external``; subclasses add what they count."""

    def __init__(self) -> None:
        super().__init__()
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for key in ("src", "href"):
            value = a.get(key) or ""
            if value.startswith(("http:", "https:", "//")):
                self.external.append(f"<{tag} {key}={value}>")
        self.on_tag(tag, a)

    def on_tag(self, tag: str, attrs: dict[str, str | None]) -> None:
        """Hook for subclasses: every start tag, attributes as a dict."""
