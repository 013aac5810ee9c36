"""The JGroups 2.12 wire decoder (chaos/profiles/jgroups212.py) on the golden datagrams (tests/fixtures/jgroups212/,
captured from the real jar): every datagram decodes as the jar's own reader reads it (form, addresses, message and
header offsets, every header field), the wire agrees with the members' histories (seqno and conn_id of each
application message), cutting one message out of a LIST leaves a datagram of the others (the jar reads it too), and
bad input gives a clear "cannot skip" result, never an exception."""

from __future__ import annotations

import json
import random
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from chaos.profiles import jgroups212 as wire
from foreign import jgroups
from node.history_format import member_problems

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "jgroups212"


@cache
def golden() -> list[dict[str, Any]]:
    with open(FIXTURES / "datagrams.jsonl") as f:
        return [json.loads(line) for line in f]


@cache
def meta() -> dict[str, Any]:
    return json.loads((FIXTURES / "capture.json").read_text())


def histories() -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted((FIXTURES / "history").glob("*.jsonl")):
        out[path.stem] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def data_of(d: dict[str, Any]) -> bytes:
    return bytes.fromhex(d["hex"])


# --- the jar's decoding, in the decoder's terms ----------------------------------------------------------------------


def addr(a: Any) -> Any:
    """An address as the jar's decoder renders it -> the Python decoder's value."""
    if a is None:
        return None
    if "uuid" in a:
        return wire.Uuid(a["uuid"][0], a["uuid"][1])
    if "ip" in a:
        return wire.IpAddr(a["ip"], a["port"])
    raise AssertionError(f"unexpected address {a}")


def addrs(items: Any) -> Any:
    return None if items is None else [addr(a) for a in items]


def view_id(v: Any) -> Any:
    return None if v is None else {"coord": addr(v["coord_addr"]), "id": v["id"]}


def view(v: Any) -> Any:
    if v is None:
        return None
    out = {"view_id": view_id(v["vid"]), "members": addrs(v["members"]), "payload": None}
    if "subgroups" in v:
        out["subgroups"] = [view(s) for s in v["subgroups"]]
    return out


def digest(d: Any) -> Any:
    """Sorted by member: the jar keeps a digest in a HashMap, the wire in its own order."""
    if d is None:
        return None
    entries = [
        {"member": addr(m), "low": e["low_seqno"], "highest_delivered": e["highest_delivered_seqno"],
         "highest_received": e["highest_received_seqno"]}
        for m, e in d["senders"]
    ]  # fmt: skip
    return sorted(entries, key=lambda e: str(e["member"]))


def sorted_digest(entries: Any) -> Any:
    return None if entries is None else sorted(entries, key=lambda e: str(e["member"]))


def expected_fields(key: str, f: dict[str, Any]) -> dict[str, Any]:
    """The fields the Python decoder must find for a header, from the jar's object (its Java field names)."""
    protocol = key.split(".")[0]
    if protocol == "UDP":
        return {"cluster": f["channel_name"]}
    if key in ("UNICAST2.DATA", "UNICAST.DATA"):
        return {"seqno": f["seqno"], "conn_id": f["conn_id"], "first": f["first"]}
    if key in ("UNICAST2.XMIT_REQ", "UNICAST2.STABLE"):
        return {"seqno": f["seqno"], "high_seqno": f["high_seqno"]}
    if key in ("UNICAST2.SEND_FIRST_SEQNO", "UNICAST.ACK", "NAKACK.MSG", "NAKACK.XMIT_RSP"):
        return {"seqno": f["seqno"]}
    if key == "NAKACK.XMIT_REQ":
        return {"range": f["range"], "sender": addr(f["sender"])}
    if protocol == "STABLE":
        return {"digest": digest(f["stableDigest"])}
    if protocol == "GMS":
        rsp = f["join_rsp"]
        return {
            "merge_view": f["view"] is not None and "subgroups" in f["view"],
            "view": view(f["view"]),
            "mbr": addr(f["mbr"]),
            "mbrs": addrs(f["mbrs"]),
            "join_rsp": None
            if rsp is None
            else {"view": view(rsp["view"]), "digest": digest(rsp["digest"]), "fail_reason": rsp["fail_reason"]},
            "digest": digest(f["my_digest"]),
            "merge_id": None
            if f["merge_id"] is None
            else {"initiator": addr(f["merge_id"]["initiator"]), "id": f["merge_id"]["id"]},
            "merge_rejected": f["merge_rejected"],
            "use_flush": f["useFlushIfPresent"],
        }
    if protocol == "PING":
        d = f["data"]
        data = None
        if d is not None:
            data = {"own_addr": addr(d["own_addr"]), "view": view(d["view"]), "view_id": view_id(d["view_id"]),
                    "is_server": d["is_server"], "logical_name": d["logical_name"],
                    "physical_addrs": addrs(d["physical_addrs"])}  # fmt: skip
        return {"data": data, "cluster": f["cluster_name"], "view_id": view_id(f["view_id"])}
    if protocol == "FD_SOCK":
        cache_ = sorted(((addr(k), addr(v)) for k, v in f["cachedAddrs"] or []), key=str)  # a HashMap in the jar
        mbrs = sorted(addrs(f["mbrs"]) or [], key=str)  # a Set
        return {"mbr": addr(f["mbr"]), "sock_addr": addr(f["sock_addr"]), "cache": cache_, "mbrs": mbrs}
    if protocol == "VERIFY_SUSPECT":
        return {"from": addr(f["from"])}
    if protocol in ("FD_ALL", "UFC", "MFC") or key.startswith("UNICAST.SEND_FIRST_SEQNO"):
        return {}
    if protocol == "FRAG2":
        return {"id": f["id"], "frag_id": f["frag_id"], "num_frags": f["num_frags"]}
    raise AssertionError(f"no expectation for {key}: add it")


