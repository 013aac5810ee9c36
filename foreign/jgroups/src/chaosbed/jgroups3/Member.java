package chaosbed.jgroups3;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.jgroups.Address;
import org.jgroups.Event;
import org.jgroups.JChannel;
import org.jgroups.MergeView;
import org.jgroups.Message;
import org.jgroups.ReceiverAdapter;
import org.jgroups.Version;
import org.jgroups.View;
import org.jgroups.ViewId;
import org.jgroups.stack.IpAddress;
import org.jgroups.stack.ProtocolStack;
import org.jgroups.util.UUID;

import chaosbed.member.Config;
import chaosbed.member.ControlServer;
import chaosbed.member.FirstSend;
import chaosbed.member.History;
import chaosbed.member.Names;
import chaosbed.member.Node;
import chaosbed.member.Payload;
import chaosbed.member.Task;

/**
 * A chaosbed member running a real JGroups 3.x release: the jar's JChannel, driven through chaosbed's control contract
 * and recorded in chaosbed's history format (docs/contracts/, docs/foreign/jgroups3.md).
 *
 * <pre>
 *   java -cp jgroups-3.x.y.Final.jar:CLASSES chaosbed.jgroups3.Member [--stack NAME|FILE.xml] CONFIG.json
 * </pre>
 *
 * The channel is bound to the config's ip and port and multicast group and port (or, over TCP, finds the peers by
 * TCPPING), is named after the member's address ("B", "B/2" for incarnation 2) and joins the config's cluster. The
 * binding is done by system properties, so a user's own XML file is bound too: JGroups' own (jgroups.bind_addr,
 * jgroups.bind_port, jgroups.udp.mcast_addr, jgroups.udp.mcast_port, jgroups.tcpping.initial_hosts, which override the
 * file's values) and chaosbed's (chaosbed.ip, chaosbed.port, chaosbed.mcast_group, chaosbed.mcast_port,
 * chaosbed.initial_hosts, for ${...} in a file). The history's seqno and conn_id are the real UNICAST2/UNICAST3 and
 * NAKACK2 header fields of each sent and delivered message (Headers); taps below those protocols count their control
 * messages and write {@code sync} and {@code xmit} events (Tap); the receiver's suspect callback writes
 * {@code suspect}.
 *
 * <p>Exit: SIGTERM (or the control command shutdown) writes the last history line, {@code stop}, and halts the JVM at
 * once, without leaving the group; the control command leave disconnects first (a graceful leave: {@code left}).
 * Exit code 2: unusable arguments or config, or a stack that cannot start (the message names the file and JGroups'
 * own reason); 1: the control port cannot be bound.
 */
public final class Member extends ReceiverAdapter implements Node {
    /** FRAG2's frag_size is 60K: a larger message is fragmented, and its fragments, not it, carry the headers. */
    static final int MAX_SIZE = 60000;
    private static final Map<String, String> UNSUPPORTED = Map.of(
            "close", "a JGroups channel cannot close one unicast connection from outside its stack",
            "set", "JGroups protocol properties are set in the stack's XML, not at run time",
            "incarnation", "JGroups members learn a peer's new incarnation from their views");

    final Config cfg;
    final Stacks.Stack stack;
    final History history;
    private final String system;
    private JChannel ch;
    private Headers headers;
    private final List<Tap> taps = new ArrayList<>();
    private volatile View view;
    private volatile boolean stopping;
    private final Object exitLock = new Object();

    /** Own multicasts whose {@code ch.send} has not returned: msg_id -> deliver lines held back until the send line. */
    private final Map<String, List<String>> ownPending = new HashMap<>(); // guarded by history
    private final FirstSend firstSend = new FirstSend();
    private final Map<String, Integer> msgCounter = new HashMap<>(); // dest name ("*": multicast) -> last n
    final List<Task> tasks = new ArrayList<>(); // guarded by itself
    private final AtomicLong sent = new AtomicLong();
    private final AtomicLong delivered = new AtomicLong();
    private final AtomicLong unsequenced = new AtomicLong();
    private final AtomicLong views = new AtomicLong();
    private final AtomicLong suspects = new AtomicLong();

