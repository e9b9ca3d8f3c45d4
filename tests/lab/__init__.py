"""A real Ethernet leaf-spine fabric in Linux network namespaces, for tests that need live LLDP, counters
and kernel ECMP (see netns_fabric.py)."""
