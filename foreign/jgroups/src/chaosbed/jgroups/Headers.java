package chaosbed.jgroups;

import java.lang.reflect.Field;

import org.jgroups.Header;
import org.jgroups.Message;
import org.jgroups.protocols.UNICAST;
import org.jgroups.protocols.UNICAST2;
import org.jgroups.protocols.pbcast.NAKACK;
import org.jgroups.protocols.pbcast.NakAckHeader;
import org.jgroups.stack.Protocol;
import org.jgroups.stack.ProtocolStack;

/**
 * Reads the real protocol fields of an application message: the seqno and conn_id of its UNICAST2 or UNICAST header,
 * or the seqno of its NAKACK header. JGroups leaves the headers on the Message object: on a sent message once
 * {@code ch.send} has returned, on a delivered one as it came off the wire. So the history's streams are the jar's
 * own connections and seqnos.
 *
 * <p>The header classes keep conn_id (and the type) in package-private fields; they are read by reflection (the
 * jar is on the classpath, in the unnamed module, so no --add-opens is needed). seqno has a public getter.
 */
public final class Headers {
    /** The fields of a message's reliable-delivery header (seqno -1: the message has no such header). */
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

    private final short unicastId;
    private final Class<? extends Header> unicastHeader;
    private final Field unicastType;
    private final Field unicastConnId;
    private final byte dataType;
    private final short nakackId;
    public final String unicastProtocol;

    public Headers(ProtocolStack stack) {
        Protocol u2 = stack.findProtocol(UNICAST2.class);
        Protocol u1 = stack.findProtocol(UNICAST.class);
        Protocol nak = stack.findProtocol(NAKACK.class);
        if ((u2 == null) == (u1 == null) || nak == null) {
            throw new IllegalStateException("the stack must have pbcast.NAKACK and one of UNICAST2 or UNICAST");
        }
        nakackId = nak.getId();
        if (u2 != null) {
            unicastProtocol = "UNICAST2";
            unicastId = u2.getId();
            unicastHeader = UNICAST2.Unicast2Header.class;
            dataType = UNICAST2.Unicast2Header.DATA;
        } else {
            unicastProtocol = "UNICAST";
            unicastId = u1.getId();
            unicastHeader = UNICAST.UnicastHeader.class;
            dataType = UNICAST.UnicastHeader.DATA;
        }
        try {
            unicastType = unicastHeader.getDeclaredField("type");
            unicastConnId = unicastHeader.getDeclaredField("conn_id");
            unicastType.setAccessible(true);
            unicastConnId.setAccessible(true);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalStateException("this JGroups jar's " + unicastHeader.getName()
                    + " has no type/conn_id fields (not JGroups 2.12?): " + e);
        }
    }

    /** The message's unicast DATA or NAKACK MSG fields (kind unicast/multicast), or null if it has neither. */
    public Fields of(Message msg) {
        Header h = msg.getHeader(unicastId);
        if (h != null && unicastHeader.isInstance(h)) {
            try {
                if (unicastType.getByte(h) == dataType) {
                    long seqno = unicastProtocol.equals("UNICAST2") ? ((UNICAST2.Unicast2Header) h).getSeqno()
                            : ((UNICAST.UnicastHeader) h).getSeqno();
                    return new Fields("unicast", seqno, (int) unicastConnId.getShort(h));
                }
            } catch (IllegalAccessException e) {
                throw new IllegalStateException(e);
            }
        }
        Header n = msg.getHeader(nakackId);
        if (n instanceof NakAckHeader) {
            NakAckHeader nh = (NakAckHeader) n;
            if (nh.getType() == NakAckHeader.MSG || nh.getType() == NakAckHeader.XMIT_RSP) {
                return new Fields("multicast", nh.getSeqno(), null);
            }
        }
        return null;
    }
}
