package chaosbed.member;

import java.util.Random;

/**
 * A member's chaosbed address ("B", "B/2") carried in its JGroups UUID, so that every member can name it before
 * JGroups has told it the logical name. A member that joins while another is paused installs a view with a member
 * no discovery has named yet; its history would list that member as a UUID, which matches no member.
 *
 * <p>Layout: the most significant long is 32 random bits (JGroups orders addresses by them, e.g. to pick a merge
 * leader, so that order stays random) and a marker; the least significant long holds the address's length in its
 * lowest byte and up to {@link #MAX} printable ASCII characters in the bytes above it.
 */
public final class Names {
    static final long MARKER = 0xC4A05BEDL;
    /** The longest address a UUID carries; a longer one gets JGroups' random UUID (and only its logical name). */
    public static final int MAX = 7;

    /** The random half of the UUIDs this process makes. */
    private static final Random RANDOM = new Random();

    private Names() {
    }

    /** Whether a UUID can carry this address (a member with a longer one keeps JGroups' own UUIDs). */
    public static boolean fits(String address) {
        return leastOf(address) != 0;
    }

    /** Fresh UUID bits {most, least} carrying the address (which {@link #fits}). */
    public static long[] bitsOf(String address) {
        long least = leastOf(address);
        if (least == 0) {
            throw new IllegalArgumentException("a UUID cannot carry the address " + address);
        }
        return new long[] {((long) RANDOM.nextInt()) << 32 | MARKER, least};
    }

    /** The least significant long carrying the address, or 0 where it does not fit. */
    private static long leastOf(String address) {
        int n = address.length();
        if (n < 1 || n > MAX) {
            return 0;
        }
        long least = n;
        for (int i = 0; i < n; i++) {
            char c = address.charAt(i);
            if (c < 0x21 || c > 0x7e) {
                return 0;
            }
            least |= ((long) c) << (8 * (i + 1));
        }
        return least;
    }

    /** The address a UUID's bits carry, or null for a UUID that carries none. */
    public static String addressOf(long most, long least) {
        if ((most & 0xFFFFFFFFL) != MARKER) {
            return null;
        }
        int n = (int) (least & 0xFF);
        if (n < 1 || n > MAX || (n < MAX && least >>> (8 * (n + 1)) != 0)) {
            return null;
        }
        StringBuilder b = new StringBuilder(n);
        for (int i = 0; i < n; i++) {
            char c = (char) ((least >>> (8 * (i + 1))) & 0xFF);
            if (c < 0x21 || c > 0x7e) {
                return null;
            }
            b.append(c);
        }
        return b.toString();
    }
}
