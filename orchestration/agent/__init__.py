"""The chaos agent: one small process per host of a swarm (privileged, in the host's pid and mount namespaces: a
host process, because a swarm service can be neither privileged nor in the host's pid namespace). It takes the
fault plan of each cluster from the orchestrator over TCP (JSON lines and a token, server.py), installs the netns
fault engine's kernel rules and NFQUEUE handlers in the member containers' namespaces of its host (engine.py,
host.py), switched by the same clock gates, reports its host's clock, relays control requests and hands out the
histories; when the orchestrator's lease runs out it heals its host by itself.

    python -m orchestration.agent --listen ADDR:PORT --token-file FILE --docker unix:///var/run/docker.sock \
        --state /var/lib/chaosbed-agent --name HOST [--netns NS]

client.py is the orchestrator's side (orchestration/backends/swarm.py).
"""
