package chaosbed.jgroups;

import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import chaosbed.member.Json;

import org.jgroups.Address;
import org.jgroups.Header;
import org.jgroups.Message;
import org.jgroups.conf.ClassConfigurator;
import org.jgroups.stack.IpAddress;
import org.jgroups.util.Util;

/**
 * Decodes JGroups 2.12 datagrams with the jar's own readers: the reference the Python wire decoder
 * (chaos/profiles/jgroups212.py) is tested against, and the "known meaning" of the golden datagrams in
 * tests/fixtures/jgroups212/.
 *
 * <pre>
 *   java -cp jgroups.jar:CLASSES chaosbed.jgroups.Decode &lt; HEXLINES
 * </pre>
 *
 * Reads one datagram per line (the UDP payload in hex) and writes one JSON line per datagram: {@code version},
 * {@code flags}, {@code form} (SINGLE | LIST), for a LIST its {@code dest} and {@code src}, and {@code messages}, each
 * with {@code start}/{@code end} (byte offsets of the message: from its leading byte to the end of its last header;
 * in a LIST its presence byte is at start - 1), {@code leading}, {@code flags}, {@code dest}, {@code src},
 * {@code length} (payload bytes, null without a payload), {@code msg_id} (chaosbed's, or null) and {@code headers} in
 * wire order: {@code id}, {@code protocol}, {@code magic}, {@code class}, {@code text} (the header's toString) and
 * {@code fields} (its instance fields by reflection, nested objects too). Addresses are rendered as
 * {@code {"uuid": [most, least]}}, {@code {"ip": "a.b.c.d", "port": n}} or {@code {"class": ..., "text": ...}};
 * a LIST's messages get its dest, and its src where they have none, as TP does.
 * A datagram the jar cannot read gets {@code {"error": ...}} with what was read so far. The parsing follows TP's
 * (version, flags; a LIST is dest, src, then presence byte + Message.readFrom until a false presence byte).
 */
public final class Decode {
    private Decode() {}

    /** A ByteArrayInputStream that tells how far it has read. */
    private static final class Counting extends ByteArrayInputStream {
        Counting(byte[] buf) {
            super(buf);
        }

