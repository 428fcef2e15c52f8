"""tileiras-async: a Python reimplementation of NVIDIA's tileiras (CUDA TileIR optimizing assembler)."""

__version__ = "0.1.0"


def run_kernel(module, grid, args, *, kernel=None, engine="interpret", gpu_name="sm_100", opt_level=3):
    """Run a kernel of a cuda_tile module on the CPU; see tileiras_async.engines."""
    from .engines import run_kernel as _run
    return _run(module, grid, args, kernel=kernel, engine=engine, gpu_name=gpu_name, opt_level=opt_level)


__all__ = ["__version__", "run_kernel"]
