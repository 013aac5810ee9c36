"""Wire profiles of foreign systems: how their datagrams are laid out, so that protocol-aware faults (`discard`) can
match and cut their messages as chaos/ does chaosbed's own (node/wire.py). One module per system and version, pure
standard library: `jgroups212` (JGroups 2.12.2 over UDP)."""
