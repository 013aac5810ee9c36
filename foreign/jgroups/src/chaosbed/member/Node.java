package chaosbed.member;

import java.util.List;
import java.util.Map;

/**
 * A member program as the control server sees it: what the control contract's commands ask of it
 * (docs/contracts/control.md). Implemented by each JGroups generation's member; uses no JGroups API, so the control
 * server and the history writing are one source set compiled into every generation's build.
 */
public interface Node {
    Config config();

    History history();

    /** The current view as {@code {"view_id", "members", "merge", "addresses"}}, or null before the first. */
    Map<String, Object> viewInfo();

    /** The stop event's and the stats command's counters (JGroups' own per protocol, and the member's). */
    Map<String, Object> counters();

    /** The workload tasks, in the order they were started (task i is id i + 1). Callers synchronize on the list. */
    List<Task> tasks();

    /** Starts a workload task ("unicast" to dest, or "multicast"); returns its id. */
    int startTask(String kind, String dest, int count, int size, Double rate);

    /** The largest payload a workload message may have (FRAG2 would fragment a larger one). */
    int maxSize();

    /** Writes {@code stop} and halts the JVM. */
    void exit(int code);

    /** A graceful leave of the group, then {@code left}, {@code stop} and exit (in the background). */
    void leave();

    /** The system's name for error replies ("jgroups-2.12", "jgroups-5.5.6"). */
    String system();

    /** Commands of chaosbed's own member this one refuses, with the reason each is not supported. */
    Map<String, String> unsupported();
}
