"""The bytecode's index of the cuda_tile op definitions: opcode -> definition.

The ops themselves (their bytecode records included) are declared once, in ``ir/cuda_tile.py``; the
reader and the writer are loops over those declarations.
"""
from __future__ import annotations

from ..ir.cuda_tile import BASE_MINOR, MAX_MINOR, OPS_BY_CODE, OPS_BY_NAME
from ..ir.opdef import OpDef as OpSpec

__all__ = ["BASE_MINOR", "MAX_MINOR", "OPS_BY_CODE", "OPS_BY_NAME", "OpSpec"]
