package chaosbed.jgroups;

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
 * {@code @ManagedAttribute} (fields such as NAKACK's xmit_reqs_sent, and getters such as UNICAST2's
 * getNumberOfRetransmissions, named in snake case: number_of_retransmissions). Read by reflection; cheap enough for
 * the stats command and the stop event.
 */
final class Stats {
    private Stats() {}

    static Map<String, Object> of(ProtocolStack stack) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (Protocol p : stack.getProtocols()) {
            Map<String, Object> attrs = new TreeMap<>();
            for (Class<?> k = p.getClass(); k != null && k != Object.class; k = k.getSuperclass()) {
                for (Field f : k.getDeclaredFields()) {
                    if (f.getAnnotation(ManagedAttribute.class) == null || Modifier.isStatic(f.getModifiers())
                            || !countable(f.getType())) {
                        continue;
                    }
                    try {
                        f.setAccessible(true);
                        attrs.putIfAbsent(f.getName(), f.get(p));
                    } catch (ReflectiveOperationException | RuntimeException e) {
                        // not readable: left out
                    }
                }
            }
            for (Method m : p.getClass().getMethods()) {
                if (m.getAnnotation(ManagedAttribute.class) == null || m.getParameterCount() != 0
                        || Modifier.isStatic(m.getModifiers()) || !countable(m.getReturnType())) {
                    continue;
                }
                try {
                    attrs.putIfAbsent(snake(m.getName()), m.invoke(p));
                } catch (ReflectiveOperationException | RuntimeException e) {
                    // a getter that fails: left out
                }
            }
            attrs.remove("stats"); // the switch that turns statistics on, not a statistic
            out.put(p.getName(), attrs);
        }
        return out;
    }

    private static boolean countable(Class<?> c) {
        return c == int.class || c == long.class || c == short.class || c == double.class || c == float.class
                || c == boolean.class;
    }

    /** getXmitTableSize -> xmit_table_size, isRunning -> running. */
    static String snake(String getter) {
        String s = getter.startsWith("get") ? getter.substring(3) : getter.startsWith("is") ? getter.substring(2)
                : getter;
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isUpperCase(c)) {
                if (i > 0) {
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
