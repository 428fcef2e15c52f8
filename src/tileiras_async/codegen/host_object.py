"""The x86-64 host object handed to ptxas (`--nv-host=x.o`): the launch hooks that fill a kernel's tensor maps.

NVIDIA's tileiras writes one beside the PTX of kernels that take tensor maps (TMA); ptxas embeds it as the
cubin's `.nv.host` section and the CUDA driver calls it at launch.  Its layout and the words of a tensor map
as the hooks write them are in emu/README.md ("NVIDIA's launch-time hook"); this module builds the same
layout from LLVM IR with llvmlite's X86 back end (large code model, position independent, as NVIDIA's):

* per kernel N, `__CUDA_TILEIR_FUNC_NAME_N` (its entry's name) and `__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_N`
  (a local function of the parameter buffer in its fourth argument that writes the first 64 bytes of each
  map from the parameters of the view the map serves);
* the tables `__CUDA_TILEIR_FUNC_CALLBACKS` and `__CUDA_TILEIR_CALLBACKS` and the driver's entry point
  `__CUDA_TILEIR_ON_PRE_LOAD`, which hands the driver a copy of the table.

The hooks have no calls, no constant pools and no relocations, so they can also be run by copying their
bytes (what the emulator does, emu/host_object.py).  What a map holds (which parameters, box, swizzle) is
decided by the passes; this module only translates that description.
"""
from __future__ import annotations

import threading

from ..targets import HOOK_PARAM_BANK_BASE
from ..tilegpu.analysis.tensor_maps import MAP_ALIGN, MAP_BYTES, KernelHooks, HookValue, TensorMapSpec, tensor_maps_in

__all__ = ["MAP_ALIGN", "MAP_BYTES", "HostObjectError", "KernelHooks", "HookValue", "TensorMapSpec", "bank_base",
           "bank_offsets", "build_host_object", "flags_word", "hooks_ir", "ptxas_options"]

# element type -> (the map's element-type code, element bytes, the tf32 bit): codes as NVIDIA's maps hold them
_ELEMENTS = {"i32": (2, 4, 0), "f16": (6, 2, 0), "f32": (7, 4, 0), "tf32": (7, 4, 1), "bf16": (10, 2, 0)}
# swizzle -> (swizzle code, swizzle-atom code); "128B_base32B": sm_100's 128-byte swizzle of 32-byte atoms
_SWIZZLES = {"none": (0, 0), "32B": (1, 0), "64B": (2, 0), "128B": (3, 0), "128B_base32B": (3, 1)}
MAX_RANK = 5                # the tile mode's ranks (cp.async.bulk.tensor .1d to .5d)
_ALWAYS = 0x40002           # bits set in every map NVIDIA's hooks write
_LARGE_SPAN = 0x20000       # arrays spanning this many bytes or more get bit 21
_ADDRESS_MASK = 0x01FFFFFFFFFFFFF0
# one kernel's entry of __CUDA_TILEIR_FUNC_CALLBACKS (64 bytes): its name at +0x00, its hook at +0x28
_ENTRY = "<{ ptr, [32 x i8], ptr, [16 x i8] }>"


class HostObjectError(Exception):
    """A tensor-map description the hooks cannot encode (an internal compiler error)."""


