"""The project's one TOML writer (tomllib only reads): tomli-w writes every document, every key and every scalar.

`toml_document` is a file: a header of comment lines, then the table (scenario.toml in a run folder, minimal.toml).
`toml_value` is one value on one line, the way `--set KEY=VALUE` parses it back (strings quoted, so "true" stays a
string) and reports and replay commands show it. tomli-w writes documents only, its arrays over several lines: here
its keys and scalars are joined into a one-line array or inline table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import tomli_w


def toml_document(table: Mapping[str, object], comments: Iterable[str] = ()) -> str:
    """The TOML text of `table`, after `comments` as `# ` lines (an empty one is a bare `#`)."""
    header = "".join(f"# {line}\n" if line else "#\n" for line in comments)
    return header + tomli_w.dumps(table)


def toml_value(v: object) -> str:
    """`v` as TOML on one line; a TypeError for what TOML cannot hold (None, other objects)."""
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }" if v else "{}"
    return tomli_w.dumps({"v": v}).removeprefix("v = ").removesuffix("\n")


def toml_key(k: str) -> str:
    """A key as TOML writes it: bare when it can be, else quoted."""
    return tomli_w.dumps({k: 0}).removesuffix(" = 0\n")
