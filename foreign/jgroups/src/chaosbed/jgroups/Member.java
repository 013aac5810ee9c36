package chaosbed.jgroups;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URL;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

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
import org.jgroups.util.UUID;

import chaosbed.member.Config;
import chaosbed.member.ControlServer;
import chaosbed.member.History;
import chaosbed.member.Names;
import chaosbed.member.Node;
import chaosbed.member.Payload;
import chaosbed.member.Task;

/**
 * A chaosbed member running the real JGroups 2.12.2: the jar's JChannel, driven through chaosbed's control contract
 * and recorded in chaosbed's history format (SCENARIO.md, "Foreign members"; docs/foreign/jgroups.md).
 *
 * <pre>
 *   java -cp jgroups.jar:CLASSES chaosbed.jgroups.Member [--stack NAME|FILE.xml] CONFIG.json
 * </pre>
 *
 * The channel is bound to the config's ip and port (port_range 0) and multicast group and port, is named after the
 * member's address ("B", "B/2" for incarnation 2) and joins the config's cluster. Application messages carry
 * chaosbed's payload (the msg_id up to a NUL byte, padded with 'x'), and the history's seqno and conn_id are the real
 * UNICAST2/UNICAST/NAKACK header fields of each sent and delivered message (Headers).
 *
 * <p>Exit: SIGTERM (or the control commands shutdown and leave) writes the last history line, {@code stop}, and halts
 * the JVM at once, without leaving the group and without writing anything more. Exit code 2: unusable arguments or
 * config (the message says what); 1: JGroups could not start.
 */
public final class Member extends ReceiverAdapter implements Node {
    /** FRAG2's frag_size is 60K: a larger message is fragmented, and its fragments, not it, carry the headers. */
    static final int MAX_SIZE = 60000;

    final Config cfg;
    final String stackName;
    final History history;
    private JChannel ch;
    private Headers headers;
    private volatile View view;
    private volatile boolean stopping;
    private final Object exitLock = new Object();

    /** Own multicasts whose {@code ch.send} has not returned: msg_id -> deliver lines held back until the send line. */
    private final Map<String, List<String>> ownPending = new HashMap<>(); // guarded by history
    private final Map<String, Integer> msgCounter = new HashMap<>(); // dest name ("*": multicast) -> last n
    final List<Task> tasks = new ArrayList<>(); // guarded by itself
    private final AtomicLong sent = new AtomicLong();
    private final AtomicLong delivered = new AtomicLong();
    private final AtomicLong unsequenced = new AtomicLong();
    private final AtomicLong views = new AtomicLong();
    private static final Map<String, String> UNSUPPORTED = Map.of(
            "close", "JGroups 2.12 cannot close one unicast connection from outside its stack",
            "set", "JGroups 2.12 protocol properties are set in the stack's XML, not at run time",
            "incarnation", "JGroups members learn a peer's new incarnation from their views");

    Member(Config cfg, String stackName, History history) {
        this.cfg = cfg;
        this.stackName = stackName;
        this.history = history;
    }

    // --- start and stop ----------------------------------------------------------------------------------------------

