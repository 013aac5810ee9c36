package chaosbed.member;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * chaosbed's control contract (node/control.py, SCENARIO.md "Foreign members") on TCP ip:port+1: one JSON request per
 * line, {"token": ..., "cmd": ..., ...}, one JSON reply per line, {"ok": true, ...} or {"ok": false, "error": ...}.
 * A malformed request, a bad token or an unknown command gets an error reply, and the member goes on.
 *
 * <p>Commands: ping, send (to, count, size, rate), multicast (count, size, rate), tasks, view, stats, flush, shutdown,
 * leave. The commands of chaosbed's own member that the program has no equivalent of ({@link Node#unsupported}) are
 * refused with the reason. It uses no JGroups API: every JGroups generation's member serves it.
 */
public final class ControlServer {
    static final int MAX_LINE = 1 << 20;
    static final List<String> COMMANDS = List.of("flush", "leave", "multicast", "ping", "send", "shutdown", "stats",
            "tasks", "view");
    private final Node member;
    private final ServerSocket server;
    private final Map<String, Long> counts = new LinkedHashMap<>();

    /** A request the member cannot carry out: the error reply's text. */
    private static final class BadRequest extends Exception {
        private static final long serialVersionUID = 1L;

        BadRequest(String message) {
            super(message);
        }
    }

    public ControlServer(Node member, ServerSocket server) {
        this.member = member;
        this.server = server;
        for (String k : List.of("requests", "errors", "bad_token", "malformed")) {
            counts.put(k, 0L);
        }
    }

    /** Accepts connections until the member exits; each is served on a thread of its own. */
    public void serve() {
        while (true) {
            Socket s;
            try {
                s = server.accept();
            } catch (IOException e) {
                System.err.println("chaosbed-jgroups: control accept: " + e);
                continue;
            }
            Thread t = new Thread(() -> client(s), "chaosbed-control");
            t.setDaemon(true);
            t.start();
        }
    }

    private void client(Socket s) {
        try (s; InputStream in = new BufferedInputStream(s.getInputStream()); OutputStream out = s.getOutputStream()) {
            while (true) {
                ByteArrayOutputStream line = new ByteArrayOutputStream();
                boolean tooLong = false;
                int b;
                while ((b = in.read()) != -1 && b != '\n') {
                    if (line.size() < MAX_LINE) {
                        line.write(b);
                    } else {
                        tooLong = true;
                        break;
                    }
                }
                if (tooLong) {
                    count("malformed");
                    reply(out, error("request longer than " + MAX_LINE + " bytes"));
                    return;
                }
                if (b == -1 && line.size() == 0) {
                    return;
                }
                Map<String, Object> r = handle(line.toString(StandardCharsets.UTF_8));
                boolean bye = Boolean.TRUE.equals(r.remove("_exit"));
                boolean leave = Boolean.TRUE.equals(r.remove("_leave"));
                reply(out, r);
                if (bye) {
                    member.exit(0);
                }
                if (leave) {
                    member.leave();
                }
                if (b == -1) {
                    return;
                }
            }
        } catch (IOException e) {
            // the client went away
        }
    }

    private static void reply(OutputStream out, Map<String, Object> r) throws IOException {
        out.write((Json.write(r) + "\n").getBytes(StandardCharsets.UTF_8));
        out.flush();
    }

    private synchronized void count(String what) {
        counts.merge(what, 1L, Long::sum);
    }

    private synchronized Map<String, Object> countsCopy() {
        return new LinkedHashMap<>(counts);
    }

