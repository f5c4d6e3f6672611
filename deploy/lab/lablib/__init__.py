"""The lab's pieces (`deploy/lab/lab.py` puts them together): one concern per module.

common      where everything lives, the lab's addresses and names, running commands, the machine-wide lock
machine     the Debian packages the lab needs and /dev/kvm's permissions
dhcp        the one dnsmasq that gives the VMs their addresses
network     the bridge, each host's namespace and veth, the shaping of its link, the leak guard
hosts       each host's private directories, configuration and daemons
transports  ssh, tls or tcp: the users, keys, certificates and URIs of each
reach       virsh and ssh from the head node, waiting for the hosts to answer
inventory   run/inventory.toml for leasewise
power       a host that loses its power (`crash`) and comes back (`boot`)
"""
