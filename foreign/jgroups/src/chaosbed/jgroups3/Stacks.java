package chaosbed.jgroups3;

import java.io.File;
import java.net.MalformedURLException;
import java.net.URL;
import java.util.List;

/**
 * The protocol stacks of the JGroups 3 member: XML files in foreign/jgroups/stacks3/, which the build copies next to
 * the classes (resources chaosbed/jgroups3/stacks/NAME.xml), or the path of any JGroups XML file (a value ending in
 * ".xml": a user's own configuration), which the member binds to chaosbed's address through system properties.
 */
public final class Stacks {
    private Stacks() {}

    public static final String DEFAULT = "unicast3-udp-fast";
    /** Each stack with its stock timings and a -fast variant (docs/foreign/jgroups3.md, "Stacks"). */
    public static final List<String> NAMES = List.of("unicast3-udp", "unicast3-udp-fast", "unicast2-udp",
            "unicast2-udp-fast");

    /** A stack to start: its name (or file path), where its XML is, and whether it is a user's own file. */
    public static final class Stack {
        public final String name;
        public final URL url;
        public final boolean file;

        Stack(String name, URL url, boolean file) {
            this.name = name;
            this.url = url;
            this.file = file;
        }

        /** How messages name it: the file's path, or "stack NAME". */
        public String describe() {
            return file ? "stack file " + name : "stack " + name;
        }
    }

    /** The stack's XML, or IllegalArgumentException naming the known stacks. */
    public static Stack resolve(String stack) {
        if (stack.endsWith(".xml")) {
            File f = new File(stack);
            if (!f.isFile()) {
                throw new IllegalArgumentException("stack file " + stack + " does not exist");
            }
            try {
                return new Stack(stack, f.toURI().toURL(), true);
            } catch (MalformedURLException e) {
                throw new IllegalArgumentException("stack file " + stack + ": " + e);
            }
        }
        if (!NAMES.contains(stack)) {
            throw new IllegalArgumentException("unknown stack \"" + stack + "\"; stacks: " + String.join(", ", NAMES)
                    + ", or the path of a JGroups XML file (*.xml)");
        }
        URL url = Stacks.class.getResource("stacks/" + stack + ".xml");
        if (url == null) {
            throw new IllegalArgumentException("stack " + stack + " is not on the classpath (stacks/" + stack
                    + ".xml next to the classes): rebuild with `make jgroups3`");
        }
        return new Stack(stack, url, false);
    }
}
