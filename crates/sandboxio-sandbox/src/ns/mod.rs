//! Namespace tier: user, mount, pid, net, ipc, uts and cgroup namespaces, pivot_root,
//! Landlock and seccomp. Owned by the namespace work; see README.md.
