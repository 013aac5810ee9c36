package chaosbed.jgroups3;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.jgroups.Address;
import org.jgroups.Event;
import org.jgroups.Header;
import org.jgroups.Message;
import org.jgroups.stack.Protocol;

/**
 * An observer placed right below a reliable unicast or multicast protocol of a 3.x stack (UNICAST2, UNICAST3,
 * NAKACK2): it passes every event on unchanged and counts the protocol's own messages by header type and direction
 * (the jar's managed attributes have no count of SEND_FIRST_SEQNOs or STABLEs), and it writes the history's control
 * events as chaosbed's own member does: {@code sync} for every SEND_FIRST_SEQNO sent, {@code xmit} for every
 * retransmission sent (a unicast DATA at or below the highest seqno already sent on its connection; a multicast
 * XMIT_RSP, or a MSG of another sender or at or below our own highest).
 *
 * <p>3.x protocols take events, not messages. From 3.3 the transport passes message batches up; the default
 * {@code Protocol.up(MessageBatch)} asks {@link #accept} of each message, and this tap counts it there and answers
 * false, so the batch goes on whole (3.2 has no batches: every message comes through {@link #up(Event)}).
 */
final class Tap extends Protocol {
    static final String[] UNICAST2_TYPES = {"DATA", "XMIT_REQ", "SEND_FIRST_SEQNO", "STABLE", "ACK"};
    static final String[] UNICAST3_TYPES = {"DATA", "ACK", "SEND_FIRST_SEQNO", "XMIT_REQ", "CLOSE"};
    static final String[] NAKACK2_TYPES = {"0", "MSG", "XMIT_REQ", "XMIT_RSP"};

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
    private final AtomicLong[] sent;
    private final AtomicLong[] received;
    private final AtomicLong otherSent = new AtomicLong();
    private final AtomicLong otherReceived = new AtomicLong();
    /** Unicast: "dest address/conn_id" -> the highest DATA seqno sent on it; multicast: our own highest, as "*". */
    private final Map<String, Long> highest = new ConcurrentHashMap<>();

    Tap(Headers.Reader reader, Events events) {
        this.reader = reader;
        this.events = events;
        this.types = !reader.unicast ? NAKACK2_TYPES
                : reader.protocol.equals("UNICAST2") ? UNICAST2_TYPES : UNICAST3_TYPES;
        this.sent = counters(types.length);
        this.received = counters(types.length);
    }

    private static AtomicLong[] counters(int n) {
        AtomicLong[] a = new AtomicLong[n];
        for (int i = 0; i < n; i++) {
            a[i] = new AtomicLong();
        }
        return a;
    }

    String protocol() {
        return reader.protocol;
    }

    @Override
    public String getName() {
        return "chaosbed-tap-" + reader.protocol;
    }

    @Override
    public Object down(Event evt) {
        if (evt.getType() == Event.MSG) {
            Message msg = (Message) evt.getArg();
            Header h = reader.header(msg);
            if (h != null) {
                try {
                    events.down(msg);
                    sentOne(msg, h);
                } catch (RuntimeException e) {
                    System.err.println("chaosbed-jgroups3: tap " + reader.protocol + ": " + e);
                }
            }
        }
        return down_prot.down(evt);
    }

    private void sentOne(Message msg, Header h) {
        byte type = reader.type(h);
        count(type, sent, otherSent);
        if (reader.unicast) {
            if (type == Headers.SEND_FIRST_SEQNO) {
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

    private static void count(byte type, AtomicLong[] by, AtomicLong other) {
        if (type >= 0 && type < by.length) {
            by[type].incrementAndGet();
        } else {
            other.incrementAndGet();
        }
    }

    @Override
    public Object up(Event evt) {
        if (evt.getType() == Event.MSG) {
            received((Message) evt.getArg());
        }
        return up_prot.up(evt);
    }

    /** A message of a batch (3.3+): counted here, and left in the batch, which goes up whole. */
    protected boolean accept(Message msg) {
        received(msg);
        return false;
    }

    private void received(Message msg) {
        Header h = reader.header(msg);
        if (h != null) {
            try {
                count(reader.type(h), received, otherReceived);
            } catch (RuntimeException e) {
                System.err.println("chaosbed-jgroups3: tap " + reader.protocol + ": " + e);
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

    private Map<String, Object> byType(AtomicLong[] by, AtomicLong other) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < types.length; i++) {
            if (!types[i].equals("0")) {
                m.put(types[i], by[i].get());
            }
        }
        m.put("other", other.get());
        return m;
    }
}
