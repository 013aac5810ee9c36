package chaosbed.jgroups5;

import java.util.Collection;
import java.util.List;
import java.util.function.Consumer;

import org.jgroups.Address;
import org.jgroups.Event;
import org.jgroups.stack.Protocol;

/**
 * An observer at the top of the stack: JGroups 5's Receiver has no suspect callback, but GMS passes the SUSPECT event
 * up (a member that VERIFY_SUSPECT2 confirmed) before it acts on it. Each suspected address goes to the member (its
 * {@code suspect} history event); everything passes on unchanged.
 */
final class SuspectWatch extends Protocol {
    private final Consumer<Address> suspected;

    SuspectWatch(Consumer<Address> suspected) {
        this.suspected = suspected;
    }

    @Override
    public Object up(Event evt) {
        if (evt.getType() == Event.SUSPECT) {
            Object arg = evt.getArg();
            Collection<?> all = arg instanceof Collection ? (Collection<?>) arg : List.of(arg);
            for (Object a : all) {
                if (a instanceof Address) {
                    suspected.accept((Address) a);
                }
            }
        }
        return up_prot.up(evt);
    }
}
