// Package spec holds the CNI wire format, with no I/O: spec versions, network
// configurations and conflists, results in every version's format and the
// conversions between them, the error type and its well-known codes, CNI_ARGS,
// and validation of container IDs, network names and interface names.
//
// Results are held in one version-independent model (Result, a superset of
// every version) and encoded or decoded in a particular version's format, so a
// conversion is decode-then-encode and the loss rules live in one place.
package spec
