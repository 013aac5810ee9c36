package chaosbed.jgroups;

import java.io.File;
import java.net.MalformedURLException;
import java.net.URL;
import java.util.List;

/**
 * The protocol stacks this member runs: XML files in foreign/jgroups/stacks/, which the build copies next to the
 * classes (resources chaosbed/jgroups/stacks/NAME.xml). A stack is chosen by name, or given as the path of any
 * JGroups 2.12 XML file (a value ending in ".xml"), which may use the same ${chaosbed.*} properties.
 */
public final class Stacks {
    private Stacks() {}

    public static final String DEFAULT = "unicast2";
    /** udp.xml with UNICAST2 (flawed), udp.xml itself (UNICAST: fixed), and both with short timeouts for tests. */
    public static final List<String> NAMES = List.of("unicast2", "unicast", "unicast2-fast", "unicast-fast");

    /** The stack's XML, or IllegalArgumentException naming the known stacks. */
    public static URL resolve(String stack) {
        if (stack.endsWith(".xml")) {
            File f = new File(stack);
            if (!f.isFile()) {
                throw new IllegalArgumentException("stack file " + stack + " does not exist");
            }
            try {
                return f.toURI().toURL();
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
                    + ".xml next to the classes): rebuild with `make jgroups`");
        }
        return url;
    }
}
