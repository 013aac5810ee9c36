package chaosbed.member;

/**
 * Writes a message's send line when the message first goes down below its reliable protocol (the member's tap
 * there calls {@link #down}), before any datagram of it can be on the wire. Written after {@code ch.send} returned,
 * a member killed between the two left a message that the others delivered and that no send line accounts for:
 * the checker saw a phantom. The protocol passes a new message down on the thread that sends it, so each thread has
 * at most one pending message; a message that never reaches the tap (dropped above it, or a stack without the
 * protocol) gets its line after {@code ch.send} as before ({@link #finish} answers false).
 */
public final class FirstSend {
    private static final class Pending {
        final Object msg;
        final Runnable line;
        boolean written;

        Pending(Object msg, Runnable line) {
            this.msg = msg;
            this.line = line;
        }
    }

    private final ThreadLocal<Pending> pending = new ThreadLocal<>();

    /** Before {@code ch.send(msg)}: {@code line} writes msg's send line, once, from whichever comes first. */
    public void expect(Object msg, Runnable line) {
        pending.set(new Pending(msg, line));
    }

    /** From the tap, for each message it passes down: writes the line if msg is this thread's pending message. */
    public void down(Object msg) {
        Pending p = pending.get();
        if (p != null && p.msg == msg && !p.written) {
            p.written = true;
            p.line.run();
        }
    }

    /** After {@code ch.send} returned or threw: true when the tap has written the line. */
    public boolean finish() {
        Pending p = pending.get();
        pending.remove();
        return p != null && p.written;
    }
}
