"""A small command-line parser with LLVM `cl::opt` behaviour and messages.

NVIDIA's tools parse options with LLVM's library; users (and cuTile) rely on
its spellings: `--opt=v`, `--opt v`, `-opt=v`, prefix forms like `-O3`,
aliases, enum values, and its exact error texts and exit code 1.
"""
from __future__ import annotations


class Option:
    """One option of the table; plain class (not a dataclass): the drop-in's start-up imports this."""

    __slots__ = ("name", "help", "kind", "values", "meta", "prefix", "alias_of", "hidden", "integer")

    def __init__(self, name: str, help: str, kind: str = "flag", values: tuple[tuple[str, str], ...] = (),
                 meta: str = "value", prefix: bool = False, alias_of: str | None = None, hidden: bool = False,
                 integer: bool = False):
        self.name = name                # without dashes
        self.help = help
        self.kind = kind                # flag | value | enum | list
        self.values = values            # enum values and their help
        self.meta = meta
        self.prefix = prefix            # accepts the value glued on, like -O3
        self.alias_of = alias_of
        self.hidden = hidden
        self.integer = integer          # a cl::opt<int>: the value is parsed as LLVM parses integers


def llvm_int(text: str) -> int | None:
    """`text` as LLVM's cl::opt<int> reads it (StringRef::getAsInteger, radix sensed from 0x / 0b / 0o / a
    leading 0, an optional minus, no spaces or plus), None unless it is one and fits in 32 bits."""
    body = text[1:] if text.startswith("-") else text
    low = body.lower()
    base, digits = 10, body
    for prefix, b in (("0x", 16), ("0b", 2), ("0o", 8)):
        if low.startswith(prefix):
            base, digits = b, body[2:]
            break
    else:
        if len(body) > 1 and body[0] == "0":
            base, digits = 8, body[1:]
    if not digits or any(c not in "0123456789abcdef"[:base] for c in digits.lower()):
        return None
    value = int(digits, base) * (-1 if text.startswith("-") else 1)
    return value if -2**31 <= value < 2**31 else None


# NVIDIA's tools (13.5) know one preview feature; a 13.1-13.4 module compiles the same with it enabled (what it
# unlocks, SIMT functions and tile libraries, needs 13.5 bytecode, which tileiras-async does not read)
PREVIEW_FEATURES = ("simt",)


def preview_option() -> Option:
    return Option("preview", "Enable one or more named preview features", kind="list", meta="feature[,feature...]",
                  values=tuple((f, f) for f in PREVIEW_FEATURES))


def generic_options() -> list[Option]:
    """LLVM's generic options, as NVIDIA's tools take them: the help listings (one flat list here), and
    --print-options / --print-all-options, which their tools accept and then print nothing for."""
    return [Option("help", "Display available options"),
            Option("print-options", "Print non-default options after command line parsing", hidden=True),
            Option("print-all-options", "Print all option values after command line parsing", hidden=True),
            Option("h", "Alias for --help", alias_of="help", hidden=True),
            Option("help-list", "Display list of available options (--help-list-hidden for more)"),
            Option("help-hidden", "Display all available options", hidden=True),
            Option("help-list-hidden", "Display list of all available options", hidden=True)]


def help_asked(opts) -> bool | None:
    """None when no help option was given, else whether the hidden options are to be listed too."""
    asked = [name for name in ("help", "help-list", "help-hidden", "help-list-hidden") if opts.get(name)]
    return any(name.endswith("-hidden") for name in asked) if asked else None


class OptionError(Exception):
    """An option-parser error: the message lines are printed as they are and the exit code is 1."""


class Parsed:
    """The options given (by canonical name) and the positional arguments."""

    __slots__ = ("values", "positionals")

    def __init__(self, values: dict[str, object] | None = None, positionals: list[str] | None = None):
        self.values: dict[str, object] = {} if values is None else values
        self.positionals: list[str] = [] if positionals is None else positionals

    def get(self, name: str, default=None):
        return self.values.get(name, default)


