package chaosbed.jgroups5;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

import org.jgroups.Address;
import org.jgroups.Header;
import org.jgroups.Message;
import org.jgroups.stack.Protocol;
import org.jgroups.util.MessageBatch;

/**
 * An observer placed right below a reliable unicast or multicast protocol (UNICAST3/4, NAKACK2/3/4): it passes every
 * message on unchanged and counts the protocol's own messages by header type and direction (the jar's managed
 * attributes have no count of SEND_FIRST_SEQNOs, HIGHEST_SEQNOs or CLOSEs), and it writes the history's control
 * events as chaosbed's own member does: {@code sync} for every SEND_FIRST_SEQNO sent, {@code xmit} for every
 * retransmission sent (a unicast DATA at or below the highest seqno already sent on its connection; a multicast
 * XMIT_RSP, or a MSG of another sender or at or below our own highest). {@code control_per_heal} bounds them.
 */
final class Tap extends Protocol {
    static final String[] UNICAST_TYPES = {"DATA", "ACK", "SEND_FIRST_SEQNO", "XMIT_REQ", "CLOSE"};
    static final String[] MULTICAST_TYPES = {"0", "MSG", "XMIT_REQ", "XMIT_RSP", "HIGHEST_SEQNO", "ACK"};

    /** What the tap reports to the member. */
    interface Events {
        void control(String event, Object... kv);

        String nameOf(Address a);

        Address self();

        /** Every message with the protocol's header, before it goes on down (the member's send line: FirstSend). */
        void down(Message msg);
    }

    private final Headers.Reader reader;
    private final Events events;
    private final String[] types;
    private final LongAdder[] sent;
    private final LongAdder[] received;
    private final LongAdder otherSent = new LongAdder();
    private final LongAdder otherReceived = new LongAdder();
    /** Unicast: "dest address/conn_id" -> the highest DATA seqno sent on it; multicast: our own highest, as "*". */
    private final Map<String, Long> highest = new ConcurrentHashMap<>();

    Tap(Headers.Reader reader, Events events) {
        this.reader = reader;
        this.events = events;
        this.types = reader.unicast ? UNICAST_TYPES : MULTICAST_TYPES;
        this.sent = adders(types.length);
        this.received = adders(types.length);
    }

    private static LongAdder[] adders(int n) {
        LongAdder[] a = new LongAdder[n];
        for (int i = 0; i < n; i++) {
            a[i] = new LongAdder();
        }
        return a;
    }

    String protocol() {
        return reader.protocol;
    }

    @Override
    public Object down(Message msg) {
        Header h = reader.header(msg);
        if (h != null) {
            try {
                events.down(msg);
                sentOne(msg, h);
            } catch (RuntimeException e) {
                System.err.println("chaosbed-jgroups5: tap " + reader.protocol + ": " + e);
            }
        }
        return down_prot.down(msg);
    }

    private void sentOne(Message msg, Header h) {
        byte type = reader.type(h);
        count(type, sent, otherSent);
        if (reader.unicast) {
            if (type == 2) {
                events.control("sync", "peer", events.nameOf(msg.getDest()), "conn_id", null);
            } else if (type == Headers.DATA) {
                long seqno = reader.seqno(h);
                int conn = reader.connId(h);
                String key = msg.getDest() + "/" + conn;
                Long top = highest.get(key);
                if (top != null && seqno <= top) {
                    events.control("xmit", "peer", events.nameOf(msg.getDest()), "conn_id", conn, "seqno", seqno);
                } else {
                    highest.put(key, seqno);
                }
            }
            return;
        }
        if (type == Headers.XMIT_RSP || type == Headers.MSG) {
            long seqno = reader.seqno(h);
            Address src = msg.getSrc();
            boolean own = src == null || src.equals(events.self());
            Long top = highest.get("*");
            if (type == Headers.MSG && own && (top == null || seqno > top)) {
                highest.put("*", seqno);
                return;
            }
            events.control("xmit", "peer", msg.getDest() == null ? null : events.nameOf(msg.getDest()), "sender",
                    events.nameOf(own ? events.self() : src), "seqno", seqno);
        }
    }

    private static void count(byte type, LongAdder[] by, LongAdder other) {
        if (type >= 0 && type < by.length) {
            by[type].increment();
        } else {
            other.increment();
        }
    }

    @Override
    public Object up(Message msg) {
        received(msg);
        return up_prot.up(msg);
    }

    @Override
    public void up(MessageBatch batch) {
        for (Message msg : batch) {
            received(msg);
        }
        up_prot.up(batch);
    }

    private void received(Message msg) {
        Header h = reader.header(msg);
        if (h != null) {
            try {
                count(reader.type(h), received, otherReceived);
            } catch (RuntimeException e) {
                System.err.println("chaosbed-jgroups5: tap " + reader.protocol + ": " + e);
            }
        }
    }

    /** {"sent": {"DATA": n, ...}, "received": {...}}: every type of the header, zeros included. */
    Map<String, Object> counters() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("sent", byType(sent, otherSent));
        out.put("received", byType(received, otherReceived));
        return out;
    }

    private Map<String, Object> byType(LongAdder[] by, LongAdder other) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < types.length; i++) {
            if (!types[i].equals("0")) {
                m.put(types[i], by[i].sum());
            }
        }
        if (!reader.unicast && reader.protocol.equals("NAKACK2")) {
            m.remove("ACK"); // NakAckHeader2 has no ACK
        }
        m.put("other", other.sum());
        return m;
    }
}
