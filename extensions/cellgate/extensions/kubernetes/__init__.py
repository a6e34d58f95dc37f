"""cellgate sessions as gVisor pods on Kubernetes: one kernel pod per session, the gate where the agent runs.

``manifests`` builds the objects of one session (Pod, Secret, ConfigMap, NetworkPolicy) as plain dicts, by pure
functions; the cluster-wide objects are the files of ``deploy/kubernetes/``.
"""
