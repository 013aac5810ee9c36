package chaosbed.jgroups5;

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

import org.jgroups.Address;
import org.jgroups.Header;
import org.jgroups.Message;
import org.jgroups.MessageFactory;
import org.jgroups.conf.ClassConfigurator;
import org.jgroups.stack.IpAddress;
import org.jgroups.util.Util;

import chaosbed.member.Json;
import chaosbed.member.Payload;

/**
 * Decodes JGroups 5 datagrams with the jar's own readers: the reference the Python wire decoder
 * (chaos/profiles/jgroups5.py) is tested against, and the "known meaning" of the golden datagrams in
 * tests/fixtures/jgroups5/.
 *
 * <pre>
 *   java -cp jgroups-5.x.jar:CLASSES chaosbed.jgroups5.Decode &lt; HEXLINES
 * </pre>
 *
 * Reads one datagram per line (the UDP payload in hex) and writes one JSON line per datagram: {@code version},
 * {@code flags}, {@code form} (SINGLE | LIST), for a LIST its {@code dest}, {@code src}, {@code cluster} and
 * {@code count}, and {@code messages}, each with {@code start}/{@code end} (byte offsets: from its type to the end of
 * its payload), {@code type} and {@code class} (the message class), {@code leading}, {@code flags}, {@code dest},
 * {@code src}, {@code length} (bytes of an array payload, else null), {@code msg_id} (chaosbed's, or null),
 * {@code object} (an ObjectMessage's object, a LongMessage's value) and {@code headers} in wire order: {@code start},
 * {@code end}, {@code id}, {@code protocol}, {@code magic}, {@code class}, {@code text} (the header's toString) and
 * {@code fields} (its instance fields by reflection). The headers are read a second time from the message's start
 * with the jar's header readers (ClassConfigurator.create(magic).readFrom) for their offsets; the message itself by
 * Message.readFrom, as TP's Util.readMessage and readMessageList do. Addresses are {@code {"uuid": [most, least]}},
 * {@code {"ip": "a.b.c.d", "port": n}} or {@code {"class": ..., "text": ...}}; a LIST's messages get its dest, and
 * its src where they have none. A datagram the jar cannot read gets {@code {"error": ...}} with what was read so far.
 */
public final class Decode {
    private Decode() {}

    /** A ByteArrayInputStream that tells how far it has read. */
    private static final class Counting extends ByteArrayInputStream {
        Counting(byte[] buf, int at) {
            super(buf);
            pos = at;
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
            if (!line.isEmpty()) {
                out.println(Json.write(decode(hex(line))));
            }
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
        Counting bytes = new Counting(data, 0);
        DataInputStream in = new DataInputStream(bytes);
        try {
            out.put("version", (int) in.readShort() & 0xffff);
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
                short len = in.readShort();
                byte[] cluster = len >= 0 ? new byte[len] : null;
                if (cluster != null) {
                    in.readFully(cluster);
                }
                out.put("cluster", cluster == null ? null : new String(cluster, StandardCharsets.ISO_8859_1));
                int count = in.readInt();
                out.put("count", count);
                for (int i = 0; i < count; i++) {
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
        short type = in.readShort();
        m.put("type", (int) type);
        Message msg = MessageFactory.create(type);
        m.put("class", msg.getClass().getSimpleName());
        m.put("leading", data[start + 2] & 0xff);
        List<Object> headers = headers(data, start + 2);
        msg.readFrom(in);
        if (listDest != null || listSrc != null) {
            msg.setDest(listDest);
            if (msg.getSrc() == null) {
                msg.setSrc(listSrc);
            }
        }
        m.put("end", bytes.position());
        m.put("flags", msg.getFlags() & 0xffff);
        m.put("dest", address(msg.getDest()));
        m.put("src", address(msg.getSrc()));
        if (msg.hasArray() && msg.hasPayload()) { // a BytesMessage without one (length -1) has an array too
            m.put("length", msg.getLength());
            m.put("msg_id", Payload.msgIdOf(msg.getArray(), msg.getOffset(), msg.getLength()));
            m.put("object", null);
        } else {
            m.put("length", null);
            m.put("msg_id", null);
            m.put("object", msg.hasPayload() && !msg.hasArray() ? fields(msg.getObject(), 0) : null);
        }
        m.put("headers", headers);
        return m;
    }

    /** The headers of the message whose leading byte is at data[at], read with the jar's header readers. */
    private static List<Object> headers(byte[] data, int at) throws Exception {
        Counting b = new Counting(data, at);
        DataInputStream in = new DataInputStream(b);
        byte leading = in.readByte();
        in.readShort();
        if ((leading & 1) != 0) {
            Util.readAddress(in);
        }
        if ((leading & 2) != 0) {
            Util.readAddress(in);
        }
        List<Object> out = new ArrayList<>();
        int n = in.readShort();
        for (int i = 0; i < n; i++) {
            Map<String, Object> h = new LinkedHashMap<>();
            int start = b.position();
            short id = in.readShort();
            short magic = in.readShort();
            Header hdr = ClassConfigurator.create(magic);
            hdr.readFrom(in);
            h.put("start", start);
            h.put("end", b.position());
            h.put("id", (int) id);
            Class<?> protocol = ClassConfigurator.getProtocol(id);
            h.put("protocol", protocol == null ? null : protocol.getSimpleName());
            h.put("magic", (int) magic);
            h.put("class", hdr.getClass().getName());
            h.put("text", hdr.toString());
            h.put("fields", fields(hdr, 0));
            out.add(h);
        }
        return out;
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
        if (o instanceof Character || o instanceof Enum) {
            return o instanceof Enum ? ((Enum<?>) o).name() : o.toString();
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
        if (o instanceof long[]) {
            List<Object> l = new ArrayList<>();
            for (long x : (long[]) o) {
                l.add(x);
            }
            return l;
        }
        if (depth > 8) {
            return o.toString();
        }
        if (o instanceof Object[]) {
            List<Object> l = new ArrayList<>();
            for (Object x : (Object[]) o) {
                l.add(fields(x, depth + 1));
            }
            return l;
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
