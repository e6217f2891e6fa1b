"""Documentation search: ranked keyword search over Markdown and reStructuredText sections.

A configured :class:`~engine.experts.bm25.BM25Expert` rather than a second search engine: the
same tantivy index code and code-aware tokenizer, but fed only doc files (``accepts``), whose
chunks are the syntax layer's sections (one per heading, symbol = heading path such as
``Install > From source``), with the heading path weighted in the searchable text
(``settings.symbol_weight``). Items are of kind ``doc`` and the precision class ``docs``, so
fusion labels prose as prose and never as code evidence.
"""

from __future__ import annotations

from typing import ClassVar

from ..index.files import SourceFile
from ..syntax import DOC_LANGUAGES, language_for
from .bm25 import BM25Expert


class DocsExpert(BM25Expert):
    adapter = "docs"
    item_kind: ClassVar[str] = "doc"

    def accepts(self, f: SourceFile) -> bool:
        """Only Markdown / reST files go into this index (called by ``engine index``)."""
        return language_for(f.path) in DOC_LANGUAGES
