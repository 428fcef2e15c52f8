"""The bytecode's index of the cuda_tile op definitions: opcode -> definition (and by name).

The ops themselves, bytecode records included, are declared once in ``ir/cuda_tile.py``; the reader and
the writer are loops over those declarations.
"""
from __future__ import annotations

from ..ir.cuda_tile import BASE_MINOR, CUDA_TILE, MAX_MINOR

OPS_BY_CODE = CUDA_TILE.by_opcode
OPS_BY_NAME = CUDA_TILE.ops

__all__ = ["BASE_MINOR", "MAX_MINOR", "OPS_BY_CODE", "OPS_BY_NAME"]