    public static void main(String[] args) {
        String stack = null;
        String configPath = null;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--stack") && i + 1 < args.length) {
                stack = args[++i];
            } else if (args[i].startsWith("--stack=")) {
                stack = args[i].substring("--stack=".length());
            } else if (args[i].startsWith("-") || configPath != null) {
                usage("unexpected argument " + args[i]);
            } else {
                configPath = args[i];
            }
        }
        if (configPath == null) {
            usage("no config file");
        }
        if (Version.major != 2 || Version.minor != 12) {
            fail(2, "this member needs JGroups 2.12, but the jar on the classpath is " + Version.description);
        }
        Config cfg = null;
        try {
            cfg = Config.load(configPath, System.getenv("CHAOSBED_TOKEN"), Stacks.DEFAULT);
        } catch (Config.ConfigError e) {
            fail(2, e.getMessage());
        }
        String stackName = stack != null ? stack : cfg.stack;
        URL stackUrl = null;
        try {
            stackUrl = Stacks.resolve(stackName);
        } catch (IllegalArgumentException e) {
            fail(2, e.getMessage());
        }
        History history = null;
        try {
            history = new History(cfg.history, cfg.name, cfg.incarnation);
        } catch (IOException e) {
            fail(2, "cannot open the history file " + cfg.history + ": " + e);
        }
        new Member(cfg, stackName, history).run(stackUrl);
    }

    private static void usage(String why) {
        fail(2, why + "\nusage: java -cp jgroups.jar:CLASSES chaosbed.jgroups.Member [--stack NAME|FILE.xml] CONFIG"
                + "\nstacks: " + String.join(", ", Stacks.NAMES));
    }

    static void fail(int code, String message) {
        System.err.println("chaosbed-jgroups: " + message);
        System.err.flush();
        System.exit(code);
    }

    private void run(URL stackUrl) {
        // the stack XML reads these (${chaosbed.ip}, ...); jgroups.bind_addr also binds FD_SOCK and VERIFY_SUSPECT
        System.setProperty("java.net.preferIPv4Stack", "true");
        System.setProperty("jgroups.bind_addr", cfg.ip);
        System.setProperty("chaosbed.ip", cfg.ip);
        System.setProperty("chaosbed.port", Integer.toString(cfg.port));
        System.setProperty("chaosbed.mcast_group", cfg.mcastGroup);
        System.setProperty("chaosbed.mcast_port", Integer.toString(cfg.mcastPort));
        ServerSocket control = null;
        try { // bound before JGroups starts, so that no ephemeral port of FD_SOCK can take it
            control = new ServerSocket();
            control.setReuseAddress(true);
            control.bind(new InetSocketAddress(InetAddress.getByName(cfg.ip), cfg.port + 1), 50);
        } catch (IOException e) {
            fail(1, "cannot listen on the control port " + cfg.ip + ":" + (cfg.port + 1) + ": " + e);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> exit(0), "chaosbed-sigterm"));
        history.event("start", "address", cfg.address, "stack", "jgroups-2.12/" + stackName, "transport", "udp");
        try {
            ch = new JChannel(stackUrl);
            ch.setName(cfg.address);
            if (Names.fits(cfg.address)) {
                ch.setAddressGenerator(this::carryingUuid);
            }
            headers = new Headers(ch.getProtocolStack());
            ch.setReceiver(this);
            ch.connect(cfg.cluster);
        } catch (Exception e) {
            e.printStackTrace();
            System.err.println("chaosbed-jgroups: JGroups did not start with stack " + stackName + ": " + e);
            exit(1);
        }
        Object physical = ch.getProtocolStack().down(new Event(Event.GET_PHYSICAL_ADDRESS, ch.getAddress()));
        if (!(physical instanceof IpAddress) || ((IpAddress) physical).getPort() != cfg.port
                || !((IpAddress) physical).getIpAddress().getHostAddress().equals(cfg.ip)) {
            System.err.println("chaosbed-jgroups: JGroups bound to " + physical + ", not " + cfg.ip + ":" + cfg.port
                    + " (does the stack set bind_addr, bind_port and port_range=\"0\" from ${chaosbed.*}?)");
            exit(1);
        }
        System.out.println("chaosbed-jgroups: " + cfg.address + " joined " + cfg.cluster + " at " + physical
                + " with stack " + stackName + "; control on " + cfg.ip + ":" + (cfg.port + 1));
        System.out.flush();
        new ControlServer(this, control).serve(); // until the member exits
    }

    /**
     * Ends the incarnation: writes {@code stop} (its last line) and halts the JVM at once. No leave, no close: a
     * member that leaves at the end makes the others install views without it (pitfall b of the research note).
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
                System.err.println("chaosbed-jgroups: disconnect: " + e);
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

    static String nameOf(String address) {
        return Payload.nameOf(address);
    }

    static int incarnationOf(String address) {
        return Payload.incarnationOf(address);
    }

    static String viewId(ViewId id) {
        return addressOf(id.getCoordAddress()) + "|" + id.getId();
    }

    Map<String, Object> describe(View v) {
        List<String> names = new ArrayList<>();
        List<String> addresses = new ArrayList<>();
        for (Address a : v.getMembers()) {
            String address = addressOf(a);
            addresses.add(address);
            names.add(nameOf(address));
        }
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("view_id", viewId(v.getViewId()));
        d.put("members", names);
        d.put("merge", v instanceof MergeView);
        d.put("addresses", addresses);
        return d;
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
        return "jgroups-2.12";
    }

    @Override
    public Map<String, String> unsupported() {
        return UNSUPPORTED;
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
                if (nameOf(address).equals(name) && incarnationOf(address) > bestIncarnation) {
                    best = a;
                    bestIncarnation = incarnationOf(address);
                }
            }
        }
        if (best != null) {
            return best;
        }
        for (Map.Entry<Address, String> e : UUID.getContents().entrySet()) {
            String address = e.getValue();
            if (address != null && nameOf(address).equals(name) && incarnationOf(address) > bestIncarnation) {
                best = e.getKey();
                bestIncarnation = incarnationOf(address);
            }
        }
        return best;
    }

    // --- sending -----------------------------------------------------------------------------------------------------

    private synchronized int nextMessageNumber(String dest) {
        int n = msgCounter.getOrDefault(dest, 0) + 1;
        msgCounter.put(dest, n);
        return n;
    }

    static byte[] payload(String msgId, int size) {
        return Payload.of(msgId, size);
    }

    static String msgIdOf(byte[] buf, int offset, int length) {
        return Payload.msgIdOf(buf, offset, length);
    }

    /** Starts a workload task on a thread of its own; returns its id (1, 2, ... in the order of the requests). */
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
        byte[] payload = payload(msgId, task.size);
        Message msg = new Message(dest, null, payload);
        if (!cfg.recordMessages) { // no history line: no seqno to read back either
            ch.send(msg);
            sent.incrementAndGet();
            return true;
        }
        long t = System.nanoTime();
        Exception failure = null;
        try {
            ch.send(msg);
        } catch (Exception e) {
            failure = e;
        }
        Headers.Fields f = headers.of(msg);
        if (f != null || failure == null) { // numbered by UNICAST2/UNICAST, or sent: it may be on the wire
            if (f == null) {
                unsequenced.incrementAndGet();
            }
            history.write(history.line(t, "send", "kind", "unicast", "sender", cfg.name, "dest", task.dest,
                    "dest_address", destAddress, "conn_id", f == null ? null : f.connId, "seqno",
                    f == null ? -1 : f.seqno, "msg_id", msgId, "size", payload.length));
            sent.incrementAndGet();
        }
        if (failure != null) {
            throw failure;
        }
        return true;
    }

    private boolean sendMulticast(Task task) throws Exception {
        if (stopping) {
            return false;
        }
        String msgId = cfg.address + ">*#" + nextMessageNumber("*");
        byte[] payload = payload(msgId, task.size);
        Message msg = new Message(null, null, payload);
        if (!cfg.recordMessages) {
            ch.send(msg);
            sent.incrementAndGet();
            return true;
        }
        long t = System.nanoTime(); // before ch.send: the own copy is delivered inside it, on another thread
        synchronized (history) {
            ownPending.put(msgId, new ArrayList<>());
        }
        Exception failure = null;
        try {
            ch.send(msg);
        } catch (Exception e) {
            failure = e;
        }
        Headers.Fields f = headers.of(msg);
        synchronized (history) {
            List<String> lines = new ArrayList<>();
            if (f != null || failure == null) { // numbered by NAKACK, or sent: it may be on the wire
                if (f == null) {
                    unsequenced.incrementAndGet();
                }
                lines.add(history.line(t, "send", "kind", "multicast", "sender", cfg.name, "dest", null,
                        "dest_address", null, "conn_id", null, "seqno", f == null ? -1 : f.seqno, "msg_id", msgId,
                        "size", payload.length));
                sent.incrementAndGet();
            }
            lines.addAll(ownPending.remove(msgId));
            history.write(lines.toArray(new String[0]));
        }
        if (failure != null) {
            throw failure;
        }
        return true;
    }

    // --- JGroups callbacks -------------------------------------------------------------------------------------------

    @Override
    public void receive(Message msg) {
        if (!cfg.recordMessages) {
            delivered.incrementAndGet();
            return;
        }
        String senderAddress = addressOf(msg.getSrc());
        Headers.Fields f = headers.of(msg);
        String kind = f != null ? f.kind : msg.getDest() == null ? "multicast" : "unicast";
        String msgId = msgIdOf(msg.getRawBuffer(), msg.getOffset(), msg.getLength());
        delivered.incrementAndGet();
        synchronized (history) {
            String line = history.line(System.nanoTime(), "deliver", "kind", kind, "sender", nameOf(senderAddress),
                    "sender_address", senderAddress, "dest", kind.equals("unicast") ? cfg.name : null, "conn_id",
                    f == null ? null : f.connId, "seqno", f == null ? -1 : f.seqno, "msg_id", msgId, "size",
                    msg.getLength());
            List<String> held = msgId != null ? ownPending.get(msgId) : null;
            if (held != null && senderAddress.equals(cfg.address)) {
                held.add(line); // our own multicast, delivered before ch.send returned: after its send line
            } else {
                history.write(line);
            }
        }
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

    @Override
    public void suspect(Address a) {
        history.event("suspect", "peer", nameOf(addressOf(a)));
    }

    // --- counters ----------------------------------------------------------------------------------------------------

    /** The stop event's and the stats command's counters: JGroups' own per protocol, and the member's. */
    @Override
    public Map<String, Object> counters() {
        Map<String, Object> out = new LinkedHashMap<>();
        if (ch != null) {
            out.putAll(Stats.of(ch.getProtocolStack()));
        }
        Map<String, Object> me = new LinkedHashMap<>();
        me.put("sent", sent.get());
        me.put("delivered", delivered.get());
        me.put("unsequenced_sends", unsequenced.get());
        me.put("views", views.get());
        me.put("events_written", history.eventsWritten());
        synchronized (tasks) {
            me.put("tasks", tasks.size());
        }
        me.put("unicast_protocol", headers == null ? null : headers.unicastProtocol);
        out.put("member", me);
        return out;
    }
}
