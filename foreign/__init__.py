"""Foreign members: systems chaosbed did not write, run as cluster members under the same faults, histories and
checks as its own (docs/scenario-format.md, "Foreign members"). One sub-package per system: its member program, how to
build and start it, and its test helpers. The orchestrator starts a foreign member with the command and config its
package describes (e.g. foreign.jgroups.member_command)."""
