"""Debug-section attribute tags (the printer renders the attributes: ``printer.render_location``)."""
from __future__ import annotations

TAG_COMPILE_UNIT, TAG_FILE, TAG_LEXICAL_BLOCK, TAG_LOC, TAG_SUBPROGRAM, TAG_CALLSITE = 1, 2, 3, 4, 5, 6
