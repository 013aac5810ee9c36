"""The chaos agent: one small process per host of a swarm, deployed as a global service of the swarm (service.py):
the service's task on each host (launcher.py) starts the agent as a container in the host's pid namespace and
network namespace, with the host's root as its own and the capabilities it needs, which a swarm service itself
cannot have (neither --privileged nor --pid host). It takes the fault plan of each cluster from the orchestrator over
TCP (JSON lines and a token, server.py), installs the netns fault engine's kernel rules and NFQUEUE handlers in the
member containers' namespaces of its host (engine.py, host.py), switched by the same clock gates, reports its host's
clock, relays control requests and hands out the histories; when the orchestrator's lease runs out it heals its host by
itself.

    python -m orchestration.agent --listen ADDR:PORT --token-file FILE --docker unix:///var/run/docker.sock \
        --state /var/lib/chaosbed-agent --name HOST [--exit-with PID]

(as launcher.py runs it, or by hand as root on a host). client.py is the orchestrator's side
(orchestration/backends/swarm.py), replies.py the types of the replies it reads by field, service.py deploys and
removes the agents' service.
"""
