package chaosbed.member;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/** chaosbed's payload (node/payload.py) and the names of member incarnations ("B", "B/2"). */
public final class Payload {
    private Payload() {}

    /** The msg_id, a NUL byte, then 'x' up to size bytes (just the msg_id and its NUL when size is smaller). */
    public static byte[] of(String msgId, int size) {
        byte[] id = (msgId + "\0").getBytes(StandardCharsets.UTF_8);
        if (id.length >= size) {
            return id;
        }
        byte[] p = Arrays.copyOf(id, size);
        Arrays.fill(p, id.length, size, (byte) 'x');
        return p;
    }

    /** The msg_id of a payload (the bytes before the first NUL, as UTF-8), or null for a payload that has none. */
    public static String msgIdOf(byte[] buf, int offset, int length) {
        if (buf == null) {
            return null;
        }
        for (int i = offset; i < offset + length; i++) {
            if (buf[i] == 0) {
                if (i == offset) {
                    return null;
                }
                try {
                    return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                            .decode(ByteBuffer.wrap(buf, offset, i - offset)).toString();
                } catch (CharacterCodingException e) {
                    return null;
                }
            }
        }
        return null;
    }

    /**
     * The sender's address as its message id names it ("D/2" of "D/2>C#80"), or null: what a receiver that does not
     * know the sender's logical name yet (a restarted member before discovery tells it) writes instead of a UUID.
     */
    public static String senderOf(String msgId) {
        int arrow = msgId == null ? -1 : msgId.indexOf('>');
        return arrow > 0 ? msgId.substring(0, arrow) : null;
    }

    /** The member name of an address ("B" for "B/2"). */
    public static String nameOf(String address) {
        int slash = address.indexOf('/');
        return slash < 0 ? address : address.substring(0, slash);
    }

    /** The incarnation of an address (1 for "B", 2 for "B/2", 0 for a malformed one). */
    public static int incarnationOf(String address) {
        int slash = address.indexOf('/');
        if (slash < 0) {
            return 1;
        }
        try {
            return Integer.parseInt(address.substring(slash + 1));
        } catch (NumberFormatException e) {
            return 0;
        }
    }
}
