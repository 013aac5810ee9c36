package chaosbed.jgroups3;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

import org.jgroups.annotations.ManagedAttribute;
import org.jgroups.stack.Protocol;
import org.jgroups.stack.ProtocolStack;

/**
 * The protocols' own counters, as JMX would show them: per protocol, every numeric or boolean attribute marked
 * {@code @ManagedAttribute}: fields (UNICAST2/UNICAST3 num_xmits, num_acks_sent and the like: AtomicLongs or longs in 3.x, read as
 * numbers) and getters (getNumUnackedMessages -> num_unacked_messages). Read by reflection; cheap enough for the stats
 * command and the stop event. The member's own taps are left out (their counts are under "wire").
 */
final class Stats {
    private Stats() {}

    static Map<String, Object> of(ProtocolStack stack) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (Protocol p : stack.getProtocols()) {
            if (p instanceof Tap) {
                continue;
            }
            Map<String, Object> attrs = new TreeMap<>();
            for (Class<?> k = p.getClass(); k != null && k != Object.class; k = k.getSuperclass()) {
                for (Field f : k.getDeclaredFields()) {
                    if (f.getAnnotation(ManagedAttribute.class) == null || Modifier.isStatic(f.getModifiers())) {
                        continue;
                    }
                    try {
                        f.setAccessible(true);
                        Object v = value(f.get(p));
                        if (v != null) {
                            attrs.putIfAbsent(f.getName(), v);
                        }
                    } catch (ReflectiveOperationException | RuntimeException e) {
                        // not readable (a module boundary, a failing getter): left out
                    }
                }
            }
            for (Method m : p.getClass().getMethods()) {
                if (m.getAnnotation(ManagedAttribute.class) == null || m.getParameterCount() != 0
                        || Modifier.isStatic(m.getModifiers())) {
                    continue;
                }
                try {
                    Object v = value(m.invoke(p));
                    if (v != null) {
                        attrs.putIfAbsent(snake(m.getName()), v);
                    }
                } catch (ReflectiveOperationException | RuntimeException e) {
                    // a getter that fails: left out
                }
            }
            attrs.remove("stats"); // the switch that turns statistics on, not a statistic
            attrs.remove("is_trace");
            out.put(p.getName(), attrs);
        }
        return out;
    }

    /** A number (LongAdder, AtomicLong, ... as a long; a double that is finite) or a boolean; null otherwise. */
    private static Object value(Object v) {
        if (v instanceof Boolean || v instanceof Long || v instanceof Integer || v instanceof Short) {
            return v;
        }
        if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            return Double.isFinite(d) ? d : null;
        }
        if (v instanceof Number) { // LongAdder, AtomicLong, AtomicInteger
            return ((Number) v).longValue();
        }
        return null;
    }

    /** getXmitTableSize -> xmit_table_size, isRunning -> running. */
    static String snake(String getter) {
        String s = getter.startsWith("get") ? getter.substring(3) : getter.startsWith("is") ? getter.substring(2)
                : getter;
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isUpperCase(c)) {
                if (i > 0 && !Character.isUpperCase(s.charAt(i - 1))) {
                    b.append('_');
                }
                b.append(Character.toLowerCase(c));
            } else {
                b.append(c);
            }
        }
        return b.toString();
    }
}
