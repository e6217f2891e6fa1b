"""The human front door: Ask, Receipts, Stats and Config pages, served by ``engine serve
--transport http`` beside the MCP endpoint (docs/ui.md).

Server-rendered jinja2 templates (autoescape on) with plain HTML and CSS and one small script,
no build step; templates and static files ship as package data. Same auth as ``/mcp``
(:mod:`engine.ui.security`).
"""

from __future__ import annotations

from .app import ui_app
from .pages import Backend

__all__ = ["Backend", "ui_app"]
