package chaosbed.member;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The member's config: the JSON file chaosbed writes for every member (SCENARIO.md, "Foreign members"), read in any
 * key order. Keys:
 *
 * <ul>
 *   <li>required: {@code name}, {@code ip}, {@code port}, {@code history}, {@code incarnation}, {@code cluster},
 *       {@code mcast_group}, {@code mcast_port}, and the control token as {@code token} or in the environment
 *       ({@code CHAOSBED_TOKEN}; the environment wins when both are there);
 *   <li>optional: {@code address} (default: the name, or "name/incarnation" from incarnation 2 on), {@code peers}
 *       (the other members: an object {@code {"B": ["10.0.0.2", 7800], ...}} as chaosbed writes it, or the string
 *       {@code "B=10.0.0.2:7800,C=..."} of the {peers} placeholder; used to check a unicast's destination),
 *       {@code stack} (a stack name of the member program, or the path of a JGroups XML file; the program
 *       gives the default), {@code transport} ("udp" or "tcp"). Other keys (chaosbed's {@code properties},
 *       {@code system}, {@code mcast_loop}, ...) are ignored.
 * </ul>
 *
 * A missing key or a value of the wrong type is a {@link ConfigError} that names the file and the key.
 */
public final class Config {
    public final String path;
    public final String name;
    public final String address;
    public final String ip;
    public final int port;
    public final String history;
    public final int incarnation;
    public final String cluster;
    public final String token;
    public final String mcastGroup;
    public final int mcastPort;
    public final String stack;
    /** The scenario's transport ("udp" or "tcp"), as chaosbed writes it; default "udp". */
    public final String transport;
    /** Whether send and deliver events are recorded (the history contract needs them; a benchmark may turn them off). */
    public final boolean recordMessages;
    /** name -> "ip:port" of every member the config lists (this one included, when it is listed). */
    public final Map<String, String> peers;

    /** A config file that cannot be used: the message says which file and key, and what is wrong. */
    public static final class ConfigError extends Exception {
        private static final long serialVersionUID = 1L;

        ConfigError(String message) {
            super(message);
        }
    }

    private Config(String path, Map<String, Object> m, String envToken, String defaultStack) throws ConfigError {
        this.path = path;
        name = string(m, "name");
        if (name.isEmpty() || name.contains("/") || name.contains(">") || name.contains("#")) {
            throw error("name", "must be a non-empty member name without '/', '>' or '#'");
        }
        ip = string(m, "ip");
        port = integer(m, "port", 1, 65534); // the control endpoint is port + 1
        history = string(m, "history");
        incarnation = integer(m, "incarnation", 1, Integer.MAX_VALUE);
        cluster = string(m, "cluster");
        if (cluster.isEmpty()) {
            throw error("cluster", "must not be empty");
        }
        mcastGroup = string(m, "mcast_group");
        mcastPort = integer(m, "mcast_port", 1, 65535);
        if (envToken != null && !envToken.isEmpty()) {
            token = envToken;
        } else if (m.containsKey("token")) {
            token = string(m, "token");
        } else {
            throw new ConfigError(path + ": no control token: neither a \"token\" key nor CHAOSBED_TOKEN in the "
                    + "environment");
        }
        address = m.containsKey("address") ? string(m, "address")
                : incarnation == 1 ? name : name + "/" + incarnation;
        if (!address.equals(name) && !address.startsWith(name + "/")) {
            throw error("address", "\"" + address + "\" is not the name \"" + name + "\" or \"" + name
                    + "/<incarnation>\"");
        }
        stack = m.containsKey("stack") ? string(m, "stack") : defaultStack;
        transport = m.containsKey("transport") ? string(m, "transport") : "udp";
        Object record = m.getOrDefault("record_messages", Boolean.TRUE);
        if (!(record instanceof Boolean)) {
            throw error("record_messages", "must be true or false, not " + Json.write(record));
        }
        recordMessages = (Boolean) record;
        peers = peers(m.get("peers"));
    }

    /** Reads the config file; {@code defaultStack} is the stack of a config without a "stack" key. */
    public static Config load(String path, String envToken, String defaultStack) throws ConfigError {
        String text;
        try {
            text = Files.readString(Path.of(path), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new ConfigError("cannot read the config file " + path + ": " + e);
        }
        Object root;
        try {
            root = Json.parse(text);
        } catch (Json.JsonError e) {
            throw new ConfigError(path + " is not valid JSON: " + e.getMessage());
        }
        if (!(root instanceof Map)) {
            throw new ConfigError(path + ": the config must be a JSON object");
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> m = (Map<String, Object>) root;
        return new Config(path, m, envToken, defaultStack);
    }

    private ConfigError error(String key, String what) {
        return new ConfigError(path + ": key \"" + key + "\" " + what);
    }

    private Object required(Map<String, Object> m, String key) throws ConfigError {
        if (!m.containsKey(key)) {
            throw new ConfigError(path + ": missing key \"" + key + "\"");
        }
        Object v = m.get(key);
        if (v == null) {
            throw error(key, "is null");
        }
        return v;
    }

    private String string(Map<String, Object> m, String key) throws ConfigError {
        Object v = required(m, key);
        if (!(v instanceof String)) {
            throw error(key, "must be a string, not " + Json.write(v));
        }
        return (String) v;
    }

    private int integer(Map<String, Object> m, String key, int min, int max) throws ConfigError {
        Object v = required(m, key);
        if (!(v instanceof Long)) {
            throw error(key, "must be an integer, not " + Json.write(v));
        }
        long n = (Long) v;
        if (n < min || n > max) {
            throw error(key, "= " + n + " is out of range " + min + ".." + max);
        }
        return (int) n;
    }

    private Map<String, String> peers(Object v) throws ConfigError {
        Map<String, String> out = new LinkedHashMap<>();
        if (v == null) {
            return out;
        }
        if (v instanceof String) {
            for (String item : ((String) v).split(",")) {
                item = item.trim();
                if (item.isEmpty()) {
                    continue;
                }
                int eq = item.indexOf('=');
                if (eq <= 0) {
                    throw error("peers", "item \"" + item + "\" is not name=ip:port");
                }
                out.put(item.substring(0, eq), item.substring(eq + 1));
            }
            return out;
        }
        if (v instanceof Map) {
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                Object where = e.getValue();
                if (where instanceof List && ((List<?>) where).size() == 2) {
                    List<?> pair = (List<?>) where;
                    out.put((String) e.getKey(), pair.get(0) + ":" + pair.get(1));
                } else if (where instanceof String) {
                    out.put((String) e.getKey(), (String) where);
                } else {
                    throw error("peers", "entry \"" + e.getKey() + "\" must be [ip, port] or \"ip:port\"");
                }
            }
            return out;
        }
        throw error("peers", "must be an object {name: [ip, port]} or a string \"name=ip:port,...\"");
    }
}
