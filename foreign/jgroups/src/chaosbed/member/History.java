package chaosbed.member;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The member's history: JSON lines in chaosbed's format (node/history_format.py), appended to the config's history
 * file. Every line starts with {@code t} (System.nanoTime(), which is CLOCK_MONOTONIC on Linux, the clock of every
 * chaosbed history), {@code member}, {@code incarnation} and {@code event}, then the event's fields in the order given.
 *
 * <p>Each event is written to the file at once, as one complete line in one write on a file opened for appending: a
 * member killed with SIGKILL leaves at most a cut-off last line, and a restarted incarnation that appends to the same
 * file first ends such a line. After {@link #stop} nothing more is written (late events from JGroups' threads are
 * dropped), so {@code stop} is always the incarnation's last line.
 *
 * <p>Thread-safe: JGroups delivers on its own threads, workloads send on theirs. Callers that need several lines
 * written without another thread's line between them synchronize on this object.
 */
public final class History {
    private final FileOutputStream out;
    private final String member;
    private final int incarnation;
    private boolean stopped;
    private long written;

    public History(String path, String member, int incarnation) throws IOException {
        this.member = member;
        this.incarnation = incarnation;
        try (RandomAccessFile f = new RandomAccessFile(path, "rw")) {
            long size = f.length();
            if (size > 0) {
                f.seek(size - 1);
                if (f.read() != '\n') { // a killed incarnation's cut-off line: ended, so ours start on new lines
                    f.seek(size);
                    f.write('\n');
                }
            }
        }
        out = new FileOutputStream(path, true);
    }

    /** One event's line (without the newline): t, member, incarnation, event, then the key/value pairs of kv. */
    public String line(long t, String event, Object... kv) {
        Map<String, Object> record = new LinkedHashMap<>();
        record.put("t", t);
        record.put("member", member);
        record.put("incarnation", incarnation);
        record.put("event", event);
        for (int i = 0; i + 1 < kv.length; i += 2) {
            record.put((String) kv[i], kv[i + 1]);
        }
        return Json.write(record);
    }

    /** Writes one event now (t = now). */
    public synchronized void event(String event, Object... kv) {
        write(line(System.nanoTime(), event, kv));
    }

    /** Writes lines made by {@link #line} in one write (dropped after stop). */
    public synchronized void write(String... lines) {
        if (stopped || lines.length == 0) {
            return;
        }
        StringBuilder b = new StringBuilder();
        for (String l : lines) {
            b.append(l).append('\n');
        }
        try {
            out.write(b.toString().getBytes(StandardCharsets.UTF_8));
            written += lines.length;
        } catch (IOException e) {
            System.err.println("history: cannot write: " + e);
        }
    }

    /** Writes the incarnation's last event, {@code stop} with its counters; true if this call wrote it. */
    public synchronized boolean stop(Map<String, Object> counters) {
        if (stopped) {
            return false;
        }
        write(line(System.nanoTime(), "stop", "counters", counters));
        stopped = true;
        return true;
    }

    public synchronized boolean stopped() {
        return stopped;
    }

    /** Lines reach the OS as they happen; this also forces them to the disk (the control command `flush`). */
    public synchronized void flush() {
        try {
            out.getFD().sync();
        } catch (IOException e) {
            System.err.println("history: cannot sync: " + e);
        }
    }

    public synchronized long eventsWritten() {
        return written;
    }
}
