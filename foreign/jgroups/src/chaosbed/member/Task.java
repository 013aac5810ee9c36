package chaosbed.member;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.locks.LockSupport;

/**
 * One workload task of the control commands {@code send} and {@code multicast}: {@code count} messages of
 * {@code size} payload bytes, at {@code rate} messages/s (message i is due at start + i / rate; a late task sends
 * its backlog at once, as chaosbed's own workload does), or without a rate as fast as {@code ch.send} returns (JGroups'
 * flow control, UFC/MFC, blocks it). It runs on a thread of its own until it is done or the member stops.
 *
 * <p>Its progress is what the control command {@code tasks} reports, as chaosbed's own member does:
 * {@code {"kind", "dest", "count", "sent", "done"}} (plus {@code "error"} if sending failed).
 */
public final class Task implements Runnable {
    /** Sends message number i (from 0) of the task; false if the member is stopping. */
    public interface Sender {
        boolean send(Task task) throws Exception;
    }

    public final String kind;
    public final String dest; // member name, null for multicast
    public final int count;
    public final int size;
    public final Double rate;
    private final Sender sender;
    private volatile int sent;
    private volatile boolean done;
    private volatile String error;

    public Task(String kind, String dest, int count, int size, Double rate, Sender sender) {
        this.kind = kind;
        this.dest = dest;
        this.count = count;
        this.size = size;
        this.rate = rate;
        this.sender = sender;
        this.done = count == 0;
    }

    @Override
    public void run() {
        long start = System.nanoTime();
        try {
            while (sent < count) {
                if (rate != null) {
                    long due = start + (long) (sent * 1e9 / rate);
                    long wait = due - System.nanoTime();
                    if (wait > 0) {
                        LockSupport.parkNanos(wait);
                        continue; // parkNanos may return early
                    }
                }
                if (!sender.send(this)) {
                    break;
                }
                sent++;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (Exception e) {
            error = e.toString();
            System.err.println("task " + kind + " " + (dest == null ? "*" : dest) + ": " + e);
        } finally {
            done = true;
        }
    }

    public Map<String, Object> progress() {
        Map<String, Object> p = new LinkedHashMap<>();
        p.put("kind", kind);
        p.put("dest", dest);
        p.put("count", count);
        p.put("sent", sent);
        p.put("done", done);
        if (error != null) {
            p.put("error", error);
        }
        return p;
    }
}
