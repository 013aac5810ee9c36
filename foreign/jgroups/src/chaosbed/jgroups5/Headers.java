package chaosbed.jgroups5;

import java.lang.reflect.Method;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.jgroups.Header;
import org.jgroups.Message;
import org.jgroups.stack.Protocol;
import org.jgroups.stack.ProtocolStack;

/**
 * Reads the real protocol fields of a message: the seqno and conn_id of its UNICAST3 or UNICAST4 header, the seqno of
 * its NAKACK2 (or NAKACK3, NAKACK4) header, and each header's type. JGroups leaves the headers on the Message object:
 * on a sent message once {@code ch.send} has returned, on a delivered one as it came off the wire.
 *
 * <p>The header classes are found by the protocols' names in the stack and read through their public accessors
 * ({@code type()}/{@code getType()}, {@code seqno()}/{@code getSeqno()}, {@code connId()}), looked up by reflection
 * once per class: so the member compiles against the core API alone and runs on every 5.x release, whichever header
 * classes a release has (UnicastHeader and NakAckHeader exist from 5.4 on).
 */
public final class Headers {
    /** The unicast protocols this member reads, in the order it looks for them; the multicast ones. */
    static final String[] UNICAST = {"UNICAST3", "UNICAST4"};
    static final String[] MULTICAST = {"NAKACK2", "NAKACK4", "NAKACK3"};
    /** Header types: DATA of UnicastHeader3/UnicastHeader; MSG and XMIT_RSP of NakAckHeader2/NakAckHeader. */
    static final byte DATA = 0;
    static final byte MSG = 1;
    static final byte XMIT_RSP = 3;

    /** The fields of a message's reliable-delivery header. */
    public static final class Fields {
        public final String kind; // "unicast" | "multicast"
        public final long seqno;
        public final Integer connId; // null for multicast

        Fields(String kind, long seqno, Integer connId) {
            this.kind = kind;
            this.seqno = seqno;
            this.connId = connId;
        }
    }

    /** One protocol's header: its id in the stack and the accessors of its class. */
    public static final class Reader {
        public final String protocol;
        public final short id;
        public final boolean unicast;
        private final Map<Class<?>, Method[]> accessors = new ConcurrentHashMap<>();

        Reader(String protocol, short id, boolean unicast) {
            this.protocol = protocol;
            this.id = id;
            this.unicast = unicast;
        }

        public Header header(Message msg) {
            return msg.getHeader(id);
        }

        private Method[] of(Header h) {
            return accessors.computeIfAbsent(h.getClass(), c -> new Method[] {
                method(c, "type", "getType"), method(c, "seqno", "getSeqno"),
                unicast ? method(c, "connId", "getConnId") : null});
        }

        public byte type(Header h) {
            return (Byte) call(of(h)[0], h);
        }

        public long seqno(Header h) {
            return (Long) call(of(h)[1], h);
        }

        public int connId(Header h) {
            return (Short) call(of(h)[2], h);
        }

        private static Method method(Class<?> c, String... names) {
            for (String n : names) {
                try {
                    return c.getMethod(n);
                } catch (NoSuchMethodException e) {
                    // the next name
                }
            }
            throw new IllegalStateException(c.getName() + " has none of the accessors " + String.join(", ", names)
                    + " (a JGroups release this member does not know)");
        }

        private static Object call(Method m, Header h) {
            try {
                return m.invoke(h);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("cannot read " + m + ": " + e);
            }
        }
    }

    public final Reader unicast;
    public final Reader multicast;

    /** IllegalStateException when the stack lacks a reliable unicast or multicast protocol this member reads. */
    public Headers(ProtocolStack stack) {
        unicast = find(stack, UNICAST, true);
        multicast = find(stack, MULTICAST, false);
    }

    private static Reader find(ProtocolStack stack, String[] names, boolean unicast) {
        for (String name : names) {
            Protocol p = stack.findProtocol(name);
            if (p != null) {
                return new Reader(name, p.getId(), unicast);
            }
        }
        throw new IllegalStateException("the stack has no " + String.join(", ", names).replaceAll(", (\\w+)$", " or $1")
                + ": chaosbed's history needs the seqnos of its " + (unicast ? "unicasts" : "multicasts"));
    }

    /** The message's unicast DATA or multicast MSG/XMIT_RSP fields, or null if it has neither. */
    public Fields of(Message msg) {
        Header h = unicast.header(msg);
        if (h != null && unicast.type(h) == DATA) {
            return new Fields("unicast", unicast.seqno(h), unicast.connId(h));
        }
        Header n = multicast.header(msg);
        if (n != null) {
            byte t = multicast.type(n);
            if (t == MSG || t == XMIT_RSP) {
                return new Fields("multicast", multicast.seqno(n), null);
            }
        }
        return null;
    }
}
