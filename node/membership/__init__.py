"""A node's part in the cluster, run inside `xshard node --etcd ...`: its membership agent
(lease, role, fencing, the slot map) and the slot mover that carries out slot moves."""