class OptionParser:
    def __init__(self, prog: str, overview: str, usage: str, options: list[Option], max_positionals: int = 1):
        self.prog = prog
        self.overview = overview
        self.usage = usage
        self.options = {o.name: o for o in options}
        self.max_positionals = max_positionals

    def _canonical(self, opt: Option) -> Option:
        return self.options[opt.alias_of] if opt.alias_of else opt

    def _lookup(self, arg: str) -> tuple[Option, str | None] | None:
        body = arg.lstrip("-")
        name, eq, value = body.partition("=")
        if name in self.options:
            return self.options[name], (value if eq else None)
        for opt in self.options.values():  # prefix options: -O3
            if opt.prefix and body.startswith(opt.name) and len(body) > len(opt.name):
                return opt, body[len(opt.name):].lstrip("=")
        return None

    def parse(self, argv: list[str]) -> Parsed:
        """The options and positionals of `argv`; as LLVM's parser, every bad argument is reported (one
        OptionError carrying all their lines, in order) and parsing goes on after each."""
        out = Parsed()
        errors: list[str] = []
        i = 0
        while i < len(argv):
            arg = argv[i]
            i += 1
            if arg == "--":
                out.positionals.extend(argv[i:])
                break
            if not arg.startswith("-") or arg == "-":
                out.positionals.append(arg)
                continue
            found = self._lookup(arg)
            if found is None:
                errors.append(self._unknown(arg))
                continue
            opt, value = found
            target = self._canonical(opt)
            if target.kind == "flag":
                out.values[target.name] = True if value is None else value not in ("false", "0")
                continue
            if value is None:
                if opt.prefix or i >= len(argv):    # a prefix option's value is glued on (-O3), never the next
                    errors.append(f"{self.prog}: for the -{opt.name if len(opt.name) == 1 else '-' + opt.name} "
                                  f"option: requires a value!")
                    continue
                value = argv[i]
                i += 1
            problem = self._bad_value(target, value)
            if problem:
                errors.append(f"{self.prog}: for the --{target.name} option: {problem}")
            elif target.kind == "list":
                out.values.setdefault(target.name, []).extend(v for v in value.split(",") if v)
            else:
                # an integer is kept as its decimal digits: -O3, --opt-level=0x3 and -O03 are one value
                out.values[target.name] = str(llvm_int(value)) if target.integer else value
        if len(out.positionals) > self.max_positionals:
            errors.append(f"{self.prog}: Too many positional arguments specified!\n"
                          f"Can specify at most {self.max_positionals} positional arguments: "
                          f"See: {self.prog} --help")
        if errors:
            raise OptionError("\n".join(errors))
        return out

    def _bad_value(self, target: Option, value: str) -> str | None:
        if target.kind == "enum" and value not in {v for v, _ in target.values}:
            return f"Cannot find option named '{value}'!"
        if target.integer and llvm_int(value) is None:
            return f"'{value}' value invalid for integer argument!"
        if target.kind == "list" and target.values:    # --preview: every item named must be known
            known = [v for v, _ in target.values]
            for item in value.split(","):
                if item not in known:
                    return f"unknown preview feature '{item}'; supported features: {', '.join(known)}"
        return None

    def _unknown(self, arg: str) -> str:
        msg = f"{self.prog}: Unknown command line argument '{arg}'.  Try: '{self.prog} --help'"
        guess = self._nearest(arg.lstrip("-").partition("=")[0])
        if guess:
            msg += f"\n{self.prog}: Did you mean '--{guess}'?"
        return msg

    def _nearest(self, name: str) -> str | None:
        best, best_d = None, None
        for opt in self.options.values():
            if opt.hidden or len(opt.name) == 1:
                continue
            d = _edit_distance(name, opt.name)
            if best_d is None or d < best_d:
                best, best_d = opt.name, d
        return best

    def help_text(self, hidden: bool = False) -> str:
        """LLVM's option listing; `hidden` (--help-hidden) includes the hidden options."""
        lines = [f"OVERVIEW: {self.overview}", "", f"USAGE: {self.usage}", "", "OPTIONS:"]
        rows = []
        for opt in sorted(self.options.values(), key=lambda o: o.name.lower()):
            if opt.hidden and not hidden:
                continue
            dash = "-" if len(opt.name) == 1 else "--"
            if opt.kind in ("value", "list") or (opt.kind == "enum" and not opt.alias_of):
                label = f"{dash}{opt.name}=<{opt.meta}>"
            else:
                label = f"{dash}{opt.name}"
            rows.append((label, opt.help))
            for v, h in (opt.values if opt.kind == "enum" else ()):   # --preview's names are not listed
                rows.append((f"  ={v}", f"  {h}"))
        width = max(len(label) for label, _ in rows) + 2
        lines += [f"  {label.ljust(width)} - {h}" for label, h in rows]
        return "\n".join(lines) + "\n"


def _edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]