    Member(Config cfg, Stacks.Stack stack, History history) {
        this.cfg = cfg;
        this.stack = stack;
        this.history = history;
        this.system = "jgroups-" + release();
    }

    // --- start and stop ----------------------------------------------------------------------------------------------

    public static void main(String[] args) {
        String stackArg = null;
        String configPath = null;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--stack") && i + 1 < args.length) {
                stackArg = args[++i];
            } else if (args[i].startsWith("--stack=")) {
                stackArg = args[i].substring("--stack=".length());
            } else if (args[i].startsWith("-") || configPath != null) {
                usage("unexpected argument " + args[i]);
            } else {
                configPath = args[i];
            }
        }
        if (configPath == null) {
            usage("no config file");
        }
        if (!release().startsWith("3.")) {
            fail(2, "this member needs a JGroups 3.x jar, but the one on the classpath is " + Version.printVersion());
        }
        Config cfg = null;
        try {
            cfg = Config.load(configPath, System.getenv("CHAOSBED_TOKEN"), Stacks.DEFAULT);
        } catch (Config.ConfigError e) {
            fail(2, e.getMessage());
        }
        Stacks.Stack stack = null;
        try {
            stack = Stacks.resolve(stackArg != null ? stackArg : cfg.stack);
        } catch (IllegalArgumentException e) {
            fail(2, e.getMessage());
        }
        History history = null;
        try {
            history = new History(cfg.history, cfg.name, cfg.incarnation);
        } catch (IOException e) {
            fail(2, "cannot open the history file " + cfg.history + ": " + e);
        }
        new Member(cfg, stack, history).run();
    }

    /**
     * The jar's release, "3.6.0": read from Version.printVersion() at run time, because 3.x's Version.major, minor and
     * micro are compile-time constants (javac would inline the build release's).
     */
    static String release() {
        Matcher m = Pattern.compile("^(\\d+\\.\\d+\\.\\d+)").matcher(Version.printVersion());
        return m.find() ? m.group(1) : Version.printVersion();
    }

    private static void usage(String why) {
        fail(2, why + "\nusage: java -cp jgroups-3.x.jar:CLASSES chaosbed.jgroups3.Member [--stack NAME|FILE.xml] CONFIG"
                + "\nstacks: " + String.join(", ", Stacks.NAMES));
    }

    static void fail(int code, String message) {
        System.err.println("chaosbed-jgroups3: " + message);
        System.err.flush();
        System.exit(code);
    }

    /** "10.0.0.1[7800],10.0.0.2[7800]": every member of the config (this one included), TCPPING's initial_hosts. */
    String initialHosts() {
        List<String> hosts = new ArrayList<>();
        for (String where : cfg.peers.values()) {
            int colon = where.lastIndexOf(':');
            hosts.add(colon < 0 ? where : where.substring(0, colon) + "[" + where.substring(colon + 1) + "]");
        }
        String self = cfg.ip + "[" + cfg.port + "]";
        if (!hosts.contains(self)) {
            hosts.add(0, self);
        }
        return String.join(",", hosts);
    }

    private void bindProperties() {
        String[][] props = {
            {"java.net.preferIPv4Stack", "true"},
            {"jgroups.bind_addr", cfg.ip}, {"jgroups.bind_port", Integer.toString(cfg.port)},
            {"jgroups.udp.mcast_addr", cfg.mcastGroup}, {"jgroups.udp.mcast_port", Integer.toString(cfg.mcastPort)},
            {"jgroups.tcpping.initial_hosts", initialHosts()}, {"jgroups.tcp.port_range", "0"},
            {"chaosbed.ip", cfg.ip}, {"chaosbed.port", Integer.toString(cfg.port)},
            {"chaosbed.mcast_group", cfg.mcastGroup}, {"chaosbed.mcast_port", Integer.toString(cfg.mcastPort)},
            {"chaosbed.initial_hosts", initialHosts()},
        };
        for (String[] p : props) {
            System.setProperty(p[0], p[1]);
        }
    }

    /** The message of an exception and of its causes, JGroups' own words: "a: b: c". */
    static String reason(Throwable e) {
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            String m = t.getMessage() != null ? t.getMessage() : t.getClass().getSimpleName();
            if (b.indexOf(m) < 0) {
                b.append(b.length() == 0 ? "" : ": ").append(m);
            }
        }
        return b.toString();
    }

    private void run() {
        bindProperties();
        ServerSocket control = null;
        try { // bound before JGroups starts, so that no ephemeral port of FD_SOCK can take it
            control = new ServerSocket();
            control.setReuseAddress(true);
            control.bind(new InetSocketAddress(InetAddress.getByName(cfg.ip), cfg.port + 1), 50);
        } catch (IOException e) {
            fail(1, "cannot listen on the control port " + cfg.ip + ":" + (cfg.port + 1) + ": " + e);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> exit(0), "chaosbed-sigterm"));
        history.event("start", "address", cfg.address, "stack", system + "/" + stack.name, "transport", cfg.transport,
                "release", Version.printVersion());
        String phase = "cannot be set up";
        try (InputStream in = stack.url.openStream()) {
            ch = new JChannel(in);
            phase = "does not suit this member";
            ch.setName(cfg.address);
            if (Names.fits(cfg.address)) {
                ch.setAddressGenerator(this::carryingUuid);
            }
            ProtocolStack ps = ch.getProtocolStack();
            headers = new Headers(ps);
            addTaps(ps);
            phase = "did not start";
            ch.setReceiver(this);
            ch.connect(cfg.cluster);
        } catch (Exception e) { // JGroups' own words are in the reason; its stack trace would only bury them
            System.err.println("chaosbed-jgroups3: " + stack.describe() + " " + phase + " (JGroups " + Version.printVersion()
                    + "): " + reason(e));
            exit(2);
        }
        Object physical = ch.down(new Event(Event.GET_PHYSICAL_ADDRESS, ch.getAddress()));
        if (!(physical instanceof IpAddress) || ((IpAddress) physical).getPort() != cfg.port
                || !((IpAddress) physical).getIpAddress().getHostAddress().equals(cfg.ip)) {
            System.err.println("chaosbed-jgroups3: " + stack.describe() + ": JGroups bound to " + physical + ", not "
                    + cfg.ip + ":" + cfg.port + " (a transport with port_range=\"0\", bound by jgroups.bind_addr and "
                    + "jgroups.bind_port or ${chaosbed.ip} and ${chaosbed.port})");
            exit(2);
        }
        System.out.println("chaosbed-jgroups3: " + cfg.address + " joined " + cfg.cluster + " at " + physical + " with "
                + stack.describe() + " on JGroups " + Version.printVersion() + "; control on " + cfg.ip + ":"
                + (cfg.port + 1));
        System.out.flush();
        new ControlServer(this, control).serve(); // until the member exits
    }

    /** Taps right below the unicast and multicast protocols. */
    private void addTaps(ProtocolStack ps) throws Exception {
        Tap.Events events = new Tap.Events() {
            @Override
            public void control(String event, Object... kv) {
                history.event(event, kv);
            }

            @Override
            public String nameOf(Address a) {
                return a == null ? null : Payload.nameOf(addressOf(a));
            }

            @Override
            public Address self() {
                return ch.getAddress();
            }

            @Override
            public void down(Message msg) {
                firstSend.down(msg);
            }
        };
        for (Headers.Reader r : new Headers.Reader[] {headers.unicast, headers.multicast}) {
            Tap tap = new Tap(r, events);
            ps.insertProtocolInStack(tap, ps.findProtocol(r.protocol), ProtocolStack.BELOW);
            taps.add(tap);
        }
    }

    /**
     * Ends the incarnation: writes {@code stop} (its last line) and halts the JVM at once. No leave, no close: a
     * member that leaves at the end makes the others install views without it.
     */
    @Override
    public void exit(int code) {
        synchronized (exitLock) {
            stopping = true;
            Map<String, Object> counters;
            try {
                counters = counters();
            } catch (RuntimeException e) {
                counters = new LinkedHashMap<>();
                counters.put("error", e.toString());
            }
            history.stop(counters);
            System.out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(code);
        }
    }

    /** The control command leave: a graceful leave (ch.disconnect), a {@code left} event, then {@code stop}. */
    @Override
    public void leave() {
        Thread t = new Thread(() -> {
            stopping = true;
            try {
                ch.disconnect();
            } catch (RuntimeException e) {
                System.err.println("chaosbed-jgroups3: disconnect: " + e);
            }
            history.event("left");
            exit(0);
        }, "chaosbed-leave");
        t.setDaemon(true);
        t.start();
    }

    // --- names -------------------------------------------------------------------------------------------------------

    /** A JGroups address's logical name: the chaosbed address of that member incarnation ("B", "B/2"). */
    static String addressOf(Address a) {
        String name = UUID.get(a);
        if (name == null && a instanceof UUID) { // not named by discovery yet: the UUID may carry it (Names)
            UUID u = (UUID) a;
            name = Names.addressOf(u.getMostSignificantBits(), u.getLeastSignificantBits());
        }
        return name != null ? name : String.valueOf(a);
    }

    /** This incarnation's JGroups address: a UUID that carries its chaosbed address (Names). */
    private Address carryingUuid() {
        long[] bits = Names.bitsOf(cfg.address);
        return new UUID(bits[0], bits[1]);
    }

    static String viewId(ViewId id) {
        return addressOf(id.getCreator()) + "|" + id.getId();
    }

    Map<String, Object> describe(View v) {
        List<String> names = new ArrayList<>();
        List<String> addresses = new ArrayList<>();
        for (Address a : v.getMembers()) {
            String address = addressOf(a);
            addresses.add(address);
            names.add(Payload.nameOf(address));
        }
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("view_id", viewId(v.getViewId()));
        d.put("members", names);
        d.put("merge", v instanceof MergeView);
        d.put("addresses", addresses);
        return d;
    }

    /**
     * The address to send to for member `name`: its newest incarnation in the current view, else the newest one
     * JGroups knows a logical name of (a member outside our view, e.g. across a split); null if none.
     */
    Address resolve(String name) {
        Address best = null;
        int bestIncarnation = -1;
        View v = view;
        if (v != null) {
            for (Address a : v.getMembers()) {
                String address = addressOf(a);
                if (Payload.nameOf(address).equals(name) && Payload.incarnationOf(address) > bestIncarnation) {
                    best = a;
                    bestIncarnation = Payload.incarnationOf(address);
                }
            }
        }
        if (best != null) {
            return best;
        }
        for (Map.Entry<Address, String> e : UUID.getContents().entrySet()) {
            String address = e.getValue();
            if (address != null && Payload.nameOf(address).equals(name)
                    && Payload.incarnationOf(address) > bestIncarnation) {
                best = e.getKey();
                bestIncarnation = Payload.incarnationOf(address);
            }
        }
        return best;
    }

    // --- the control server's view of the member (Node) --------------------------------------------------------------

    @Override
    public Config config() {
        return cfg;
    }

    @Override
    public History history() {
        return history;
    }

    @Override
    public Map<String, Object> viewInfo() {
        View v = view;
        return v == null ? null : describe(v);
    }

    @Override
    public List<Task> tasks() {
        return tasks;
    }

    @Override
    public int maxSize() {
        return MAX_SIZE;
    }

    @Override
    public String system() {
        return system;
    }

    @Override
    public Map<String, String> unsupported() {
        return UNSUPPORTED;
    }

    // --- sending -----------------------------------------------------------------------------------------------------

    private synchronized int nextMessageNumber(String dest) {
        int n = msgCounter.getOrDefault(dest, 0) + 1;
        msgCounter.put(dest, n);
        return n;
    }

    @Override
    public int startTask(String kind, String dest, int count, int size, Double rate) {
        Task task = new Task(kind, dest, count, size, rate, kind.equals("unicast") ? this::sendUnicast
                : this::sendMulticast);
        int id;
        synchronized (tasks) {
            tasks.add(task);
            id = tasks.size();
        }
        Thread t = new Thread(task, "chaosbed-task-" + kind + "-" + (dest == null ? "all" : dest));
        t.setDaemon(true);
        t.start();
        return id;
    }

    private boolean sendUnicast(Task task) throws Exception {
        Address dest = resolve(task.dest);
        while (dest == null) { // not known yet (e.g. not joined yet): wait for a view or a discovery that names it
            if (stopping) {
                return false;
            }
            Thread.sleep(10);
            dest = resolve(task.dest);
        }
        if (stopping) {
            return false;
        }
        String destAddress = addressOf(dest);
        String msgId = cfg.address + ">" + task.dest + "#" + nextMessageNumber(task.dest);
        byte[] payload = Payload.of(msgId, task.size);
        Message msg = new Message(dest, null, payload);
        if (!cfg.recordMessages) { // no history line: no seqno to read back either
            ch.send(msg);
            sent.incrementAndGet();
            return true;
        }
        long t = System.nanoTime();
        Runnable line = () -> writeUnicastSend(t, task.dest, destAddress, msgId, payload.length, headers.of(msg));
        firstSend.expect(msg, line); // the tap below UNICAST2/3 writes it, before the datagram goes down
        Exception failure = null;
        try {
            ch.send(msg);
        } catch (Exception e) {
            failure = e;
        }
        Headers.Fields f = headers.of(msg);
        if (!firstSend.finish() && (f != null || failure == null)) { // numbered, or sent: it may be on the wire
            writeUnicastSend(t, task.dest, destAddress, msgId, payload.length, f);
        }
        if (failure != null) {
            throw failure;
        }
        return true;
    }

    private void writeUnicastSend(long t, String dest, String destAddress, String msgId, int size, Headers.Fields f) {
        if (f == null) {
            unsequenced.incrementAndGet();
        }
        history.write(history.line(t, "send", "kind", "unicast", "sender", cfg.name, "dest", dest, "dest_address",
                destAddress, "conn_id", f == null ? null : f.connId, "seqno", f == null ? -1 : f.seqno, "msg_id",
                msgId, "size", size));
        sent.incrementAndGet();
    }

    private boolean sendMulticast(Task task) throws Exception {
        if (stopping) {
            return false;
        }
        String msgId = cfg.address + ">*#" + nextMessageNumber("*");
        byte[] payload = Payload.of(msgId, task.size);
        Message msg = new Message(null, null, payload);
        if (!cfg.recordMessages) {
            ch.send(msg);
            sent.incrementAndGet();
            return true;
        }
        long t = System.nanoTime(); // before ch.send: the own copy may be delivered inside it, on another thread
        synchronized (history) {
            ownPending.put(msgId, new ArrayList<>());
        }
        firstSend.expect(msg, () -> writeMulticastSend(t, msgId, payload.length, headers.of(msg), true));
        Exception failure = null;
        try {
            ch.send(msg);
        } catch (Exception e) {
            failure = e;
        }
        Headers.Fields f = headers.of(msg);
        if (!firstSend.finish()) { // numbered by NAKACK2, or sent: it may be on the wire
            writeMulticastSend(t, msgId, payload.length, f, f != null || failure == null);
        }
        if (failure != null) {
            throw failure;
        }
        return true;
    }

    /** The send line (unless not {@code record}), then the own deliveries held back until it. */
    private void writeMulticastSend(long t, String msgId, int size, Headers.Fields f, boolean record) {
        synchronized (history) {
            List<String> lines = new ArrayList<>();
            if (record) {
                if (f == null) {
                    unsequenced.incrementAndGet();
                }
                lines.add(history.line(t, "send", "kind", "multicast", "sender", cfg.name, "dest", null,
                        "dest_address", null, "conn_id", null, "seqno", f == null ? -1 : f.seqno, "msg_id", msgId,
                        "size", size));
                sent.incrementAndGet();
            }
            lines.addAll(ownPending.remove(msgId));
            history.write(lines.toArray(new String[0]));
        }
    }

    // --- JGroups callbacks -------------------------------------------------------------------------------------------

    @Override
    public void receive(Message msg) {
        if (!cfg.recordMessages) {
            delivered.incrementAndGet();
            return;
        }
        byte[] buf = msg.getRawBuffer();
        String msgId = buf != null ? Payload.msgIdOf(buf, msg.getOffset(), msg.getLength()) : null;
        String byId = Payload.senderOf(msgId);
        String senderAddress = UUID.get(msg.getSrc()) == null && byId != null ? byId : addressOf(msg.getSrc());
        Headers.Fields f = headers.of(msg);
        String kind = f != null ? f.kind : msg.getDest() == null ? "multicast" : "unicast";
        delivered.incrementAndGet();
        synchronized (history) {
            String line = history.line(System.nanoTime(), "deliver", "kind", kind, "sender",
                    Payload.nameOf(senderAddress), "sender_address", senderAddress, "dest",
                    kind.equals("unicast") ? cfg.name : null, "conn_id", f == null ? null : f.connId, "seqno",
                    f == null ? -1 : f.seqno, "msg_id", msgId, "size", msg.getLength());
            List<String> held = msgId != null ? ownPending.get(msgId) : null;
            if (held != null && senderAddress.equals(cfg.address)) {
                held.add(line); // our own multicast, delivered before ch.send returned: after its send line
            } else {
                history.write(line);
            }
        }
    }

    /** JGroups 3's receiver is told of every suspicion GMS acts on (VERIFY_SUSPECT confirmed it). */
    @Override
    public void suspect(Address a) {
        suspects.incrementAndGet();
        history.event("suspect", "peer", Payload.nameOf(addressOf(a)), "peer_address", addressOf(a));
    }

    @Override
    public void viewAccepted(View v) {
        // the history line first: whoever sees the view through control (`view`, `stats`) finds it in the history
        Map<String, Object> d = describe(v);
        List<String> mergedFrom = new ArrayList<>();
        if (v instanceof MergeView) {
            for (View sub : ((MergeView) v).getSubgroups()) {
                mergedFrom.add(viewId(sub.getViewId()));
            }
        }
        history.event("view", "view_id", d.get("view_id"), "members", d.get("members"), "merge", d.get("merge"),
                "addresses", d.get("addresses"), "merged_from", mergedFrom);
        view = v;
        views.incrementAndGet();
    }

    // --- counters ----------------------------------------------------------------------------------------------------

    /** The stop event's and the stats command's counters: JGroups' own per protocol, the taps', and the member's. */
    @Override
    public Map<String, Object> counters() {
        Map<String, Object> out = new LinkedHashMap<>();
        if (ch != null) {
            out.putAll(Stats.of(ch.getProtocolStack()));
        }
        Map<String, Object> wire = new LinkedHashMap<>();
        for (Tap tap : taps) {
            wire.put(tap.protocol(), tap.counters());
        }
        out.put("wire", wire);
        Map<String, Object> me = new LinkedHashMap<>();
        me.put("release", Version.printVersion());
        me.put("sent", sent.get());
        me.put("delivered", delivered.get());
        me.put("unsequenced_sends", unsequenced.get());
        me.put("views", views.get());
        me.put("suspects", suspects.get());
        me.put("events_written", history.eventsWritten());
        synchronized (tasks) {
            me.put("tasks", tasks.size());
        }
        me.put("unicast_protocol", headers == null ? null : headers.unicast.protocol);
        me.put("multicast_protocol", headers == null ? null : headers.multicast.protocol);
        out.put("member", me);
        return out;
    }
}