def normalized(key: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The Python decoder's fields, with digests in member order and without address extras (none on this wire)."""
    out = dict(fields)
    if key.startswith("FD_SOCK."):
        out["cache"], out["mbrs"] = sorted(out["cache"], key=str), sorted(out["mbrs"], key=str)
    if "digest" in out:
        out["digest"] = sorted_digest(out["digest"])
    if isinstance(out.get("join_rsp"), dict):
        out["join_rsp"] = {**out["join_rsp"], "digest": sorted_digest(out["join_rsp"]["digest"])}
    return out


# --- tests ------------------------------------------------------------------------------------------------------------


def test_the_fixtures_hold_the_datagrams_the_profile_needs() -> None:
    kinds = " ".join(d["kind"] for d in golden())
    needed_kinds = (
        *("SINGLE", "LIST", "UNICAST2.DATA", "NAKACK.MSG", "STABLE.STABLE_GOSSIP", "STABLE.STABILITY"),
        *("UNICAST2.STABLE", "NAKACK.XMIT_REQ", "UNICAST2.XMIT_REQ", "GMS.JOIN_REQ", "GMS.JOIN_RSP", "GMS.VIEW"),
        *("GMS.INSTALL_MERGE_VIEW", "PING.GET_MBRS_REQ", "PING.GET_MBRS_RSP", "FD_ALL"),
    )
    for needed in needed_kinds:
        assert needed in kinds, f"no {needed} among the golden datagrams: capture again"
    assert any(len(d["jgroups"]["messages"]) > 1 for d in golden()), "no LIST with several messages"
    decoded = [wire.decode(data_of(d)) for d in golden()]
    firsts = []
    for dg, d in zip(decoded, golden(), strict=True):
        for m in dg.messages:
            h = m.header("UNICAST2")
            if h is not None and h.type_name == "DATA" and h.fields["first"] and m.msg_id(data_of(d)):
                firsts.append(m)
    assert firsts, "no application message opening a connection (UNICAST2 DATA first=true)"


def test_every_golden_datagram_decodes_as_the_jar_reads_it() -> None:
    for d in golden():
        data, jar = data_of(d), d["jgroups"]
        where = f"datagram n={d['n']} ({d['kind']})"
        assert "error" not in jar, f"{where}: the jar could not read it: {jar['error']}"
        dg = wire.decode(data)
        assert dg.skippable and dg.error is None, f"{where}: {dg.error}"
        assert (dg.version, dg.flags, dg.form) == (jar["version"], jar["flags"], jar["form"]), where
        if dg.form == "LIST":
            assert (dg.dest, dg.src) == (addr(jar["dest"]), addr(jar["src"])), where
        assert len(dg.messages) == len(jar["messages"]), where
        for m, jm in zip(dg.messages, jar["messages"], strict=True):
            assert (m.start, m.end, m.leading, m.flags) == (jm["start"], jm["end"], jm["leading"], jm["flags"]), where
            assert (m.dest, m.src) == (addr(jm["dest"]), addr(jm["src"])), where
            assert (m.payload[1] if m.payload else None) == jm["length"], where
            assert m.msg_id(data) == jm["msg_id"], where
            if m.presence is not None:
                assert m.presence == m.start - 1 and data[m.presence] == 1, where
            assert [(h.id, h.protocol, h.magic) for h in m.headers] == [
                (h["id"], h["protocol"], h["magic"]) for h in jm["headers"]
            ], where
            starts = [h.start for h in m.headers]
            if m.payload is not None:  # nhdrs (i16) follows the payload, then the headers
                assert starts[0] == m.payload[0] + m.payload[1] + 2, where
            assert [h.end for h in m.headers][:-1] == starts[1:] and m.headers[-1].end == m.end, where
            for h, jh in zip(m.headers, jm["headers"], strict=True):
                assert h.body == h.start + 4, where
                if "type" in jh["fields"]:
                    assert h.type == jh["fields"]["type"] and h.type_name is not None, f"{where}: {h.key}"
                expected = expected_fields(h.key, jh["fields"])
                assert normalized(h.key, h.fields) == expected, f"{where}: {h.key}: {h.fields} != {expected}"


def test_the_body_offsets_point_at_the_fields() -> None:
    """A header's body offset is where its type (or first field) is: what a u32 rule or the NFQUEUE judge reads."""
    for d in golden():
        data = data_of(d)
        for m in wire.decode(data).messages:
            for h in m.headers:
                assert int.from_bytes(data[h.start : h.start + 2], "big") == h.id
                assert int.from_bytes(data[h.start + 2 : h.body], "big") == h.magic
                if h.key == "UNICAST2.DATA":
                    assert data[h.body] == 0
                    assert int.from_bytes(data[h.body + 1 : h.body + 9], "big") == h.fields["seqno"]
                    assert int.from_bytes(data[h.body + 9 : h.body + 11], "big") == h.fields["conn_id"]
                if h.key == "NAKACK.MSG":
                    assert int.from_bytes(data[h.body + 1 : h.body + 9], "big") == h.fields["seqno"]
                if h.protocol == "STABLE":
                    assert int.from_bytes(data[h.body : h.body + 4], "big") == h.type


def test_the_wire_agrees_with_the_histories() -> None:
    """Each application message on the wire carries the seqno (and conn_id) its sender's and receivers' histories
    give it; its sender's UUID is the datagram's source; and B's first message to C opened that connection."""
    members = meta()["members"]
    uuid_of = {n: wire.Uuid(*m["uuid"]) for n, m in members.items()}
    on_wire: dict[str, list[tuple[dict[str, Any], wire.Message, wire.Header]]] = {}
    for d in golden():
        data = data_of(d)
        for m in wire.decode(data).messages:
            msg_id = m.msg_id(data)
            h = m.header("UNICAST2") or m.header("NAKACK")
            if msg_id is not None and h is not None:
                on_wire.setdefault(msg_id, []).append((d, m, h))
    checked = 0
    for events in histories().values():
        for e in events:
            if e["event"] not in ("send", "deliver") or e["msg_id"] not in on_wire:
                continue
            for d, m, h in on_wire[e["msg_id"]]:
                assert h.fields["seqno"] == e["seqno"], (e, h)
                sender = e["sender"]
                assert m.src == uuid_of[sender] and d["src"] == sender, (e, d["n"])
                if e["kind"] == "unicast":
                    assert h.key == "UNICAST2.DATA" and h.fields["conn_id"] == e["conn_id"], (e, h)
                    assert d["dst"] == e["dest"] and m.dest == uuid_of[e["dest"]]
                else:
                    assert h.key == "NAKACK.MSG" and d["dst"] == "*" and m.dest is None
                if e["event"] == "send":
                    assert d["t"] >= e["t"], "a datagram on the wire before its send line's instant"
                checked += 1
    sends = [e for evs in histories().values() for e in evs if e["event"] == "send"]
    assert sends and all(e["msg_id"] in on_wire for e in sends), "a sent message never seen on the wire"
    assert checked > len(sends)
    first = [h for _, _, h in on_wire["B>C#1"]]
    assert first and all(h.fields["first"] for h in first)


def list_datagrams() -> list[dict[str, Any]]:
    return [d for d in golden() if d["jgroups"]["form"] == "LIST"]


def test_cutting_a_message_out_of_a_list_leaves_the_others() -> None:
    multi = [d for d in list_datagrams() if len(d["jgroups"]["messages"]) > 1]
    assert multi
    for d in list_datagrams():
        data = data_of(d)
        dg = wire.decode(data)
        for i, gone in enumerate(dg.messages):
            cut = wire.cut(data, dg, i)
            assert len(cut) == len(data) - (gone.end - gone.presence)
            rest = wire.decode(cut)
            assert rest.skippable, rest.error
            kept = [m for j, m in enumerate(dg.messages) if j != i]
            assert [m.msg_id(cut) for m in rest.messages] == [m.msg_id(data) for m in kept]
            assert [[(h.key, h.fields) for h in m.headers] for m in rest.messages] == [
                [(h.key, h.fields) for h in m.headers] for m in kept
            ]
            assert (rest.dest, rest.src, rest.flags) == (dg.dest, dg.src, dg.flags)
            if len(dg.messages) == 1:  # the only message cut: an empty bundle, still a valid LIST
                assert rest.messages == [] and cut[-1] == 0


def test_cut_refuses_what_must_be_dropped_whole() -> None:
    single = next(d for d in golden() if d["jgroups"]["form"] == "SINGLE")
    data = data_of(single)
    with pytest.raises(ValueError, match="SINGLE"):
        wire.cut(data, wire.decode(data), 0)
    bad = data_of(list_datagrams()[0])[:-5]
    with pytest.raises(ValueError, match="cannot be walked"):
        wire.cut(bad, wire.decode(bad), 0)


@pytest.mark.jgroups
@pytest.mark.skipif(jgroups.missing() is not None, reason=str(jgroups.missing()))
def test_the_jar_reads_the_cut_datagrams(jgroups_built: None) -> None:
    from foreign.jgroups.capture import decode_with_jar

    cuts, expected = [], []
    for d in list_datagrams():
        data = data_of(d)
        dg = wire.decode(data)
        for i in range(len(dg.messages)):
            cuts.append(wire.cut(data, dg, i))
            expected.append([m.msg_id(data) for j, m in enumerate(dg.messages) if j != i])
    for jar, want in zip(decode_with_jar(cuts), expected, strict=True):
        assert "error" not in jar and jar["trailing"] == 0, jar
        assert [m["msg_id"] for m in jar["messages"]] == want


def test_an_unknown_header_magic_cannot_be_skipped() -> None:
    d = next(d for d in golden() if d["kind"] == "SINGLE [UNICAST2.DATA UDP]")
    data = bytearray(data_of(d))
    dg = wire.decode(bytes(data))
    h = dg.messages[0].headers[1]  # the UDP header, after UNICAST2's
    data[h.start + 2 : h.start + 4] = (999).to_bytes(2, "big")
    bad = wire.decode(bytes(data))
    assert not bad.skippable
    assert bad.error == f"cannot skip: unknown header magic 999 (protocol id 21) at offset {h.start}"
    assert [x.key for x in bad.messages[0].headers] == ["UNICAST2.DATA"]  # what came before is there
    assert "cannot skip" in wire.describe(bad)


def test_other_address_classes_and_versions_are_reported_not_raised() -> None:
    d = next(d for d in golden() if d["kind"] == "SINGLE [UNICAST2.DATA UDP]")
    data = bytearray(data_of(d))
    data[5] = 0  # the dest address's flags: neither UUID nor IpAddress, a class written with its magic
    bad = wire.decode(bytes(data))
    assert not bad.skippable and bad.error.startswith("cannot skip: address class with magic")
    data = bytearray(data_of(d))
    data[0:2] = b"\x13\x03"
    assert wire.decode(bytes(data)).error == "version 0x1303, not JGroups 2.12 (0x1302)"
    assert wire.decode(b"\x13").error.startswith("truncated")


def test_truncated_and_random_input_never_raises() -> None:
    rng = random.Random(7)
    for d in golden()[:40]:
        data = data_of(d)
        for n in range(len(data)):
            dg = wire.decode(data[:n])
            assert dg.error, (d["n"], n)
        for _ in range(20):
            flipped = bytearray(data)
            flipped[rng.randrange(3, len(data))] = rng.randrange(256)
            wire.decode(bytes(flipped))  # any result, never an exception
    for _ in range(2000):
        wire.decode(b"\x13\x02" + rng.randbytes(rng.randrange(0, 200)))


def test_decoding_is_struct_speed() -> None:
    """Tens of microseconds per datagram (scapy takes 0.1-0.8 ms): the NFQUEUE judge can use it in its hot path."""
    datagrams = [data_of(d) for d in golden()]
    start = time.perf_counter()
    rounds = 20
    for _ in range(rounds):
        for data in datagrams:
            wire.decode(data)
    per = (time.perf_counter() - start) / (rounds * len(datagrams))
    assert per < 200e-6, f"{per * 1e6:.1f} us per datagram"


def test_the_header_table() -> None:
    assert wire.BY_PROTOCOL["UNICAST2"].type_id("XMIT_REQ") == 1
    with pytest.raises(KeyError, match="UNICAST2 has no type 'ACK'"):
        wire.BY_PROTOCOL["UNICAST2"].type_id("ACK")
    assert wire.BY_MAGIC[54].protocol in ("UFC", "MFC")  # one header class, two protocols
    assert len({h.id for h in wire.HEADERS}) == len(wire.HEADERS)


def test_the_capture_named_what_its_members_logged() -> None:
    """capture.json and the histories describe the same run: every member started once and stopped last, and every
    history line passes the history schema."""
    hs = histories()
    assert sorted(hs) == sorted(meta()["members"])
    for name, events in hs.items():
        assert events[0]["event"] == "start" and events[-1]["event"] == "stop", name
        assert [p for e in events for p in member_problems(e)] == [], name
