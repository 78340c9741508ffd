// Package interop holds tests where real CNI clients — the reference
// cnitool v1.3.1 and Podman 4.3 with its CNI backend — drive Patchbay's
// plugins. It has no non-test code.
package interop
