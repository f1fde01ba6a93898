"""``kubectl mco``: MCO's view of the cluster from a workstation, with kubectl's credentials."""