    private static Map<String, Object> error(String message) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("ok", false);
        r.put("error", message);
        return r;
    }

    /** The reply to one request line (internal keys _exit/_leave: what to do once the reply is sent). */
    Map<String, Object> handle(String line) {
        count("requests");
        Object parsed;
        try {
            parsed = Json.parse(line);
        } catch (Json.JsonError e) {
            count("malformed");
            return error("malformed request: " + e.getMessage());
        }
        if (!(parsed instanceof Map)) {
            count("malformed");
            return error("malformed request: a request is a JSON object");
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> req = (Map<String, Object>) parsed;
        if (!member.config().token.equals(req.get("token"))) {
            count("bad_token");
            return error("bad or missing token");
        }
        Object cmd = req.get("cmd");
        if (cmd instanceof String && member.unsupported().containsKey(cmd)) {
            count("errors");
            return error(cmd + ": not supported by " + member.system() + " (" + member.unsupported().get(cmd) + ")");
        }
        if (!(cmd instanceof String) || !COMMANDS.contains(cmd)) {
            count("errors");
            return error("unknown command " + Json.write(cmd) + "; commands: " + String.join(", ", COMMANDS));
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("ok", true);
        try {
            command((String) cmd, req, r);
        } catch (BadRequest e) {
            count("errors");
            return error(cmd + ": " + e.getMessage());
        }
        return r;
    }

    private void command(String cmd, Map<String, Object> req, Map<String, Object> r) throws BadRequest {
        Config cfg = member.config();
        switch (cmd) {
            case "ping":
                r.put("member", cfg.name);
                r.put("address", cfg.address);
                r.put("pid", ProcessHandle.current().pid());
                r.put("incarnation", cfg.incarnation);
                return;
            case "send": {
                Object to = req.get("to");
                if (!(to instanceof String)) {
                    throw new BadRequest("'to' must be a member name");
                }
                if (to.equals(cfg.name) || (!cfg.peers.isEmpty() && !cfg.peers.containsKey(to))) {
                    throw new BadRequest("unknown destination " + Json.write(to) + "; peers: "
                            + String.join(", ", cfg.peers.keySet()));
                }
                r.put("task", startTask("unicast", (String) to, req));
                return;
            }
            case "multicast":
                r.put("task", startTask("multicast", null, req));
                return;
            case "tasks": {
                Map<String, Object> tasks = new LinkedHashMap<>();
                List<Task> all = member.tasks();
                synchronized (all) {
                    for (int i = 0; i < all.size(); i++) {
                        tasks.put(Integer.toString(i + 1), all.get(i).progress());
                    }
                }
                r.put("tasks", tasks);
                return;
            }
            case "view":
                r.put("view", member.viewInfo());
                return;
            case "stats": {
                Map<String, Object> counters = member.counters();
                counters.put("control", countsCopy());
                r.put("counters", counters);
                usage(r);
                return;
            }
            case "flush":
                member.history().flush();
                r.put("events_written", member.history().eventsWritten());
                return;
            case "shutdown":
                r.put("bye", true);
                r.put("_exit", true);
                return;
            case "leave":
                r.put("_leave", true);
                return;
            default:
                throw new BadRequest("unknown command"); // COMMANDS and this switch agree
        }
    }

    /**
     * The contract's optional usage keys beside the counters: {@code max_rss_kib}, the process's peak RSS (VmHWM of
     * /proc/self/status: what getrusage's ru_maxrss reports on Linux), and {@code cpu_s}, user + system CPU seconds of
     * the JVM. Left out where the platform has neither.
     */
    private static void usage(Map<String, Object> r) {
        try {
            for (String line : java.nio.file.Files.readAllLines(java.nio.file.Paths.get("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    r.put("max_rss_kib", Integer.parseInt(line.replaceAll("[^0-9]", "")));
                    break;
                }
            }
        } catch (IOException | NumberFormatException e) {
            // not Linux: no peak RSS
        }
        java.lang.management.OperatingSystemMXBean os = java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            long ns = ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
            if (ns >= 0) {
                r.put("cpu_s", ns / 1e9);
            }
        }
    }

    private int startTask(String kind, String dest, Map<String, Object> req) throws BadRequest {
        int count = integer(req, "count", 1);
        int size = integer(req, "size", 0);
        Double rate = null;
        Object rv = req.get("rate");
        if (rv != null) {
            if (!(rv instanceof Number)) {
                throw new BadRequest("rate must be a number of messages/s, or null");
            }
            rate = ((Number) rv).doubleValue();
        }
        if (count < 0 || size < 0 || (rate != null && !(rate > 0))) {
            throw new BadRequest("count and size must be >= 0, rate > 0");
        }
        if (size > member.maxSize()) {
            throw new BadRequest("size " + size + " is above " + member.maxSize()
                    + " bytes (FRAG2 would fragment the message)");
        }
        return member.startTask(kind, dest, count, size, rate);
    }

    private static int integer(Map<String, Object> req, String key, int dflt) throws BadRequest {
        Object v = req.get(key);
        if (v == null) {
            return dflt;
        }
        if (v instanceof Long && (Long) v >= Integer.MIN_VALUE && (Long) v <= Integer.MAX_VALUE) {
            return (int) (long) (Long) v;
        }
        if (v instanceof Double && (Double) v == Math.rint((Double) v) && Math.abs((Double) v) < 1e9) {
            return (int) (double) (Double) v;
        }
        throw new BadRequest(key + " must be an integer, not " + Json.write(v));
    }
}
