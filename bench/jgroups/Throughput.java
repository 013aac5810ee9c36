// The JGroups side of bench/bench_jgroups.py: one member of a JGroups 2.12 channel that either sends N messages of
// SIZE bytes (to one member, or multicast to the group) or counts what it receives and prints the rate.
//
//   java -cp jgroups.jar:. Throughput CONFIG MEMBERS ROLE MODE N SIZE
//   ROLE: send | recv; MODE: unicast (the sender sends to the member that joined second) | multicast
//
// Every member connects (prints "connected"), waits for a view of MEMBERS, prints "ready". Then, for every line "go"
// on its stdin, the sender sends N messages and prints "sent <seconds>"; a receiver prints "rate <msgs/s> <seconds>"
// each time it has N more messages, timed from the first of them. The line "leave" (or the end of stdin) closes the
// channel; the member prints "done".

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.jgroups.Address;
import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.ReceiverAdapter;
import org.jgroups.View;

public class Throughput extends ReceiverAdapter {
    private final int members;
    private final long expected;
    private final AtomicLong received = new AtomicLong();
    private volatile long first;
    private final CountDownLatch viewComplete = new CountDownLatch(1);
    private volatile View view;

    Throughput(int members, long expected) {
        this.members = members;
        this.expected = expected;
    }

    @Override
    public void viewAccepted(View v) {
        view = v;
        if (v.size() >= members) {
            viewComplete.countDown();
        }
    }

    @Override
    public void receive(Message msg) {
        long n = received.incrementAndGet();
        if (n % expected == 1 || expected == 1) {
            first = System.nanoTime();
        }
        if (n % expected == 0) {
            double seconds = (System.nanoTime() - first) / 1e9;
            System.out.printf("rate %.1f %.3f%n", expected / seconds, seconds);
            System.out.flush();
        }
    }

    public static void main(String[] args) throws Exception {
        String config = args[0];
        int members = Integer.parseInt(args[1]);
        String role = args[2];
        String mode = args[3];
        long n = Long.parseLong(args[4]);
        int size = Integer.parseInt(args[5]);
        Throughput t = new Throughput(members, n);
        JChannel ch = new JChannel(config);
        ch.setReceiver(t);
        ch.connect("chaosbed-jgroups-bench");
        System.out.println("connected " + ch.getAddress());
        System.out.flush();
        if (!t.viewComplete.await(60, TimeUnit.SECONDS)) {
            System.out.println("error: no view of " + members + " within 60 s: " + t.view);
            System.exit(1);
        }
        System.out.println("ready " + t.view);
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        Address dest = mode.equals("unicast") ? t.view.getMembers().get(1) : null;
        byte[] payload = new byte[size];
        String line;
        while ((line = in.readLine()) != null && line.equals("go")) {
            if (role.equals("send")) {
                long start = System.nanoTime();
                for (long i = 0; i < n; i++) {
                    ch.send(new Message(dest, null, payload));
                }
                System.out.printf("sent %.3f%n", (System.nanoTime() - start) / 1e9);
                System.out.flush();
            }
        }
        ch.close();
        System.out.println("done");
        System.out.flush();
    }
}
