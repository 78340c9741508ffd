// Package interop holds tests where reference CNI clients (cnitool v1.3.1)
// drive Patchbay's plugins. It has no non-test code.
package interop