def bank_offsets(params, base: int) -> list[int]:
    """Offsets of the parameters in the hook's buffer: laid out from constant-bank address `base`, each
    aligned as a bank address (so on sm_90 a tensor map after 72 bytes of parameters is at 0x70)."""
    out, bank = [], base
    for size, align in params:
        bank = -(-bank // max(align, 1)) * max(align, 1)
        out.append(bank - base)
        bank += size
    return out


def bank_base(target: str) -> int:
    """The constant-bank address of the first parameter, as the hooks for PTX target `target` lay out."""
    family = target.rstrip("abf")
    if family not in HOOK_PARAM_BANK_BASE:
        raise HostObjectError(f"the launch hooks' parameter layout for target {target} is not known "
                              f"(known: {', '.join(HOOK_PARAM_BANK_BASE)})")
    return HOOK_PARAM_BANK_BASE[family]


def flags_word(spec: TensorMapSpec) -> int:
    """The low half of the map's second word but for the large-array bit (which depends on the parameters)."""
    code, _size, tf32 = _element(spec)
    swizzle, atom = _SWIZZLES[spec.swizzle]
    return _ALWAYS | (len(spec.box) - 1) << 4 | code << 7 | swizzle << 13 | tf32 << 16 | atom << 19


def hooks_ir(kernels, target: str) -> str:
    """The LLVM IR of the host object for `kernels` (KernelHooks) compiled for PTX target `target`."""
    base = bank_base(target)
    parts = ['target triple = "x86_64-unknown-linux-gnu"', ""]
    entries = []
    for n, kernel in enumerate(kernels):
        name = kernel.name.encode() + b"\0"
        parts.append(f"@__CUDA_TILEIR_FUNC_NAME_{n} = internal constant [{len(name)} x i8] c\"{_escape(name)}\", "
                     'align 16')
        parts.append(_hook_function(n, kernel, base))
        entries.append(f"{_ENTRY} <{{ ptr @__CUDA_TILEIR_FUNC_NAME_{n}, "
                       f"[32 x i8] zeroinitializer, ptr @__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_{n}, "
                       "[16 x i8] zeroinitializer }>")
    parts.append(f"@__CUDA_TILEIR_FUNC_CALLBACKS = internal constant [{len(entries)} x {_ENTRY}] "
                 f"[{', '.join(entries)}], "
                 'align 16')
    parts.append(_callbacks_table(len(entries)))
    parts.append(_PRE_LOAD)
    return "\n".join(parts) + "\n"


def _element(spec: TensorMapSpec) -> tuple[int, int, int]:
    if spec.element not in _ELEMENTS:
        raise HostObjectError(f"tensor map of {spec.element} elements is not encodable")
    return _ELEMENTS[spec.element]


def _check(spec: TensorMapSpec) -> None:
    rank = len(spec.box)
    if not 1 <= rank <= MAX_RANK or len(spec.shape) != rank or len(spec.strides) != rank:
        raise HostObjectError(f"tensor map {spec.param}: rank {rank} with {len(spec.shape)} extents and "
                              f"{len(spec.strides)} strides (ranks 1 to {MAX_RANK} are encoded)")
    if spec.strides[-1] != HookValue(value=1):
        raise HostObjectError(f"tensor map {spec.param}: the innermost stride must be the literal 1")
    if any(not 1 <= b <= 256 for b in spec.box):
        raise HostObjectError(f"tensor map {spec.param}: box {spec.box} (extents 1 to 256)")
    if spec.swizzle not in _SWIZZLES:
        raise HostObjectError(f"tensor map {spec.param}: swizzle {spec.swizzle!r} is not encodable")
    _element(spec)


class _Emitter:
    """Numbered SSA values of one hook function."""

    def __init__(self):
        self.lines: list[str] = []
        self.count = 0

    def emit(self, rhs: str) -> str:
        self.count += 1
        self.lines.append(f"  %v{self.count} = {rhs}")
        return f"%v{self.count}"

    def at(self, offset: int) -> str:
        return self.emit(f"getelementptr i8, ptr %params, i64 {offset}")

    def load(self, op: HookValue, kernel: KernelHooks, offsets: list[int]) -> str:
        """`op` as an i64: a parameter zero-extended from its bytes (as NVIDIA's hooks read them)."""
        if op.param < 0:
            return str(op.value)
        size = kernel.params[op.param][0]
        if size not in (4, 8):
            raise HostObjectError(f"parameter {op.param} of {size} bytes cannot be a pointer, extent or stride")
        value = self.emit(f"load i{size * 8}, ptr {self.at(offsets[op.param])}, align 1")
        return value if size == 8 else self.emit(f"zext i32 {value} to i64")

    def low32(self, value: str) -> str:
        return self.emit(f"and i64 {value}, 4294967295")


def _hook_function(n: int, kernel: KernelHooks, base: int) -> str:
    offsets = bank_offsets(kernel.params, base)
    e = _Emitter()
    for spec in kernel.maps:
        _check(spec)
        if kernel.params[spec.param] != (MAP_BYTES, MAP_ALIGN):
            raise HostObjectError(f"parameter {spec.param} of {kernel.name} is not a 128-byte map aligned to 64")
        _map_words(e, spec, kernel, offsets)
    body = "\n".join(e.lines)
    return (f"define internal i32 @__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_{n}(ptr %a, ptr %b, ptr %c, "
            f'ptr %params) nounwind {{\nentry:\n{body}\n  ret i32 0\n}}\n')


def _map_words(e: _Emitter, spec: TensorMapSpec, kernel: KernelHooks, offsets: list[int]) -> None:
    """Store the map's eight words (README: the words as the hook writes them)."""
    rank = len(spec.box)
    _code, size, _tf32 = _element(spec)
    address = e.load(HookValue(spec.base), kernel, offsets)
    extents = [e.load(op, kernel, offsets) for op in spec.shape]
    strides = [e.load(op, kernel, offsets) for op in spec.strides[:-1]]
    less_one = [e.emit(f"sub i64 {x}, 1") for x in extents]
    # the bytes the array spans: the outer dimensions' (extent - 1) strides plus the innermost extent
    span = extents[-1]
    for stride, m1 in zip(strides, less_one):
        span = e.emit(f"add i64 {span}, {e.emit(f'mul i64 {stride}, {m1}')}")
    span = e.emit(f"mul i64 {span}, {size}")
    large = e.emit(f"zext i1 {e.emit(f'icmp uge i64 {span}, {_LARGE_SPAN}')} to i64")
    stride_units = [e.emit(f"lshr i64 {e.emit(f'mul i64 {s}, {size}')}, 4") for s in strides]
    word1 = e.emit(f"or i64 {e.emit(f'shl i64 {large}, 21')}, {flags_word(spec)}")
    # dimension d counted from the innermost: its stride / 16 in 32-bit half 2 + d (d >= 1), its extent - 1
    # in half 8 + d, its box extent - 1 in byte d - 1 of word 7 (d = 0: the top byte of word 6)
    def stride(d: int) -> str:
        return stride_units[rank - 1 - d] if d < rank else "0"

    def extent(d: int) -> str:
        return less_one[rank - 1 - d] if d < rank else "0"

    if rank >= 2:
        word1 = e.emit(f"or i64 {word1}, {e.emit(f'shl i64 {stride(1)}, 32')}")
    word4 = e.low32(extent(0))
    if rank >= 2:
        word4 = e.emit(f"or i64 {word4}, {e.emit(f'shl i64 {extent(1)}, 32')}")
    box = [b - 1 for b in reversed(spec.box)]
    words = {0x00: e.emit(f"and i64 {address}, {_ADDRESS_MASK}"), 0x08: word1,
             0x10: _halves(e, e.low32(stride(2)) if rank >= 4 else stride(2), stride(3)), 0x18: _halves(e, stride(4), "0"), 0x20: word4,
             0x28: _halves(e, e.low32(extent(2)) if rank >= 3 else "0", extent(3)),
             0x30: _halves(e, e.low32(extent(4)) if rank >= 5 else "0", "0", box[0] << 56),
             0x38: str(sum(b << 8 * (d - 1) for d, b in enumerate(box) if d))}
    for at, value in words.items():
        e.lines.append(f"  store i64 {value}, ptr {e.at(offsets[spec.param] + at)}, align 1")


def _halves(e: _Emitter, low: str, high: str, const: int = 0) -> str:
    """An i64 map word: `low` (a value below 2**32 where `high` is given), `high` shifted into the upper 32
    bits, and a constant's bits."""
    parts = [x for x in (low, e.emit(f"shl i64 {high}, 32") if high != "0" else "0") if x != "0"]
    word = parts[0] if parts else "0"
    for x in parts[1:]:
        word = e.emit(f"or i64 {word}, {x}")
    if const:
        word = str(const) if word == "0" else e.emit(f"or i64 {word}, {const}")
    return word


def _callbacks_table(kernels: int) -> str:
    """`__CUDA_TILEIR_CALLBACKS`: the interface version (2), the size of one kernel entry, the kernels'
    table and their count, the table's version and the pre-load entry point."""
    return ("@__CUDA_TILEIR_CALLBACKS = constant <{ i64, [24 x i8], i64, ptr, i64, i64, ptr }> "
            f"<{{ i64 2, [24 x i8] zeroinitializer, i64 64, ptr @__CUDA_TILEIR_FUNC_CALLBACKS, i64 {kernels}, "
            'i64 2, ptr @__CUDA_TILEIR_ON_PRE_LOAD }>, align 16\n')


# The driver's entry point: version 0 asks whether hooks exist (1); version 1 first reports 16 through the
# driver's function in slot 6; then the driver gets a copy of the table with its third word cleared.
_PRE_LOAD = """\
@__CUDA_TILEIR_CALLBACKS_ON_PRE_LOAD = internal global [9 x i64] zeroinitializer, align 16

define i32 @__CUDA_TILEIR_ON_PRE_LOAD(ptr %driver, ptr %context, i32 %version, ptr %out) nounwind {
entry:
  %none = icmp eq i32 %version, 0
  br i1 %none, label %probe, label %check
probe:
  ret i32 1
check:
  %old = icmp slt i32 %version, 2
  br i1 %old, label %report, label %copy
report:
  %status = alloca i32, align 4
  %slot = getelementptr i8, ptr %driver, i64 48
  %fn = load ptr, ptr %slot, align 8
  %ignored = call i32 %fn(ptr %context, i32 16, ptr %status)
  br label %copy
copy:
  %table = load [9 x i64], ptr @__CUDA_TILEIR_CALLBACKS, align 16
  store [9 x i64] %table, ptr @__CUDA_TILEIR_CALLBACKS_ON_PRE_LOAD, align 16
  %third = getelementptr i8, ptr @__CUDA_TILEIR_CALLBACKS_ON_PRE_LOAD, i64 16
  store i64 0, ptr %third, align 16
  store ptr @__CUDA_TILEIR_CALLBACKS_ON_PRE_LOAD, ptr %out, align 8
  ret i32 0
}
"""


def _escape(data: bytes) -> str:
    return "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in data)


_LOCK = threading.Lock()
_MACHINE = []


def _x86_machine():
    """llvmlite's X86 target machine as NVIDIA's object was built: PIC, large code model."""
    import llvmlite.binding as llvm
    with _LOCK:
        if not _MACHINE:
            from .nvptx import _init
            _init()
            target = llvm.Target.from_triple("x86_64-unknown-linux-gnu")
            _MACHINE.append(target.create_target_machine(cpu="x86-64", opt=2, reloc="pic", codemodel="large"))
        return _MACHINE[0]


def build_host_object(kernels, target: str) -> bytes:
    """The ELF relocatable object of the launch hooks of `kernels` (KernelHooks) for PTX target `target`."""
    import llvmlite.binding as llvm
    tm = _x86_machine()
    module = llvm.parse_assembly(hooks_ir(kernels, target))
    module.name = "tileiras_async_host"
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    module.verify()
    with _LOCK:
        return tm.emit_object(module)


def ptxas_options(ptx: str, tgt, opt_level: int):
    """ptxas's options for PTX of ours: with the host object of its kernels' launch hooks when any takes
    tensor maps (tilegpu.analysis.tensor_maps comments), as NVIDIA's tool passes it; else as before."""
    from ..toolchain.ptxas import PtxasOptions
    hooks = tensor_maps_in(ptx)
    host = build_host_object(hooks, tgt.ptx_target) if hooks else None
    return PtxasOptions(arch=tgt.ptx_target, opt_level=opt_level, host_object=host)
