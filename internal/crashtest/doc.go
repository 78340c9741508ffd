// Package crashtest checks crash consistency systematically: it runs a
// network's ADD through `patchbay add` under a tracer, SIGKILLs whichever
// process (patchbay or a plugin) makes the N-th state-changing system call
// (file creation, write, link, rename, removal, metadata change, netlink or
// nftables message) before that call runs, for N = 1, 2, ... until the ADD
// completes (then the same for DEL, after a clean ADD); after each kill it
// sends the DEL a runtime sends (then GC for
// a 1.1.0 network) and checks after each that nothing is left: every link
// (with its up state and master), address, route (in every table), policy
// rule, nftables, iptables and ip6tables rule, qdisc, file and directory
// under the state directories (the run directory, with the attachment
// lock, included) must be one that a clean ADD+DEL leaves too (a bridge,
// the IPAM lock file); every link, address, route and rule of both
// namespaces from before the first ADD must still be there as it was (a
// macvlan master; a device host-device moved, back under its name with its
// MAC, MTU, alias, master and up state); and the container's sysctls must
// hold their old values. A case may make devices and start servers its
// plugins need first (the dhcp daemon and a DHCP server): they are not
// traced.
//
// Each plugin adds one Case (see crash_test.go). The tracer is our own (see
// trace.go) rather than strace's inject=...:when=N: strace counts per
// thread and per system call, and Go spreads a process's calls over its
// threads, so N would not name one step of the ADD.
//
// The tracer knows amd64's system call numbers only: on other
// architectures the package is empty (this doc file) and its tests do not
// exist; every machine running `make test` today is amd64.
package crashtest
