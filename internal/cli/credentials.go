package cli

import "syscall"

// prSetDumpable is prctl's PR_SET_DUMPABLE (linux/prctl.h).
const prSetDumpable = 4

// hideCredentials makes this process non-dumpable: its /proc/PID/environ
// and memory become readable by root only, and no process of the same user
// may ptrace it. Shell tasks run as the worker's (or the replica's) user;
// without this, one could read the API token or etcd's password from its
// parent's environment. Tasks get a dumpable process again at exec, as
// always. Best effort: where prctl fails, nothing else changes.
func hideCredentials() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0)
}
