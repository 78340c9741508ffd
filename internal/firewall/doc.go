// Package firewall is the one way our plugins program the kernel's packet
// filter: bridge and ptp masquerade (ipMasq), bridge's macspoofchk, portmap,
// and the firewall plugin. It has four layers.
//
// Values (value.go, conditions.go). Every string that can reach a rule is a
// typed value made only by a validating constructor: Name (table and chain
// names; ParseChain for a user's iptables chain), Comment, IfName, Mark;
// conditions from configurations are parsed into Matches against a
// documented grammar (IPTablesGrammar, NFTablesGrammar). A refusal is CNI
// code 7 naming the key and the value. Control characters, options that
// are not in the grammar, chain names iptables would read as a target,
// out-of-range numbers: all refused before any kernel work.
//
// Rules (rule.go). A Rule is backend-neutral: typed Matches (Addr, Iface,
// L4, DPort, AddrType, CtState...), a Verdict (Accept, Jump, DNAT,
// Masquerade...) and a Comment. Each backend renders rules only from these
// values: the nftables renderer into the expressions nft itself generates
// (so the kernel's read-back compares equal), the iptables renderer into
// restore tokens, which the script writer checks and quotes once more. No
// value can add a line or an option.
//
// Rulesets and backends (ruleset.go, nft.go, ipt.go). A Ruleset is what one
// owner (an attachment) needs in one table: shared chains kept per Mode
// (Present, Exactly, Seed), chains of its own, and its rules in shared
// chains, all tagged with a comment its Owner selects. A Backend has three
// verbs: Apply (write only what is missing or wrong; all or nothing),
// Check, and Remove (by Selector: DEL and GC). A Selector picks rules by
// owner, or by value for layouts whose rules carry no owner (the reference
// firewall plugin's), and may Prune shared chains once nothing needs them
// (only their own scaffolding left, only expected jumps leading to them,
// made as the caller made them), so a last DEL can leave the rule set as
// it found it. The layouts stay the
// callers' (masquerade and macspoofchk keep the reference plugins' tables,
// chains and comments, so a node can switch between the reference and us).
//
// Session (session.go). One per plugin invocation: it opens at most one
// nftables netlink connection (lazily) and shares it between every
// backend and feature the invocation uses; the socket's close, which waits
// an RCU grace period after a deleting transaction, is paid once. It
// serialises our own writers with a file lock per backend and applies one
// retry policy: a write that lost a race (ENOENT, EEXIST, EBUSY, lost
// replies) is planned again from a fresh read, up to three attempts. It
// sizes the socket's buffers to each batch: the library asks for an ack of
// every message and an echo of every new rule, the kernel queues all of
// them before sendmsg returns, and with the default buffers a batch of
// ~100 port mappings lost its replies after committing (ENOBUFS) and one
// of ~200 was refused whole by sendmsg (EMSGSIZE).
//
// Features (masquerade.go, spoofchk.go) are rulesets built for one
// purpose, shared by several plugins.
//
// # Adding a backend
//
// A new rule-programming backend implements Backend (Kind, Apply, Check,
// Remove) over Ruleset and Selector, renders rules from the typed values
// only (add a render_*.go beside the two others, with a case for every
// Match and Verdict), and is returned by Session.Backend for its Kind,
// which ParseKind then accepts. It inherits validation, layouts and tests:
// TestBackendsRoundTrip applies a ruleset with every match and verdict and
// checks Check, a second Apply that writes nothing, and Remove.
//
// The firewall plugin (plugins/firewall) builds the reference firewall
// plugin's layout as Rulesets — CNI-FORWARD and the admin chain
// (iptablesAdminChainName, validated by ParseChain), ownerless per-address
// rules kept Present and removed by value, per-bridge isolation chains —
// for the iptables Backend, and the same chains in a table of its own with
// owner-tagged rules (AttachmentComment) for the nftables Backend.
// firewalld does not take rules but zone membership over D-Bus, so it
// lives in the plugin, beside the two; no rule plumbing is copied.
package firewall
