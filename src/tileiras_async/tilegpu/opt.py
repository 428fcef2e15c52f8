"""`tileiras-async opt`: IR text in, named passes run over it, the tile-GPU IR text out (like mlir-opt).

The input is a tile-GPU IR dump section (`--print-ir-*`, tilegpu/parser.py) or, for the passes from the
first on (convert-to-tilegpu's input), cuda_tile IR as our disassembler prints it (ir/text_reader.py: one
entry; `--gpu-name` names the target, else the options' default)."""
from __future__ import annotations

from ..ir.text_reader import TextError, looks_like_cuda_tile, read_text_module
from ..ir.verifier import first_error
from .errors import LoweringError
from .ir import KernelIR, clone_function
from .options import CodegenOptions
from .parser import ParseError, parse_kernel
from .passes import PASS_NAMES, _load
from .printer import print_kernel


class OptError(Exception):
    """What `opt` reports as one `error:` line (a file position first where it has one)."""


def opt_text(text: str, filename: str, passes: list[str], gpu_name: str | None = None) -> str:
    """Parse one dump section (or a cuda_tile kernel), run `passes` in the order given, print the result (the
    input as read when `passes` is empty).  `gpu_name` replaces the target the dump names."""
    unknown = [p for p in passes if p not in PASS_NAMES]
    if unknown:
        raise OptError(f"unknown pass '{unknown[0]}' (passes: {', '.join(PASS_NAMES)})")
    try:
        k = _cuda_tile_kernel(text, filename, gpu_name) if looks_like_cuda_tile(text) else parse_kernel(text, filename)
    except (ParseError, TextError) as e:
        raise OptError(str(e)) from None
    if gpu_name is not None:
        k.options.target = gpu_name
    for name in passes:
        try:
            _load(name)(k)
        except LoweringError as e:
            raise OptError(f"{filename}: pass '{name}' failed: {e}") from None
    return print_kernel(k)


def _cuda_tile_kernel(text: str, filename: str, gpu_name: str | None) -> KernelIR:
    """The one entry of a cuda_tile module's text, verified (the passes take verified IR), as a KernelIR."""
    module = read_text_module(text, filename)
    if len(module.functions) != 1:
        raise OptError(f"{filename}: {len(module.functions)} entries: opt reads one kernel")
    problem = first_error(module)
    if problem is not None:
        raise OptError(f"{filename}: {problem.render().removeprefix('error: ')}")
    options = CodegenOptions() if gpu_name is None else CodegenOptions(target=gpu_name)
    return KernelIR(module, clone_function(module.functions[0]), options)
