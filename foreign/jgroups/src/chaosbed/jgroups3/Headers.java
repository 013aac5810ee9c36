package chaosbed.jgroups3;

import java.lang.reflect.AccessibleObject;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.jgroups.Header;
import org.jgroups.Message;
import org.jgroups.stack.Protocol;
import org.jgroups.stack.ProtocolStack;

/**
 * Reads the real protocol fields of a message on a JGroups 3.x stack: the seqno and conn_id of its UNICAST2 or
 * UNICAST3 header, the seqno of its NAKACK2 header, and each header's type. JGroups leaves the headers on the Message
 * object: on a sent message once {@code ch.send} has returned, on a delivered one as it came off the wire.
 *
 * <p>The header classes are found by the protocols' names in the stack and read through their public accessors
 * (UNICAST2's {@code getType()}, {@code getSeqno()}, {@code getConnId()}; UNICAST3's {@code type()}, {@code seqno()},
 * {@code connId()}; NakAckHeader2's {@code getType()}, {@code getSeqno()}), looked up by reflection once per class,
 * so the member compiles against 3.2's API and runs on releases that have UNICAST3 (3.3+) too. UNICAST3's header has
 * no type accessor before 3.6: its field {@code type} is read (the jar is in the unnamed module: no --add-opens).
 */
public final class Headers {
    /** The unicast protocols this member reads, in the order it looks for them; the multicast one. */
    static final String[] UNICAST = {"UNICAST3", "UNICAST2"};
    static final String[] MULTICAST = {"NAKACK2"};
    /** DATA is 0 in both unicast headers, SEND_FIRST_SEQNO 2; NakAckHeader2's MSG 1 and XMIT_RSP 3. */
    static final byte DATA = 0;
    static final byte SEND_FIRST_SEQNO = 2;
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
        private final Map<Class<?>, AccessibleObject[]> accessors = new ConcurrentHashMap<>();

        Reader(String protocol, short id, boolean unicast) {
            this.protocol = protocol;
            this.id = id;
            this.unicast = unicast;
        }

        public Header header(Message msg) {
            return msg.getHeader(id);
        }

        private AccessibleObject[] of(Header h) {
            return accessors.computeIfAbsent(h.getClass(), c -> new AccessibleObject[] {
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

        /** The first public accessor of these names, else the field named as the first (made accessible). */
        private static AccessibleObject method(Class<?> c, String... names) {
            for (String n : names) {
                try {
                    return c.getMethod(n);
                } catch (NoSuchMethodException e) {
                    // the next name
                }
            }
            for (Class<?> k = c; k != null && k != Object.class; k = k.getSuperclass()) {
                try {
                    Field f = k.getDeclaredField(names[0]);
                    f.setAccessible(true);
                    return f;
                } catch (NoSuchFieldException | RuntimeException e) {
                    // the superclass
                }
            }
            throw new IllegalStateException(c.getName() + " has none of the accessors " + String.join(", ", names)
                    + " (a JGroups release this member does not know)");
        }

        private static Object call(AccessibleObject a, Header h) {
            try {
                return a instanceof Method ? ((Method) a).invoke(h) : ((Field) a).get(h);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("cannot read " + a + ": " + e);
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
        throw new IllegalStateException("the stack has no " + String.join(" or ", names)
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
