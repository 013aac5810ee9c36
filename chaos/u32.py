"""xt_u32 expressions as the kernel evaluates them, in Python: what the u32 compilers of chaos/kernel.py and the wire
profiles (chaos/profiles/) write can be checked against real packets (the golden datagrams of a foreign system)
without a kernel.

The grammar (iptables-extensions(8), "u32"): tests joined by `&&`, each `location=value[,value...]`, a value a number
or a range `lo:hi`; a location is a number followed by operators `&N` (and), `<<N`, `>>N` and `@N`. Evaluation is
the kernel's (net/netfilter/xt_u32.c): a test starts at AT = 0 and reads the big-endian 32-bit word at its first
number; `@N` adds the current value to AT and reads the word at AT + N; a read past the packet's end fails the test
(and so the match). A match is true when every test is.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

MAX_TESTS = 10  # what one `-m u32 --u32` takes (iptables: 'too many "&&"s' beyond); a rule may repeat the match
_MASK = 0xFFFFFFFF
_TOKEN = re.compile(r"\s*(0x[0-9a-fA-F]+|\d+|<<|>>|&|@)")


class U32Error(ValueError):
    """An expression that does not parse."""


@dataclass(frozen=True)
class Test:
    start: int
    ops: tuple[tuple[str, int], ...]  # (operator, number): "&", "<<", ">>", "@"
    values: tuple[tuple[int, int], ...]  # inclusive ranges


def _number(text: str) -> int:
    return int(text, 16) if text.lower().startswith("0x") else int(text)


def parse_test(text: str) -> Test:
    location, eq, values = text.partition("=")
    if not eq or not values.strip():
        raise U32Error(f"{text!r}: a test is location=value")
    tokens = _TOKEN.findall(location)
    if (
        "".join(tokens).replace(" ", "") != location.replace(" ", "")
        or not tokens
        or tokens[0] in ("<<", ">>", "&", "@")
    ):
        raise U32Error(f"{text!r}: a location is a number followed by &N, <<N, >>N or @N operations")
    start, rest = _number(tokens[0]), tokens[1:]
    if len(rest) % 2:
        raise U32Error(f"{text!r}: an operator without its number")
    ops = []
    for op, num in zip(rest[::2], rest[1::2], strict=True):
        if op not in ("&", "<<", ">>", "@") or num in ("&", "<<", ">>", "@"):
            raise U32Error(f"{text!r}: expected an operator and a number, not {op!r} {num!r}")
        ops.append((op, _number(num)))
    ranges = []
    for part in values.split(","):
        lo, colon, hi = part.strip().partition(":")
        try:
            ranges.append((_number(lo), _number(hi) if colon else _number(lo)))
        except ValueError:
            raise U32Error(f"{text!r}: {part!r} is not a number or a range lo:hi") from None
    return Test(start, tuple(ops), tuple(ranges))


@functools.lru_cache(maxsize=4096)
def parse(expr: str) -> tuple[Test, ...]:
    tests = tuple(parse_test(t) for t in expr.split("&&"))
    if len(tests) > MAX_TESTS:
        raise U32Error(f"{len(tests)} tests in one match; xt_u32 takes at most {MAX_TESTS}")
    return tests


def _word(pkt: bytes, pos: int) -> int | None:
    if pos < 0 or pos + 4 > len(pkt):
        return None
    return int.from_bytes(pkt[pos : pos + 4], "big")


def test_holds(test: Test, pkt: bytes) -> bool:
    """One test on a packet (an IPv4 packet, from its first byte), as xt_u32 evaluates it."""
    val = _word(pkt, test.start)
    if val is None:
        return False
    at = 0
    for op, num in test.ops:
        if op == "&":
            val &= num
        elif op == "<<":
            val = (val << num) & _MASK
        elif op == ">>":
            val >>= num
        else:  # "@"
            at += val
            val = _word(pkt, at + num)  # type: ignore[assignment]
            if val is None:
                return False
    return any(lo <= val <= hi for lo, hi in test.values)


def matches(expr: str | list[str], pkt: bytes) -> bool:
    """Whether an expression (or the tests of several `-m u32` matches of one rule, all of which must hold) matches
    the packet."""
    texts = [expr] if isinstance(expr, str) else expr
    return all(test_holds(t, pkt) for text in texts for t in parse(text))


def chunks(tests: list[str] | tuple[str, ...]) -> list[str]:
    """Tests joined into as few `--u32` expressions as xt_u32 allows (a rule repeats `-m u32` for each)."""
    return ["&&".join(tests[i : i + MAX_TESTS]) for i in range(0, len(tests), MAX_TESTS)]
