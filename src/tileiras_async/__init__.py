"""tileiras-async: a Python reimplementation of NVIDIA's tileiras (CUDA TileIR optimizing assembler)."""

__version__ = "0.1.0"