        int position() {
            return pos;
        }
    }

    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            out.println(Json.write(decode(hex(line))));
        }
        out.flush();
    }

    static byte[] hex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    static Map<String, Object> decode(byte[] data) {
        Map<String, Object> out = new LinkedHashMap<>();
        List<Object> messages = new ArrayList<>();
        Counting bytes = new Counting(data);
        DataInputStream in = new DataInputStream(bytes);
        try {
            out.put("version", (int) in.readShort());
            byte flags = in.readByte();
            out.put("flags", (int) flags);
            boolean list = (flags & 1) != 0;
            out.put("form", list ? "LIST" : "SINGLE");
            out.put("messages", messages);
            if (!list) {
                messages.add(message(bytes, in, data, null, null));
            } else {
                Address dest = Util.readAddress(in);
                Address src = Util.readAddress(in);
                out.put("dest", address(dest));
                out.put("src", address(src));
                while (in.readBoolean()) {
                    messages.add(message(bytes, in, data, dest, src));
                }
            }
            out.put("trailing", bytes.available());
        } catch (Exception e) {
            out.put("messages", messages);
            out.put("error", e.toString());
        }
        return out;
    }

    /** One message; in a LIST it gets the list's dest, and its src when it has none, as TP does. */
    private static Map<String, Object> message(Counting bytes, DataInputStream in, byte[] data, Address listDest,
            Address listSrc) throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        int start = bytes.position();
        m.put("start", start);
        m.put("leading", data[start] & 0xff);
        Message msg = new Message(false);
        msg.readFrom(in);
        if (listDest != null || listSrc != null) {
            msg.setDest(listDest);
            if (msg.getSrc() == null) {
                msg.setSrc(listSrc);
            }
        }
        m.put("end", bytes.position());
        m.put("flags", msg.getFlags() & 0xff);
        m.put("dest", address(msg.getDest()));
        m.put("src", address(msg.getSrc()));
        boolean hasPayload = (data[start] & 4) != 0;
        m.put("length", hasPayload ? msg.getLength() : null);
        m.put("msg_id", hasPayload ? Member.msgIdOf(msg.getRawBuffer(), msg.getOffset(), msg.getLength()) : null);
        List<Object> headers = new ArrayList<>();
        Field hf = Message.class.getDeclaredField("headers");
        hf.setAccessible(true);
        org.jgroups.util.Headers hs = (org.jgroups.util.Headers) hf.get(msg);
        short[] ids = hs.getRawIDs();
        Header[] hdrs = hs.getRawHeaders();
        for (int i = 0; i < ids.length; i++) {
            if (ids[i] <= 0 || hdrs[i] == null) {
                continue; // a free slot
            }
            Map<String, Object> h = new LinkedHashMap<>();
            h.put("id", (int) ids[i]);
            Class<?> protocol = ClassConfigurator.getProtocol(ids[i]);
            h.put("protocol", protocol == null ? null : protocol.getSimpleName());
            h.put("magic", (int) ClassConfigurator.getMagicNumber(hdrs[i].getClass()));
            h.put("class", hdrs[i].getClass().getName());
            h.put("text", hdrs[i].toString());
            h.put("fields", fields(hdrs[i], 0));
            headers.add(h);
        }
        m.put("headers", headers);
        return m;
    }

    static Object address(Address a) {
        if (a == null) {
            return null;
        }
        Map<String, Object> m = new LinkedHashMap<>();
        if (a.getClass() == org.jgroups.util.UUID.class) {
            org.jgroups.util.UUID u = (org.jgroups.util.UUID) a;
            List<Object> pair = new ArrayList<>();
            pair.add(u.getMostSignificantBits());
            pair.add(u.getLeastSignificantBits());
            m.put("uuid", pair);
        } else if (a instanceof IpAddress) {
            InetAddress ip = ((IpAddress) a).getIpAddress();
            m.put("ip", ip == null ? null : ip.getHostAddress());
            m.put("port", ((IpAddress) a).getPort());
        } else {
            m.put("class", a.getClass().getName());
            m.put("text", a.toString());
        }
        return m;
    }

    /** An object's instance fields (down to JGroups' own classes), for the JSON output. */
    static Object fields(Object o, int depth) {
        if (o == null || o instanceof Number || o instanceof Boolean || o instanceof String) {
            return o;
        }
        if (o instanceof Character) {
            return o.toString();
        }
        if (o instanceof Address) {
            return address((Address) o);
        }
        if (o instanceof byte[]) {
            StringBuilder b = new StringBuilder();
            for (byte x : (byte[]) o) {
                b.append(String.format("%02x", x & 0xff));
            }
            return b.toString();
        }
        if (depth > 8) {
            return o.toString();
        }
        if (o instanceof Collection) {
            List<Object> l = new ArrayList<>();
            for (Object x : (Collection<?>) o) {
                l.add(fields(x, depth + 1));
            }
            return l;
        }
        if (o instanceof Map) {
            List<Object> l = new ArrayList<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                List<Object> pair = new ArrayList<>();
                pair.add(fields(e.getKey(), depth + 1));
                pair.add(fields(e.getValue(), depth + 1));
                l.add(pair);
            }
            return l;
        }
        if (!o.getClass().getName().startsWith("org.jgroups.")) {
            return o.toString();
        }
        Map<String, Object> m = new LinkedHashMap<>();
        for (Class<?> k = o.getClass(); k != null && k != Object.class && k != Header.class; k = k.getSuperclass()) {
            for (Field f : k.getDeclaredFields()) {
                if (Modifier.isStatic(f.getModifiers()) || f.isSynthetic()) {
                    continue;
                }
                try {
                    f.setAccessible(true);
                    m.putIfAbsent(f.getName(), fields(f.get(o), depth + 1));
                } catch (ReflectiveOperationException | RuntimeException e) {
                    m.putIfAbsent(f.getName(), "<" + e + ">");
                }
            }
        }
        return m;
    }
}
